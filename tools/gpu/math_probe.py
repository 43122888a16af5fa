"""Is version 3's arithmetic what holds the decode GEMV below the memory limit? (a diagnosis; prints, writes nothing)

    python tools/gpu/math_probe.py 18944x3584,28672x8192 1,16 fp8c|nvfp4        # on the GPU
    python tools/gpu/math_probe.py --check                                       # compile every variant (no GPU)

Version 3 at its default config, and copies of it compiled from an edited gemv_v3_common.cuh in which only the
arithmetic on the weight words changes (the loads, the stream-K split, the epilogue stay): the copies are NOT
correct kernels, they time what the loads cost with less work behind them.
  full     the kernel as shipped (validated against the float64 reference first)
  nomul    FP8: the two exact bf16x2 multiplies by 2**120 per 4 codes dropped (what folding that power of two
           into the per-channel scale would save); NVFP4: the four multiplies by the block scale dropped
  mask     FP8: the widening cut to two integer ops per 4 codes (a lower bound for any bit-move widening)
  nomma    widening kept, each MMA replaced by an XOR of its four A registers into the accumulators
  xor      no widening and no MMA: every weight word XORed into the accumulators (the loads alone)
Beside them, in the same interleaved rounds: `_scaled_mm` tensorwise FP8 (M padded to 16) and bf16 F.linear.
"""
import math
import re
import sys
import tempfile
from pathlib import Path

from fp8lab.kernels import _cuda

HDR = "gemv_v3_common.cuh"

# Each edit: (pattern in the shipped header, replacement). Patterns must match exactly once.
FP8_WIDEN = re.compile(r"(void v3_e4m3x4\(u32 w, u32& p01, u32& p23\) \{)(.*?)(\n\})", re.S)
FP8_MMA = "mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);\n        }\n    }\n}\n\n// NVFP4"
NV_MUL = re.compile(r"const u32 a0 = bf16x2_mul\(p\[0\], sg\), a1 = bf16x2_mul\(p\[1\], s8\);\s*"
                    r"const u32 a2 = bf16x2_mul\(p\[2\], sg\), a3 = bf16x2_mul\(p\[3\], s8\);")
NV_MMA = "mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);\n        }\n    }\n}\n\n// ---- the epilogue"
XOR_MMA = ("d[nt][0] = __int_as_float(__float_as_int(d[nt][0]) ^ a0 ^ b0); "
           "d[nt][1] = __int_as_float(__float_as_int(d[nt][1]) ^ a1 ^ b1); "
           "d[nt][2] = __int_as_float(__float_as_int(d[nt][2]) ^ a2); "
           "d[nt][3] = __int_as_float(__float_as_int(d[nt][3]) ^ a3);")


def edited_header(variant: str, fmt: str) -> str:
    src = (_cuda.KERNEL_DIR / HDR).read_text()

    def sub(pat, rep, s):
        if isinstance(pat, str):
            assert s.count(pat) == 1, pat
            return s.replace(pat, rep)
        out, n = pat.subn(rep, s)
        assert n == 1, pat.pattern
        return out

    if variant == "full":
        return src
    if fmt == "nvfp4":
        if variant == "nomul":
            return sub(NV_MUL, "const u32 a0 = p[0] ^ sg, a1 = p[1] ^ s8, a2 = p[2], a3 = p[3];", src)
        if variant == "nomma":
            return sub(NV_MMA, NV_MMA.replace("mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);", XOR_MMA), src)
        if variant == "xor":
            src = sub(NV_MUL, "const u32 a0 = word_of(w, s) ^ sg, a1 = s8, a2 = 0u, a3 = 0u;", src)
            src = src.replace("        e2m1x8_to_bf16(word_of(w, s), p);  // (row g k0,k1) (row g+8 k0,k1) (row g k2,k3) (row g+8 k2,k3)\n", "")
            return sub(NV_MMA, NV_MMA.replace("mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);", XOR_MMA), src)
    else:
        if variant == "nomul":
            return sub(FP8_WIDEN, r"\1\n    p01 = w & 0x87F087F0u;\n    p23 = ((w & 0x080F080Fu) << 4) | ((w >> 4) & 0x07000700u);\3", src)
        if variant == "mask":
            return sub(FP8_WIDEN, r"\1\n    p01 = w & 0x87F087F0u;\n    p23 = (w << 4) & 0x87F087F0u;\3", src)
        if variant == "nomma":
            return sub(FP8_MMA, FP8_MMA.replace("mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);", XOR_MMA), src)
        if variant == "xor":
            src = sub(FP8_WIDEN, r"\1\n    p01 = w;\n    p23 = 0u;\3", src)
            return sub(FP8_MMA, FP8_MMA.replace("mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);", XOR_MMA), src)
    raise ValueError(f"no variant {variant!r} for {fmt}")


VARIANTS = {"fp8c": ("full", "nomul", "mask", "nomma", "xor"), "nvfp4": ("full", "nomul", "nomma", "xor")}


def options(tmp: Path, defines: str, arch: str = "sm_90a") -> tuple[str, ...]:
    base = [o for o in _cuda.compile_options("gemv_v3.cu", arch) if not o.startswith("-DFP8LAB_GEMV_V3=")]
    return (f"-I{tmp}",) + tuple(base) + (f"-D{defines}",)


def check():
    from fp8lab.kernels import gemv_v3 as V3, nvrtc
    from fp8lab.kernels.sources import instances

    src = (_cuda.KERNEL_DIR / "gemv_v3.cu").read_text()
    for fmt, vs in VARIANTS.items():
        C, P, _, _ = V3.default_config(fmt, 1)
        d = instances("FP8LAB_GEMV_V3", "GEMV3", {(V3._FMT_ID[fmt], 1, nt, C, P, 0, 0) for nt in (1, 2)})
        for v in vs:
            with tempfile.TemporaryDirectory() as tmp:
                Path(tmp, HDR).write_text(edited_header(v, fmt))
                cubin, _ = nvrtc.compile_cubin(src, options(Path(tmp), d) + _cuda.cupy_appended_options(90), name=v)
                print(f"{fmt} {v}: {len(cubin)} bytes")


def run():
    import torch

    from fp8lab.kernels import gemv_fp8 as F8
    from fp8lab.kernels import gemv_v3 as V3
    from fp8lab.kernels import harness, tolerances
    from fp8lab.kernels.sources import instances

    cp = _cuda._cupy()
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
    Ms = [int(v) for v in sys.argv[2].split(",")]
    fmt = sys.argv[3] if len(sys.argv) > 3 else "fp8c"
    src = (_cuda.KERNEL_DIR / "gemv_v3.cu").read_text()
    mods = {}
    keys = {(V3._FMT_ID[fmt], 1, V3.n_tiles(M), *V3.default_config(fmt, M)[:2], 0, 0) for M in Ms}
    for v in VARIANTS[fmt]:
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, HDR).write_text(edited_header(v, fmt))
            mods[v] = cp.RawModule(code=src + f"\n// probe {v}\n", options=options(Path(tmp), instances(
                "FP8LAB_GEMV_V3", "GEMV3", keys)), backend="nvrtc")
            mods[v].compile()
    for N, K in shapes:
        torch.manual_seed(0)
        sets = max(3, math.ceil(4 * 50e6 / (N * K)))
        if fmt == "nvfp4":
            packs = [V3.pack_nvfp4(torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda"),
                                   torch.randint(0x30, 0x40, (N, K // 16), dtype=torch.uint8, device="cuda"),
                                   torch.tensor(0.01, device="cuda")) for _ in range(sets)]
        else:
            sch = torch.rand(N, device="cuda") * 1e-3 + 1e-4
            packs = [V3.pack_fp8(F8.random_codes(N, K), sch) for _ in range(sets)]
        w8 = [F8.random_codes(N, K) for _ in range(sets)]
        wbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(max(2, sets // 2))]
        one = torch.ones((), device="cuda")
        wd = V3.dequant(packs[0]).float()
        for M in Ms:
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            xm = torch.zeros(max(16, M), K, device="cuda").to(torch.float8_e4m3fn)
            calls = {
                "bf16 F.linear": [lambda w=w: torch.nn.functional.linear(x, w) for w in wbf],
                "_scaled_mm tensorwise": [lambda w=w: torch._scaled_mm(xm, w.view(torch.float8_e4m3fn).t(), scale_a=one,
                                                                      scale_b=one, out_dtype=torch.bfloat16) for w in w8],
            }
            for v, mod in mods.items():
                ls = [V3.prepare(x, p) for p in packs]
                for launch in ls:
                    launch.fn = mod.get_function(launch.info["kernel"])
                ls[0].out.fill_(float("nan"))
                y = ls[0]().clone()
                if v == "full":
                    ref, terms = x.double() @ wd.double().T, x.double().abs() @ wd.double().abs().T
                    e = tolerances.matmul("gemv_fp8" if fmt != "nvfp4" else "gemv_nvfp4", K).worst(y, ref, terms)
                    print(f"  full {ls[0].info['kernel']} err/tol {e:.2f}")
                    if e > 1.0:
                        continue
                elif torch.isnan(y).all():
                    print(f"  {v}: wrote nothing")
                    continue
                calls[f"v3 {v}"] = ls
            res = harness.interleave({k: (lambda fs=fs: harness.graph_time_us(fs, rep=30)) for k, fs in calls.items()},
                                     rounds=5)
            wbytes = packs[0].weight_bytes()
            sm = res["_scaled_mm tensorwise"].median
            print(f"{N}x{K} M={M} {fmt}: {wbytes / 1e6:.1f} MB")
            for k, r in res.items():
                print(f"  {k:24s} {r.median:7.1f} us [{r.q1:.1f}, {r.q3:.1f}]  {wbytes / r.median / 1e6:.2f} TB/s"
                      f"  x{sm / r.median:.3f} of _scaled_mm")


if __name__ == "__main__":
    check() if sys.argv[1:] == ["--check"] else run()
