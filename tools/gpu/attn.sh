#!/usr/bin/env bash
# tools/gpu/attn.sh -- GPU run B for the attention kernels: decode versions 1 and 2 (bf16 / FP8 KV), the NVFP4-KV
# decode kernel, the chunked-prefill kernel (bf16 / FP8 KV).
#
#   cd <repo> && bash tools/gpu/attn.sh        # writes $OUT/attn/ and $OUT/attn.tgz; the last 25 lines summarize
#
# Budget: 128 s in all (every stage under `timeout`, each stage's limit is what the budget has left): compile the four
# sources in parallel (CuPy's on-disk cache serves every later process), the GPU tests of the three test files in
# parallel (kernels validated against float64 references, outputs poisoned), the tuning sweep of the decode kernels at
# 32k / D=128 (every compiled config, NVFP4, version 1, torch; validated before timed), prefill points, and -- if time
# is left -- the default decode kernels at 128k.
set -u
export PYTHONPATH=$PWD
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/attn_out}
R=$OUT/attn
mkdir -p "$R"
T0=$(date +%s)
BUDGET=${ATTN_BUDGET_S:-128}
left() { echo $(( BUDGET - ($(date +%s) - T0) - 4 )); }   # 4 s kept for the summary and the tarball
lim() { local l; l=$(left); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$R/nvidia_smi.txt" 2>&1

# 1. compile (parallel)
L=$(lim 40)
for f in attention_fp8kv.cu attention_decode_v2.cu attention_nvfp4kv.cu attention_prefill.cu; do
  timeout "$L" $PY -c "
import time; t = time.time()
from fp8lab.kernels import _cuda
_cuda.load_module('$f').get_function('decode_reduce')
print('compiled $f in %.1f s' % (time.time() - t))" > "$R/compile_${f%.cu}.log" 2>&1 &
done
wait
echo "[attn] compiled at $(( $(date +%s) - T0 )) s"

# 2. GPU tests (parallel: four processes on one GPU; version 1's decode tests apart from the rest of that file)
L=$(lim 45)
timeout "$L" $PY -m pytest -q -rf -m gpu -p no:cacheprovider tests/test_kernels_attention.py -k "v1va or v1vb" \
  > "$R/pytest_attention_v1.log" 2>&1 &
timeout "$L" $PY -m pytest -q -rf -m gpu -p no:cacheprovider tests/test_kernels_attention.py -k "not (v1va or v1vb)" \
  > "$R/pytest_attention.log" 2>&1 &
for t in attention_nvfp4 attention_prefill; do
  timeout "$L" $PY -m pytest -q -rf -m gpu -p no:cacheprovider "tests/test_kernels_$t.py" > "$R/pytest_$t.log" 2>&1 &
done
wait
echo "[attn] tests done at $(( $(date +%s) - T0 )) s"

# 3. decode tuning sweep at 32k, D = 128
L=$(lim 40)
timeout "$L" $PY -m fp8lab.kernels.bench attention --sweep --rounds 3 --out "$R/sweep.json" > "$R/sweep.log" 2>&1
echo "[attn] sweep done at $(( $(date +%s) - T0 )) s"

# 4. prefill points: where FP8 stops paying (a short, a medium and a long chunk at 32k)
L=$(lim 25)
timeout "$L" $PY -m fp8lab.kernels.bench prefill_attn --chunks 16,512,4096 --contexts 32768 --rounds 2 \
  --budget-s $(( L - 8 > 1 ? L - 8 : 1 )) --out "$R/prefill.json" > "$R/prefill.log" 2>&1
echo "[attn] prefill done at $(( $(date +%s) - T0 )) s"

# 5. if time is left: the default decode kernels at 128k (D = 128), no paged problem
L=$(lim 30)
if [ "$L" -gt 15 ]; then
  timeout "$L" $PY -m fp8lab.kernels.bench attention --contexts 131072 --shapes 128 --paged 0 --rounds 2 \
    --out "$R/decode128k.json" > "$R/decode128k.log" 2>&1
fi
echo "[attn] all stages done at $(( $(date +%s) - T0 )) s"

$PY tools/gpu/attn_summary.py "$R" > "$R/SUMMARY.txt" 2>&1
tar czf "$OUT/attn.tgz" -C "$OUT" attn
tail -n 25 "$R/SUMMARY.txt"
