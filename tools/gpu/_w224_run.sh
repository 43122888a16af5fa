set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_kernels_gemm_tma.py -k "w224 or all_versions" 2>&1 | tail -3
timeout 300 python3 -m fp8lab.kernels.gemm_prefill --tune --shapes 2048x3584x18944,2048x7168x7168,4096x3584x18944,4096x14336x4096,4096x7168x7168 --kernels wgmma_tma,wgmma_tma_w224_ss_s4_split,wgmma_tma_w224_ss_s5_split --rounds 5 --out $OUT/tune.json > $OUT/tune.log 2>&1; echo tune rc=$?
grep -E "TFLOP/s" $OUT/tune.log | grep -v "^ *bf16" | head -40
