"""Exploratory check: does the gap run's `+as_compiled` control (the cubin fp8lab.kernels._cuda.compile_for builds,
loaded through _cuda.edited_binary with no edit) run at the speed of the package's own kernel (CuPy's NVRTC path)?
Both are timed in interleaved rounds (harness.interleave) at one shape; the spread across rounds is the noise any
single comparison of the gap run carries there. Whether the two are the same machine code is what
tools/check_cupy_options.py checks.

    PYTHONPATH=. python tools/gpu/cubin_check.py 4096 4096 14336      # on a GPU (sm_90a)
"""
import sys

from fp8lab.kernels import _cuda, gemm_prefill as P, gemm_w8a8 as G, harness

kern = P.GAP_KERNELS[0]
M, N, K = (int(x) for x in (sys.argv[1:4] if len(sys.argv) > 3 else (4096, 4096, 14336)))
sh = P._Shape(M, N, K, need_bf16=False)
base = [G.prepare(a, sh.sa, b, sh.sb, kernel=kern) for a, b in zip(sh.A, sh.B)]
with _cuda.edited_binary("gemm_w8a8_tma.cu", lambda cubin: cubin):
    same = [G.prepare(a, sh.sa, b, sh.sb, kernel=kern) for a, b in zip(sh.A, sh.B)]
mc = P._min_calls(sh.flops)
timers = {"cupy": lambda: P._timed(base, mc),
          "compile_for": lambda: P._timed(same, mc)}
for name, t in harness.interleave(timers, rounds=8).items():
    print(f"{M}x{N}x{K} {name:12s} median {t.median:7.1f} us  q1-q3 {t.q1:.1f}-{t.q3:.1f}  min-max {t.min:.1f}-{t.max:.1f}")
