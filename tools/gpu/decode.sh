#!/usr/bin/env bash
# GPU run B for the decode path (gemv_v3, decode layer): validation, GPU tests, a tuning sweep, one layer point per dtype.
# Run from the repository root on the GPU machine:  bash tools/gpu/decode.sh      (about 140 s)
# Writes $OUT/decode/ and $OUT/decode.tgz; prints a <= 25-line summary last.
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
D=$OUT/decode
mkdir -p "$D"
T0=$(date +%s)
step() { echo "== $1 ($(( $(date +%s) - T0 )) s)" | tee -a "$D/steps.log"; }

step "identity"
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv; git log -1 --format=%H 2>/dev/null;
  python3 -c "import torch, cupy; print(torch.__version__, cupy.__version__)"; } > "$D/identity.txt" 2>&1

step "GPU tests: gemv_v3 + decode layer (compiles gemv_v3.cu, decode_layer.cu, attention_fp8kv.cu; CuPy caches them)"
timeout 58 python3 -u -m pytest -v -m gpu -p no:cacheprovider -k "v3 or decode_layer" \
    tests/test_kernels_gemm.py tests/test_decode_layer.py > "$D/pytest.txt" 2>&1
echo "pytest rc=$?" >> "$D/steps.log"

step "sweep: every v3 config at 3 shapes x M = 1, 8, 16, interleaved with cuBLAS / _scaled_mm (v1, v2: run A)"
timeout 46 python3 -u -m fp8lab.kernels.bench gemm --only decode --no-smoke --no-pytest --versions 3 --tune 3 \
    --shapes 28672x8192,18944x3584,4096x14336 --m 1,8,16 --rounds 3 --budget-s 38 \
    --out "$D/gemm_sweep.json" > "$D/gemm_sweep.log" 2>&1
echo "sweep rc=$?" >> "$D/steps.log"

step "decode layer: batch 1, context 1k, every variant (validated, then timed), per-kernel breakdown"
timeout 27 python3 -u -m fp8lab.kernels.bench layer --batch 1 --context 1024 --rounds 3 --budget-s 20 \
    --out "$D/layer_b1.json" > "$D/layer_b1.log" 2>&1
echo "layer rc=$?" >> "$D/steps.log"

step "summary"
python3 tools/gpu/decode_summary.py "$D" > "$D/summary.txt" 2>&1
tar czf "$OUT/decode.tgz" -C "$OUT" decode
cat "$D/summary.txt" | tail -25
