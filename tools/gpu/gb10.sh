#!/usr/bin/env bash
# GPU run B, the GB10-path helper: on the H200, (1) the NVFP4 quantizer's GPU tests (the Inf-only block policy fix
# and the quantizer body shared with the hardware-E2M1 variant), (2) the GB10 CPU references checked against what
# the portable kernels compute (the W4A4 emulation kernel bit for bit against mma_reference's per-block rounding, end
# to end from bf16; the E2M1 model against the portable conversion), (3) the 3-stage QMMA W8A8 kernel against its
# reference (emulated on sm_90, native on a GB10), (4) tools/check_cupy_options.py on two sources. No timing: the
# GB10-native kernels cannot run on an H200, and nothing here claims a GB10 number.
#
#   cd .carry/gb10 && bash tools/gpu/gb10.sh        # writes $OUT/gb10/ and $OUT/gb10.tgz; budget 50 s
set -u
export PYTHONPATH=$PWD
OUTD="${OUT:-/tmp}/gb10"
mkdir -p "$OUTD"
T0=$(date +%s)
left() { echo $(( 50 - ($(date +%s) - T0) )); }

# 1. compile the modules the tests load, in parallel, into CuPy's disk cache (the tests then load the cubins)
timeout 22 python - > "$OUTD/precompile.log" 2>&1 <<'EOF'
import multiprocessing as mp, time

def build(f):
    t = time.time()
    try:
        from fp8lab.kernels import _cuda
        _cuda.load_module(f).compile()
        return f"{f}: compiled in {time.time() - t:.1f} s"
    except Exception as e:
        return f"{f}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:100]}"

if __name__ == "__main__":
    with mp.get_context("fork").Pool(4) as p:
        for line in p.map(build, ["quant.cu", "nvfp4.cu", "gemm_w4a4_emu.cu", "gemm_w8a8.cu"]):
            print(line, flush=True)
EOF
echo "precompile rc=$?" >> "$OUTD/precompile.log"

# 2. the GPU tests (explicit files: the device lacks lm_eval / torchao / compressed_tensors)
T=$(left); [ "$T" -gt 30 ] && T=30
timeout "$T" python -m pytest -q -m gpu -p no:cacheprovider -rfE \
  tests/test_kernels_gb10.py \
  tests/test_kernels_quant.py::test_nvfp4_quant_bit_exact \
  tests/test_kernels_quant.py::test_nvfp4_dequant_and_given_global_amax \
  tests/test_kernels_quant.py::test_e2m1_variants_agree_on_all_fp32 \
  tests/test_kernels_gemm.py::test_gemm_w8a8_matches_reference \
  -k "not test_gemm_w8a8_matches_reference or mma_fp8_s3" > "$OUTD/pytest.log" 2>&1
echo "pytest rc=$?" >> "$OUTD/pytest.log"

# 3. is the SASS the lab reads offline the SASS CuPy runs? (two small sources; the tool's fix is what is tested)
T=$(left)
if [ "$T" -gt 5 ]; then
  timeout $(( T - 2 )) python tools/check_cupy_options.py gemm_w4a4_emu.cu gemm_w8a8.cu > "$OUTD/check_cupy_options.log" 2>&1
  echo "check_cupy_options rc=$?" >> "$OUTD/check_cupy_options.log"
else
  echo "skipped: out of time" > "$OUTD/check_cupy_options.log"
fi

tar czf "${OUT:-/tmp}/gb10.tgz" -C "${OUT:-/tmp}" gb10
# short summary, last
echo "== gb10 run B ($(( $(date +%s) - T0 )) s) =="
grep -E "compiled|FAILED|rc=" "$OUTD/precompile.log" | head -6
grep -E "^(FAILED|ERROR)" "$OUTD/pytest.log" | head -8
grep -E "passed|failed|skipped|error|rc=" "$OUTD/pytest.log" | tail -2
grep -E "identical|differ|could not|CHECK|error|rc=" "$OUTD/check_cupy_options.log" | head -5
