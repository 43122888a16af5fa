#!/usr/bin/env bash
# Run B for the prefill GEMM (version C, gemm_w8a8_tma.cu): validate every rung, then tune, in <= 120 s.
#
#   cd <repo> && bash tools/gpu/prefill.sh            # writes $OUT/prefill/ and $OUT/prefill.tgz, prints a summary
#
# 1. device + tensor-map probes + smoke of every TMA kernel in child processes (a hang or fault marks that kernel
#    failed and skips it everywhere after);  2. the GPU tests of tests/test_kernels_gemm_tma.py (float64 reference,
#    poisoned outputs, unaligned shapes, multi-tile persistent grids, outliers gate, bit equality with wgmma_ws);
# 3. the sweep of tools/gpu/prefill_runb.py (ladder + variants + anchors at 7 shapes, JSON after every shape);
# 4. a <= 25-line summary, last.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/prefill_out}
export OUT
# one compile shared by the child processes below (CuPy's on-disk cubin cache, in a known place)
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/fp8lab_prefill_cupy_cache}
D="$OUT/prefill"
mkdir -p "$D"
T0=$(date +%s)
BUDGET=${PREFILL_BUDGET_S:-120}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

# 1. device, smoke (each kernel once on a small problem, in a child process with a timeout; its first TMA kernel
#    runs the tensor-map probes, tma.check_device)
timeout 50 python3 - > "$D/smoke.log" 2>&1 <<'EOF'
import json, subprocess
from pathlib import Path
from fp8lab.kernels import gemm_smoke, gemm_w8a8 as G
D = Path(__import__("os").environ["OUT"]) / "prefill"
try:
    name = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu",
                           "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
except OSError as e:
    name = f"nvidia-smi: {e}"
(D / "device.txt").write_text(name + "\n")
names = list(G.TMA_KERNELS)
st = gemm_smoke.smoke_all(names, timeout=25)
(D / "smoke.json").write_text(json.dumps(st, indent=1))
EOF
echo "smoke rc=$? after $(( $(date +%s) - T0 )) s" >> "$D/steps.txt"
SKIP=$(python3 -c "
import json,sys
try: d=json.load(open('$D/smoke.json'))
except Exception: sys.exit(0)
print(','.join(k for k,v in d.items() if not v['ok']))")
# 2. GPU tests
FP8LAB_SKIP_KERNELS="$SKIP" timeout 38 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_gemm_tma.py \
    > "$D/pytest.txt" 2>&1
echo "pytest rc=$? after $(( $(date +%s) - T0 )) s" >> "$D/steps.txt"
grep -E "[0-9]+ (passed|failed|skipped)|TIMED|Timeout" "$D/pytest.txt" | tail -1 > "$D/pytest_line.txt" || true
[ -s "$D/pytest_line.txt" ] || echo "no pytest summary line (timed out?)" > "$D/pytest_line.txt"

# 3. the sweep, in what time is left
T=$(( $(left) - 8 ))
if [ "$T" -gt 10 ]; then
    timeout "$T" python3 tools/gpu/prefill_runb.py tune --out "$D" --skip "$SKIP" > "$D/tune.log" 2>&1
    echo "tune rc=$? after $(( $(date +%s) - T0 )) s (limit $T s)" >> "$D/steps.txt"
fi

# 4. summary (last)
timeout 20 python3 tools/gpu/prefill_runb.py summary --out "$D" > "$D/summary_print.txt" 2>&1
tar czf "$OUT/prefill.tgz" -C "$OUT" prefill
echo "== prefill run B ($(( $(date +%s) - T0 )) s; skip: ${SKIP:-none}) =="
tail -n 3 "$D/steps.txt"
tail -n 21 "$D/summary_print.txt"
