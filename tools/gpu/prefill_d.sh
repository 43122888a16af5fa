#!/usr/bin/env bash
# Prefill GEMM, version D (two partial-sum buffers): validate, time against version C and the anchors, profile.
#
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/prefill_d.sh     # writes $OUT/: pytest, tune.json, ncu.txt; prints a summary
set -u
export PYTHONPATH=$PWD
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/fp8lab_cupy_cache}
OUT=${OUT:-/tmp/prefill_d}
mkdir -p "$OUT"
T0=$(date +%s)
SHAPES=${SHAPES:-4096x7168x7168,2048x7168x7168,8192x4096x4096,4096x18944x3584,2048x3584x18944,512x4096x14336}
KERNELS=${KERNELS:-wgmma_tma,wgmma_tma_c,wgmma_tma_d,wgmma_tma_p,wgmma_tma_p1,wgmma_tma_p7,wgmma_tma_p_tmastore}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader > "$OUT/smi.txt" 2>&1
[ "${TESTS:-1}" = 1 ] && timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/test_kernels_gemm_tma.py > "$OUT/pytest_tma.txt" 2>&1
echo "pytest rc=$? at $(( $(date +%s) - T0 )) s: $(tail -1 "$OUT/pytest_tma.txt")"
grep -E "^FAILED|^ERROR" "$OUT/pytest_tma.txt" | head -8
[ "${TUNE:-1}" = 1 ] && timeout ${TUNE_S:-240} python3 -m fp8lab.kernels.gemm_prefill --tune --shapes "$SHAPES" --kernels "$KERNELS" \
    --out "$OUT/tune.json" > "$OUT/tune.log" 2>&1
echo "tune rc=$? at $(( $(date +%s) - T0 )) s"
if [ "${DIAG:-0}" = 1 ]; then
  # leave-one-out (the promotion cut out) beside the anchors: the package's gap run (gemm_prefill.bench_gap)
  timeout 200 python3 -m fp8lab.kernels.bench gemm --no-pytest --no-smoke --only gap --prefill-shapes 4096x7168x7168 \
      --out "$OUT/gap.json" > "$OUT/diag.txt" 2>&1
  echo "diag rc=$? at $(( $(date +%s) - T0 )) s"; cat "$OUT/diag.txt" | tail -12
fi
if [ "${NCU:-1}" = 1 ]; then
  timeout 150 ncu --clock-control none -k "regex:w8a8_tma|nvjet|sm90|gemm|cutlass" --launch-count 12 --print-details all \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section InstructionStats \
      python3 tools/gpu/ncu_prefill.py 4096x7168x7168 ${NCU_KERNELS:-wgmma_tma_e,wgmma_tma_p,blockwise} > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$? at $(( $(date +%s) - T0 )) s"
fi
python3 - "$OUT/tune.json" <<'PY'
import json, sys, collections
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no tune.json:", e); sys.exit(0)
tab = collections.defaultdict(dict)
for r in d["results"]:
    tab[r["shape"]][r["kernel"].split(" ")[0]] = r.get("tflops")
for sh, t in tab.items():
    blk = t.get("scaled_mm_blockwise") or float("nan")
    print(sh, " ".join(f"{k.replace('w8a8_wgmma_', '')}={v:.0f}({v / blk:.2f})" for k, v in sorted(t.items()) if v))
PY
