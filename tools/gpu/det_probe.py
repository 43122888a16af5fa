"""Exploratory: are version 3's outputs the same bits call after call at the default config (stream-K)?"""
import sys

import torch

sys.path.insert(0, "tools/gpu")
import timeline_probe as T  # noqa: E402

from fp8lab.kernels import _cuda, harness  # noqa: E402
from fp8lab.kernels import gemm_decode as GD  # noqa: E402
from fp8lab.kernels import gemv_v3 as V3  # noqa: E402

for (N, K) in [(28672, 8192), (14336, 4096)]:
    w8, sch, _, w4, gs, wbf = GD.shape_weights(N, K)
    for M in (1, 16):
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        for fmt in ("fp8c", "nvfp4"):
            cfg, R = GD.v3_candidates(fmt, M, False)[0]
            p = V3.pack_nvfp4(*w4[0], gs, R=R) if fmt == "nvfp4" else V3.pack_fp8(w8[0], sch, R=R)
            plain = V3.prepare(x, p, config=cfg)
            with _cuda.patched_sources(T.patches(fmt)):
                inst = V3.prepare(x, p, config=cfg)
                inst()
            outs = {}
            for name, l in (("plain", plain), ("inst", inst)):
                ys = []
                for _ in range(20):
                    harness.poison_(l.out)
                    ys.append(l().clone())
                outs[name] = ys
                same = sum(torch.equal(ys[0].view(torch.int16), y.view(torch.int16)) for y in ys)
                print(f"{fmt} M={M} N={N} K={K} {name}: {same}/20 calls equal to the first; info {l.info['whole_groups']} smax {l.info['smax']}")
            d = (outs["plain"][0].float() - outs["inst"][0].float()).abs()
            print(f"   plain vs inst: {int((d > 0).sum())} differing of {d.numel()}, max abs diff {float(d.max()):.3g}, "
                  f"max |y| {float(outs['plain'][0].float().abs().max()):.3g}")
