"""Byte-for-byte identity of every kernel's outputs between two trees of the lab (before / after a refactor).

    git archive 2bdebb9 | tar -x -C .carry/old          # on the CPU machine, carried to the GPU machine
    python tools/gpu_identity.py --old .carry/old --new . --out $OUT/identity.json

Each tree runs in its own child process (both packages are called `fp8lab`), on the SAME inputs: every input is
drawn on the CPU from fixed seeds with torch alone (no package code), in several distributions, then moved to the
GPU. Every variant of every kernel family runs -- quantization (per tensor, 1xG groups in both scale layouts, 128x128
blocks, dequantization, FP8 E4M3/E5M2, hardware and software conversion, NaN/Inf propagation), NVFP4 (three E2M1
conversions x two scale conversions, vector and scalar paths, dequantization), the W8A16 and W4A16 GEMVs (every
compiled config of both versions at several M and split-K widths), the W8A8 GEMMs (every kernel, both scale
layouts) and decode attention (FP8 cvt/bit and bf16 caches, both P.V layouts, D 64/128, GQA group sizes, contiguous
and paged, one and several splits) -- and its output bytes are hashed. The parent compares the hashes and prints
a short table last; the full list (and any difference, with its first differing bytes) goes to --out as JSON.
Exit status 0 when every output common to both trees is identical, 1 otherwise.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path


# ================================================================================================================
# the child: run everything in one tree
def _inputs_x(shape, dist, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    if dist == "heavy":      # log-uniform magnitudes over 12 decades and a few huge outliers
        x = x * torch.exp(torch.empty(shape).uniform_(-14, 14, generator=g))
    elif dist == "tiny":     # the subnormal end of fp32 and of the formats after scaling
        x = x * 1e-38
    elif dist == "special":  # zeros, an all-zero row, NaN and +-Inf sprinkled in
        x.view(-1)[::7] = 0.0
        x.view(-1)[5::97] = float("nan")
        x.view(-1)[11::131] = float("inf")
        x.view(-1)[13::151] = float("-inf")
        x[0] = 0.0
    return x


def _codes(shape, dist, seed):
    """E4M3 codes: all finite codes uniformly, or the codes of N(0,1) values, or mostly subnormal codes."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if dist == "uniform":
        c = torch.randint(0, 254, shape, generator=g, dtype=torch.int32)
        c = torch.where(c >= 0x7F, c + 1, c)
    elif dist == "normal":
        return (torch.randn(*shape, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    else:  # "subnormal": exponent field 0 or 1, both signs
        c = torch.randint(0, 16, shape, generator=g, dtype=torch.int32) | (torch.randint(0, 2, shape, generator=g, dtype=torch.int32) << 7)
    return c.to(torch.uint8)


def child(root: str, out: str) -> None:
    sys.path.insert(0, root)
    import torch

    import fp8lab
    from fp8lab.kernels import attention_fp8kv as att
    from fp8lab.kernels import gemm_w8a8 as G
    from fp8lab.kernels import gemv_fp8 as F8
    from fp8lab.kernels import gemv_nvfp4 as F4
    from fp8lab.kernels import nvfp4 as K4
    from fp8lab.kernels import quant as KQ

    assert Path(fp8lab.__file__).resolve().is_relative_to(Path(root).resolve()), (fp8lab.__file__, root)
    res: dict = {}
    errors: dict = {}

    def put(name, *tensors):
        h = hashlib.sha256()
        for t in tensors:
            t = t.detach().contiguous()
            h.update(str(tuple(t.shape)).encode())
            h.update(t.reshape(-1).view(torch.uint8).cpu().numpy().tobytes() if t.numel() else b"")
        res[name] = h.hexdigest()[:24]

    def run(name, fn):
        try:
            fn()
        except Exception as e:  # recorded: a variant that exists in one tree only, or a failure
            errors[name] = f"{type(e).__name__}: {str(e)[:200]}"

    dev = "cuda"
    # ---- quantization -----------------------------------------------------------------------------------------
    for dist in ("normal", "heavy", "tiny", "special"):
        for dt, tag in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
            x = _inputs_x((200, 1024), dist, 1).to(dt).to(dev)
            xo = _inputs_x((37, 1000), dist, 2).to(dt).to(dev)  # odd K: the scalar paths
            for fmt in ("e4m3", "e5m2"):
                for cvt in ("hw", "sw"):
                    k = f"quant/{tag}/{fmt}/{cvt}/{dist}"
                    run(k + "/tensor", lambda: put(k + "/tensor", *KQ.quantize_tensor(x, fmt, cvt=cvt, nonfinite="propagate")))
                    for G_ in (16, 128, 512):
                        for lay in ("row", "kmajor"):
                            run(f"{k}/group{G_}/{lay}", lambda: put(f"{k}/group{G_}/{lay}", *KQ.quantize_group(
                                x, G_, fmt, scale_layout=lay, cvt=cvt, nonfinite="propagate")))
                    run(k + "/group128/oddK", lambda: put(k + "/group128/oddK", *KQ.quantize_group(xo, 128, fmt, cvt=cvt, nonfinite="propagate")))
                    run(k + "/block", lambda: put(k + "/block", *KQ.quantize_block(x, 128, fmt, cvt=cvt, nonfinite="propagate")))
                    run(k + "/block/oddK", lambda: put(k + "/block/oddK", *KQ.quantize_block(xo, 128, fmt, cvt=cvt, nonfinite="propagate")))
            run(f"quant/{tag}/amax/{dist}", lambda: put(f"quant/{tag}/amax/{dist}", KQ.amax(x)))
            for fmt in ("e4m3", "e5m2"):
                c, s = KQ.quantize_group(x, 128, fmt, nonfinite="propagate")
                cb, sb = KQ.quantize_block(x, 128, fmt, nonfinite="propagate")
                ct, st = KQ.quantize_tensor(x, fmt, nonfinite="propagate")
                for od, otag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
                    k = f"dequant/{tag}/{fmt}/{otag}/{dist}"
                    run(k + "/group", lambda: put(k + "/group", KQ.dequantize(c, s, "group", fmt, 128, out_dtype=od)))
                    run(k + "/block", lambda: put(k + "/block", KQ.dequantize(cb, sb, "block", fmt, out_dtype=od)))
                    run(k + "/tensor", lambda: put(k + "/tensor", KQ.dequantize(ct, st, "tensor", fmt, out_dtype=od)))
            # ---- NVFP4
            for e2 in K4.E2M1_VARIANTS:
                for scv in ("hw", "sw"):
                    k = f"nvfp4/{tag}/{e2}/{scv}/{dist}"
                    run(k, lambda: put(k, *K4.quantize(x, e2m1=e2, scale_cvt=scv, nonfinite="propagate")[:3]))
                    run(k + "/oddK", lambda: put(k + "/oddK", *K4.quantize(xo, e2m1=e2, scale_cvt=scv, nonfinite="propagate")[:3]))
            q = K4.quantize(x, nonfinite="propagate")
            for od, otag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
                run(f"nvfp4/{tag}/dequant/{otag}/{dist}", lambda: put(f"nvfp4/{tag}/dequant/{otag}/{dist}", K4.dequantize(q, od)))
    xs = _inputs_x((1 << 16,), "heavy", 3).to(dev)
    for v in K4.E2M1_VARIANTS:
        run(f"e2m1/elementwise/{v}", lambda: put(f"e2m1/elementwise/{v}", K4.e2m1_encode_elementwise(xs, v)))
    for fmt in ("e4m3", "e5m2"):
        for cvt in ("hw", "sw"):
            run(f"fp8/elementwise/{fmt}/{cvt}", lambda: put(f"fp8/elementwise/{fmt}/{cvt}", KQ.encode_elementwise(xs, fmt, cvt)))

    # ---- GEMV: every compiled config of both versions -------------------------------------------------------------
    N, K = 1040, 2048
    for wdist in ("uniform", "normal", "subnormal"):
        w = _codes((N, K), wdist, 4).to(dev)
        g = torch.Generator().manual_seed(5)
        sch = (torch.rand(N, generator=g) + 0.01).to(dev)
        sbl = (torch.rand((N + 127) // 128, K // 128, generator=g) + 0.01).to(dev)
        wp = torch.randint(0, 256, (N, K // 2), generator=g, dtype=torch.int32).to(torch.uint8).to(dev)
        sc = _codes((N, K // 16), wdist, 6).to(dev)
        sc = torch.where((sc & 0x7F) == 0x7F, sc ^ 1, sc)  # finite scale codes
        for xdist in ("normal", "heavy"):
            for M in (1, 3, 8, 9, 16):
                x = _inputs_x((M, K), xdist, 7 + M).clamp(-1e30, 1e30).to(torch.bfloat16).to(dev)
                NT = 1 if M <= 8 else 2
                for (R, nt, PF) in sorted(F8.KERNELS_RNP):
                    for S in (1, 2, 4, 8):
                        if nt == NT and F8.valid_config(R, S, NT, PF):
                            for mode, s in (("channel", sch), ("block", sbl)):
                                k = f"gemv_fp8/v1/{mode}/R{R}S{S}PF{PF}/M{M}/{wdist}/{xdist}"
                                run(k, lambda: put(k, F8.gemv_fp8(x, w, s, config=(R, S, PF), version=1)))
                for (R, nt, C, D) in sorted(F8.KERNELS_V2):
                    for S in (1, 2, 4, 8):
                        if nt == NT and F8.valid_config_v2(R, S, NT, C, D, K):
                            for mode, s in (("channel", sch), ("block", sbl)):
                                k = f"gemv_fp8/v2/{mode}/R{R}S{S}C{C}D{D}/M{M}/{wdist}/{xdist}"
                                run(k, lambda: put(k, F8.gemv_fp8(x, w, s, config=(R, S, C, D), version=2)))
                for (R, nt, PF) in sorted(F4.KERNELS_RNP):
                    for S in (1, 2, 4, 8):
                        if nt == NT and F4.valid_config(R, S, NT, PF):
                            k = f"gemv_nvfp4/v1/R{R}S{S}PF{PF}/M{M}/{wdist}/{xdist}"
                            run(k, lambda: put(k, F4.gemv_nvfp4(x, wp, sc, 0.37, config=(R, S, PF), version=1)))
                for (R, nt, C, D) in sorted(F4.KERNELS_V2):
                    for S in (1, 2, 4, 8):
                        if nt == NT and F4.valid_config_v2(R, S, NT, C, D, K):
                            k = f"gemv_nvfp4/v2/R{R}S{S}C{C}D{D}/M{M}/{wdist}/{xdist}"
                            run(k, lambda: put(k, F4.gemv_nvfp4(x, wp, sc, 0.37, config=(R, S, C, D), version=2)))
                run(f"gemv_fp8/default/M{M}/{wdist}/{xdist}", lambda: put(f"gemv_fp8/default/M{M}/{wdist}/{xdist}", F8.gemv_fp8(x, w, sbl)))
                run(f"gemv_nvfp4/default/M{M}/{wdist}/{xdist}", lambda: put(f"gemv_nvfp4/default/M{M}/{wdist}/{xdist}", F4.gemv_nvfp4(x, wp, sc, 0.37)))

    # ---- W8A8 GEMM: every kernel, both activation-scale layouts ----------------------------------------------------
    for M in (128, 200):
        Nn, Kk = 256, 1024
        for dist in ("uniform", "normal"):
            a, b = _codes((M, Kk), dist, 8).to(dev), _codes((Nn, Kk), dist, 9).to(dev)
            g = torch.Generator().manual_seed(10)
            sa = (torch.rand(M, Kk // 128, generator=g) * 1e-2 + 1e-3).to(dev)
            sb = (torch.rand(Nn // 128, Kk // 128, generator=g) * 1e-2 + 1e-3).to(dev)
            for lay, sa_ in (("row", sa), ("col", sa.t().contiguous().t())):
                for kern in G.KERNELS:
                    k = f"gemm_w8a8/{kern}/M{M}/{dist}/{lay}"
                    run(k, lambda: put(k, G.gemm_w8a8(a, sa_, b, sb, kernel=kern)))

    # ---- decode attention ---------------------------------------------------------------------------------------------
    B, Hk, L = 3, 2, 300
    lens = [1, 37, 300]
    for D in (64, 128):
        for Gq in (4, 12):
            g = torch.Generator().manual_seed(11 + D + Gq)
            q = torch.randn(B, Hk * Gq, D, generator=g).to(torch.bfloat16).to(dev)
            k16 = (torch.randn(B, Hk, L, D, generator=g)).to(torch.bfloat16)
            v16 = (torch.randn(B, Hk, L, D, generator=g)).to(torch.bfloat16)
            k8, v8 = _codes((B, Hk, L, D), "normal", 12), _codes((B, Hk, L, D), "normal", 13)
            # paged: pages of 16 tokens in a fixed shuffled order
            P = 16
            npg = -(-L // P)
            perm = torch.randperm(B * npg, generator=g)
            bt = perm.view(B, npg).to(torch.int32)

            def paged(c):
                pool = torch.zeros((B * npg, Hk, P, D), dtype=c.dtype)
                cp_ = torch.nn.functional.pad(c, (0, 0, 0, npg * P - L)) if c.dtype != torch.uint8 else \
                    torch.cat([c, torch.zeros(B, Hk, npg * P - L, D, dtype=c.dtype)], dim=2)
                pool[perm] = cp_.view(B, Hk, npg, P, D).permute(0, 2, 1, 3, 4).reshape(B * npg, Hk, P, D)
                return pool
            for kind, kc, vc in (("bf16", k16, v16), ("fp8", k8, v8)):
                for layout in ("contig", "paged"):
                    kk, vv = (kc, vc) if layout == "contig" else (paged(kc), paged(vc))
                    kw = dict(block_table=bt.to(dev)) if layout == "paged" else {}
                    if kind == "fp8":
                        kw.update(k_scale=torch.tensor([0.02, 0.03]).to(dev), v_scale=0.05)
                    convs = ("cvt", "bit") if kind == "fp8" else ("cvt",)
                    for conv in convs:
                        for pv in ("va", "vb"):
                            for S in (1, 3):
                                name = f"attention/{kind}/{conv}/{pv}/D{D}/G{Gq}/{layout}/S{S}"
                                run(name, lambda: put(name, att.decode_attention(q, kk.to(dev), vv.to(dev), lens, num_splits=S,
                                                                                 conv=conv, pv=pv, **kw)))
    torch.cuda.synchronize()
    Path(out).write_text(json.dumps({"hashes": res, "errors": errors}))


# ================================================================================================================
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="root of the old tree (e.g. .carry/old from git archive)")
    p.add_argument("--new", required=True, help="root of the new tree")
    p.add_argument("--out", required=True, help="JSON report")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a.child, a.child_out)
        return 0
    runs = {}
    for tag, root in (("old", a.old), ("new", a.new)):
        if not (Path(root) / "fp8lab" / "kernels").is_dir():
            print(f"error: {root} holds no fp8lab/kernels", file=sys.stderr)
            return 2
        t0 = time.time()
        tmp = Path(a.out).with_name(f".identity_{tag}.json")
        r = subprocess.run([sys.executable, __file__, "--old", a.old, "--new", a.new, "--out", a.out,
                            "--child", str(Path(root).resolve()), "--child-out", str(tmp)],
                           env=dict(os.environ, PYTHONPATH=str(Path(root).resolve())), capture_output=True, text=True)
        if r.returncode:
            print(f"error: the {tag} tree's run failed:\n{r.stderr[-3000:]}", file=sys.stderr)
            return 2
        runs[tag] = json.loads(tmp.read_text())
        runs[tag]["seconds"] = round(time.time() - t0, 1)
        tmp.unlink()
    old, new = runs["old"]["hashes"], runs["new"]["hashes"]
    common = sorted(set(old) & set(new))
    differ = [k for k in common if old[k] != new[k]]
    fam = {}
    for k in common:
        f = "/".join(k.split("/")[:2])
        n, d = fam.get(f, (0, 0))
        fam[f] = (n + 1, d + (old[k] != new[k]))
    report = {"old": a.old, "new": a.new, "outputs_compared": len(common), "identical": len(common) - len(differ),
              "differ": differ, "only_old": sorted(set(old) - set(new)), "only_new": sorted(set(new) - set(old)),
              "errors_old": runs["old"]["errors"], "errors_new": runs["new"]["errors"],
              "seconds": {t: runs[t]["seconds"] for t in runs}, "families": {f: {"outputs": n, "differ": d} for f, (n, d) in fam.items()}}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"{'family':28s} {'outputs':>8s} {'differ':>7s}")
    for f, (n, d) in sorted(fam.items()):
        print(f"{f:28s} {n:8d} {d:7d}")
    print(f"only in old: {len(report['only_old'])}, only in new: {len(report['only_new'])}, "
          f"errors old/new: {len(report['errors_old'])}/{len(report['errors_new'])}; "
          f"seconds old/new: {report['seconds']['old']}/{report['seconds']['new']}")
    print(f"IDENTITY: {report['identical']} of {len(common)} outputs byte-identical" + ("" if not differ else f"; {len(differ)} DIFFER, e.g. {differ[:3]}"))
    return 0 if not differ and len(common) > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
