"""Fingerprint what every compiled configuration of the decode kernels computes: run each on fixed-seed inputs and
hash its output bytes. Two trees that print the same digests compute bit-identical outputs on those inputs.

The check behind a source refactor that must not change results (shared headers, helpers moved between files):
run it with the package before and after the change on the same GPU and compare.

    PYTHONPATH=<old tree> python tools/gpu/digest.py --out old.json
    PYTHONPATH=<new tree> python tools/gpu/digest.py --out new.json --compare old.json

Covers: NVFP4 GEMV versions 1 and 2 (every compiled (R, NT, PF) / (R, NT, C, D) at M = 1 and 16), FP8/bf16 decode
attention version 1 (every conversion x P.V layout x head dim x group kind) and version 2 (every compiled config),
and NVFP4-KV attention (every compiled config), contiguous and paged. Each output is also checked to be finite.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys

import torch


def _h(t: torch.Tensor) -> str:
    if not torch.isfinite(t.float()).all():
        raise SystemExit("a kernel output holds a non-finite value: the kernel is wrong, not only changed")
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def gemv_digests(g: torch.Generator) -> dict:
    from fp8lab.kernels import gemv_nvfp4 as gv

    out = {}
    N, K = 1000, 2048  # N not a multiple of the row tiles: the clamped rows are exercised
    w, sc = gv.random_nvfp4(N, K, device="cuda", generator=g)
    gs = 0.37
    for M in (1, 16):
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        NT = 1 if M <= 8 else 2
        for R, nt, PF in sorted(gv.KERNELS_RNP):
            if nt == NT:
                for S in (1, 4):
                    if gv.valid_config(R, S, NT, PF):
                        out[f"gemv_nvfp4 v1 M{M} R{R} S{S} PF{PF}"] = _h(gv.gemv_nvfp4(x, w, sc, gs, config=(R, S, PF), version=1))
        for R, nt, C, D in sorted(gv.KERNELS_V2):
            if nt == NT:
                for S in (1, 4):
                    if gv.valid_config_v2(R, S, NT, C, D, K):
                        out[f"gemv_nvfp4 v2 M{M} R{R} S{S} C{C} D{D}"] = _h(gv.gemv_nvfp4(x, w, sc, gs, config=(R, S, C, D), version=2))
    return out


def attention_digests(g: torch.Generator) -> dict:
    from fp8lab.kernels import attention_fp8kv as att
    from fp8lab.kernels import attention_nvfp4kv as nv
    from fp8lab.kernels.reference import quantize_kv

    out = {}
    B, Hk, L = 2, 2, 1000
    lens = [1000, 517]
    for D in att.HEAD_DIMS:
        k = torch.randn(B, Hk, L, D, device="cuda", generator=g).to(torch.bfloat16)
        v = torch.randn(B, Hk, L, D, device="cuda", generator=g).to(torch.bfloat16)
        kc, ks = quantize_kv(k, "head")
        vc, vs = quantize_kv(v, "head")
        k4, v4 = nv.quantize_kv_nvfp4(k), nv.quantize_kv_nvfp4(v)
        for gk, G in (("g8", 8), ("g16", 16)):
            q = torch.randn(B, Hk * G, D, device="cuda", generator=g).to(torch.bfloat16)
            for layout in ("contiguous", "paged"):
                if layout == "paged":
                    def paged(c):  # the same shuffled page order (block table) for every cache
                        return att.to_paged(c, 64, lens, generator=torch.Generator().manual_seed(1))
                    (kp, bt), (vp, _), (bkp, _), (bvp, _) = paged(kc), paged(vc), paged(k), paged(v)
                    args8, argsb, kw = (q, kp, vp, lens), (q, bkp, bvp, lens), dict(block_table=bt)
                else:
                    args8, argsb, kw = (q, kc, vc, lens), (q, k, v, lens), {}
                tag = f"D{D} {gk} {layout}"
                for pv in att.PV_LAYOUTS:
                    out[f"attn v1 bf16 {pv} {tag}"] = _h(att.decode_attention(*argsb, **kw, pv=pv, version=1))
                    for conv in att.FP8_CONVS:
                        out[f"attn v1 fp8{conv} {pv} {tag}"] = _h(att.decode_attention(
                            *args8, **kw, k_scale=ks, v_scale=vs, conv=conv, pv=pv, version=1))
                for ver, kernels in ((2, att.V2_KERNELS), (3, att.V3_KERNELS if att.v3_available() else ())):
                    for f, d, gg, *cfg in sorted(kernels):
                        if d != D or gg != gk or f == "nvfp4":
                            continue
                        fp8 = dict(k_scale=ks, v_scale=vs, conv=f[3:]) if f != "bf16" else {}
                        y = att.decode_attention(*(argsb if f == "bf16" else args8), **kw, **fp8, version=ver,
                                                 config=tuple(cfg))
                        out[f"attn v{ver} {f} {tuple(cfg)} {tag}"] = _h(y)
                if layout == "contiguous":
                    for f, d, gg, *cfg in sorted(nv.KERNELS):
                        if d == D and gg == gk:
                            out[f"attn nvfp4kv {tuple(cfg)} {tag}"] = _h(nv.decode_attention_nvfp4(
                                q, k4, v4, lens, config=tuple(cfg), version=2))
                    for f, d, gg, *cfg in sorted(att.V3_KERNELS) if att.v3_available() else ():
                        if f == "nvfp4" and d == D and gg == gk:
                            out[f"attn v3 nvfp4kv {tuple(cfg)} {tag}"] = _h(nv.decode_attention_nvfp4(
                                q, k4, v4, lens, config=tuple(cfg), version=3))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="write the digests here (JSON)")
    ap.add_argument("--compare", help="a digest file from another tree: report every difference, exit 1 on any")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("digest needs a CUDA GPU", file=sys.stderr)
        return 2
    import fp8lab

    g = torch.Generator(device="cuda").manual_seed(a.seed)
    d = {"package": fp8lab.__file__, "gpu": torch.cuda.get_device_name(), "digests": {**gemv_digests(g), **attention_digests(g)}}
    with open(a.out, "w") as f:
        json.dump(d, f, indent=1, sort_keys=True)
    print(f"{len(d['digests'])} outputs hashed ({d['package']})")
    if a.compare:
        ref = json.load(open(a.compare))["digests"]
        mine = d["digests"]
        missing = sorted(set(ref) ^ set(mine))
        diff = sorted(k for k in set(ref) & set(mine) if ref[k] != mine[k])
        for k in missing:
            print(f"only in one tree: {k}")
        for k in diff:
            print(f"DIFFERENT: {k}")
        print(f"{len(set(ref) & set(mine)) - len(diff)} identical, {len(diff)} different, {len(missing)} unmatched")
        return 1 if diff or missing else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
