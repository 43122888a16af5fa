"""Exploratory check: does the gap run's `+as_compiled` control (the cubin fp8lab.kernels._cuda.compile_for builds,
loaded through _cuda.edited_binary with no edit) run at the speed of the package's own kernel (CuPy's NVRTC path)?
Both are timed in alternating order over eight rounds at one shape; the spread across rounds is the noise any single
comparison of the gap run carries at that shape.

    PYTHONPATH=. python tools/gpu/cubin_check.py 4096 4096 14336      # on a GPU (sm_90a)
"""
import statistics
import sys

from fp8lab.kernels import _cuda, gemm_prefill as P, gemm_w8a8 as G, harness

kern = P.GAP_KERNELS[0]
M, N, K = (int(x) for x in (sys.argv[1:4] if len(sys.argv) > 3 else (4096, 4096, 14336)))
sh = P._Shape(M, N, K, need_bf16=False)
base = [G.prepare(a, sh.sa, b, sh.sb, kernel=kern) for a, b in zip(sh.A, sh.B)]
with _cuda.edited_binary("gemm_w8a8_tma.cu", lambda cubin: cubin):
    same = [G.prepare(a, sh.sa, b, sh.sb, kernel=kern) for a, b in zip(sh.A, sh.B)]
mc = P._min_calls(sh.flops)
t = {"cupy": [], "compile_for": []}
for r in range(8):
    for name in (["cupy", "compile_for"] if r % 2 == 0 else ["compile_for", "cupy"]):
        t[name].append(harness.graph_time_us(base if name == "cupy" else same, min_calls=mc, rep=10)[0])
for k, v in t.items():
    print(f"{M}x{N}x{K} {k:12s} median {statistics.median(v):7.1f} us  rounds {[round(x, 1) for x in v]}")
