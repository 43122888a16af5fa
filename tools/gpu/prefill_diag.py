"""Leave-one-out timing of the TMA W8A8 kernel (a diagnosis, not a result: the variants compute wrong numbers).

    python3 tools/gpu/prefill_diag.py 4096x7168x7168 wgmma_tma_p_tmastore,wgmma_tma_e [full,no_promote,...]

Each variant patches a copy of fp8lab/kernels (the .cu text) and loads it in place of the package's source:
  full        the kernel as it is
  no_promote  the FP32 promotion cut to one FFMA per k-block: what the tensor cores alone take
  no_scales   the per-k-block scale loads replaced by constants (the promotion FFMAs stay)
Unpatched (`full`), every kernel after the first is checked bit for bit against the first on poisoned outputs
(kernels of the same arithmetic, e.g. wgmma_tma_e_ss_tmastore and its staggered _sg1 / _sg2).
Variants are timed interleaved (CUDA graphs, rounds), median and spread printed; TFLOP/s on 2 M N K.
"""
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from fp8lab.kernels import _cuda, harness
from fp8lab.kernels import gemm_w8a8 as G
from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels.gemm_anchors import scaled_mm_calls

PATCHES = {
    "full": [],
    "no_promote": [("wgmma.cuh", "for (int j = 0; j < 16; ++j) promote4(acc + 4 * j, p + 4 * j, s0, s1);",
                    "acc[0] = fmaf(p[0] + p[63], s0, acc[0]);")],  # one FFMA keeps the wgmma results live
    "no_scales": [("gemm_w8a8_tma.cu", "__ldg(sb + (size_t)nbk * KB + kb)", "1.f"),
                  ("gemm_w8a8_tma.cu", "__ldg(sa + r0 * sa_sm + kb * sa_sk)", "1.f"),
                  ("gemm_w8a8_tma.cu", "__ldg(sa + (r0 + 8) * sa_sm + kb * sa_sk)", "1.f")],
}
ORIG = _cuda.KERNEL_DIR


def module_dir(variant: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"fp8lab_{variant}_"))
    for f in ORIG.iterdir():
        if f.suffix in (".cu", ".cuh"):
            shutil.copy(f, d / f.name)
    for fname, old, new in PATCHES[variant]:
        text = (d / fname).read_text()
        assert old in text, (variant, old)
        (d / fname).write_text(text.replace(old, new))
    return d


def main():
    M, N, K = (int(v) for v in sys.argv[1].split("x"))
    kernels = sys.argv[2].split(",")
    torch.manual_seed(0)
    nset = 3
    A = [F8.random_codes(M, K) for _ in range(nset)]
    B = [F8.random_codes(N, K) for _ in range(nset)]
    sa = torch.rand(M, -(-K // 128), device="cuda") * 1e-2 + 1e-3
    sb = torch.rand(-(-N // 128), -(-K // 128), device="cuda") * 1e-2 + 1e-3
    timers, ref = {}, {}
    blk = [scaled_mm_calls("blockwise", a.view(torch.float8_e4m3fn), b.view(torch.float8_e4m3fn), sa, sb)[0]
           for a, b in zip(A, B)]
    timers["scaled_mm_blockwise (anchor)"] = lambda: harness.graph_time_us(blk, min_calls=6, rep=10)
    variants = sys.argv[3].split(",") if len(sys.argv) > 3 else list(PATCHES)
    variants = ["full"] + [v for v in variants if v != "full"]  # unpatched first: the reference of the bit checks
    for variant in variants:
        _cuda.KERNEL_DIR = module_dir(variant)
        _cuda.load_module.cache_clear()
        for k in kernels:
            launches = [G.prepare(a, sa, b, sb, kernel=k) for a, b in zip(A, B)]
            for la in launches:
                la.out.fill_(float("nan"))  # poisoned: a tile the kernel skips shows
                la()
            torch.cuda.synchronize()
            if variant == "full" and not ref:
                ref[k] = [la.out.clone() for la in launches]
            elif variant == "full":
                (k0, r0), = ref.items()
                same = all(torch.equal(la.out, r) for la, r in zip(launches, r0))
                print(f"{k}: {'bit-identical to' if same else 'DIFFERS from'} {k0}", flush=True)
            timers[f"{k} {variant}"] = lambda ls=launches: harness.graph_time_us(ls, min_calls=6, rep=10)
    t = harness.interleave(timers, rounds=5)
    flops = 2 * M * N * K
    for name, tm in t.items():
        print(f"{name:40s} {tm.median:8.1f} us  {flops / tm.median / 1e6:6.0f} TFLOP/s  (q1 {tm.q1:.1f}, q3 {tm.q3:.1f})")


if __name__ == "__main__":
    main()
