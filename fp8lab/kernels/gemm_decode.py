"""Decode (M = 1..16 tokens): the W8A16 FP8 and W4A16 NVFP4 GEMVs, versions 1 to 4, against cuBLAS bf16 and
torch._scaled_mm (tensorwise, blockwise), in interleaved rounds.

    records = bench_decode(bench, skip=set(), shapes=[(28672, 8192)], Ms=(1, 16))            # defaults only
    records = bench_decode(bench, skip=set(), shapes=[(28672, 8192)], Ms=(1, 16), tune=True) # every config

Per (N, K) and M: every config of every kernel is validated against the float64 reference (outputs poisoned) before
any is timed; with tune=True the configs are timed briefly to pick the best, otherwise each version runs its default
config (the recording run); then the kernels and the anchors are timed together in interleaved rounds
(harness.Bench.compare) and recorded with the median and spread. `napkin` prints the two numbers first.
Timing: CUDA graphs of >= 16 calls over weight copies totalling >= 4x the L2 (harness.sets_for_l2): HBM, not L2.
"""
from __future__ import annotations

import math

from . import harness, tolerances
from .gemm_anchors import scaled_mm_calls
from .gemm_report import DECODE_VERSIONS
from .gemm_smoke import out_of_time
from .sources import GEMV_PACKED_VERSIONS

#: (N, K): the lab's own shapes, then Qwen2.5-7B's MLP, a 152064 x 3584 lm_head, Llama-3-70B-like MLP shapes
DECODE_SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (18944, 3584), (3584, 18944),
                 (152064, 3584), (8192, 28672), (57344, 8192)]
DECODE_M = (1, 8, 16)
#: the goals' threshold: shapes whose FP8 weights are at least this many bytes
GOAL_MIN_FP8_BYTES = 32 * 2**20


def n_sets(bytes_per_set: int) -> int:
    return harness.sets_for_l2(bytes_per_set, factor=4, cap=32)


def v1_candidates(M: int, N: int, K: int) -> tuple[list, list]:
    """Version-1 configs (R, S, PF) worth trying, FP8 and NVFP4 (the default included)."""
    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    NT = 1 if M <= 8 else 2
    c8 = {(*F8.default_config(M, N, K), 0), (1, 4, 0), (1, 8, 0), (1, 16, 0), (2, 4, 0), (2, 8, 0), (4, 4, 0),
          (1, 4, 1), (1, 8, 1), (1, 16, 1), (2, 4, 1), (2, 8, 1)}
    c4 = {(*F8.default_config(M, N, K, kblock=256), 0), (1, 4, 0), (1, 8, 0), (1, 16, 0), (2, 2, 0), (2, 4, 0),
          (2, 8, 0), (1, 4, 1), (1, 8, 1), (2, 4, 1), (2, 8, 1)}
    c8 = sorted(c for c in c8 if F8.valid_config(c[0], c[1], NT, c[2]) and c[1] <= max(1, K // 128))
    c4 = sorted(c for c in c4 if F4.valid_config(min(c[0], 2), c[1], NT, c[2]) and c[1] <= max(1, K // 256))
    return c8, c4


def v2_candidates(M: int, N: int, K: int) -> tuple[list, list]:
    """Every compiled version-2 config (R, S, C, D) of this M with S in {2, 4, 8} (4 and 8 when N is small)."""
    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    NT = 1 if M <= 8 else 2
    widths = {2, 4, 8} if N >= 8192 else {4, 8}
    c8 = {F8.default_config_v2(M, N, K)} | {(R, S, C, D) for (R, nt, C, D) in F8.KERNELS_V2 if nt == NT for S in widths}
    c4 = {F4.default_config_v2(M, N, K)} | {(R, S, C, D) for (R, nt, C, D) in F4.KERNELS_V2 if nt == NT for S in widths}
    c8 = sorted(c for c in c8 if F8.valid_config_v2(c[0], c[1], NT, c[2], c[3], K) and c[1] * 64 * c[2] <= K)
    c4 = sorted(c for c in c4 if F4.valid_config_v2(c[0], c[1], NT, c[2], c[3], K) and c[1] * 128 * c[2] <= K)
    return c8, c4


def v3_candidates(fmt: str, M: int, tune: bool, version: int = 3) -> list[tuple]:
    """Version-3 (4, 5) configs ((C, P or D, WPC, CPS[, whole]), R) to validate and time: the default, or (tune)
    every compiled (C, P) of this M at a few grid shapes, split stream-K (whole = 0) and by whole row groups
    (whole = 1). R = 2 (32 rows per unit) is a separate packing."""
    from . import _cuda
    from . import gemv_v3 as V3

    NT = V3.n_tiles(M)
    # NVFP4 at M = 16: R = 2 won every tuned shape of version 3 (version 4 compiles R = 2 only at M > 16)
    R0 = 2 if NT == 4 or (fmt == "nvfp4" and NT == 2 and version == 3) else 1
    out = [(V3.default_config(fmt, M, R0, version), R0)]
    if tune:
        grids = {3: ((4, 4), (4, 2), (8, 2)), 4: ((8, 4), (4, 8), (8, 2)), 5: ((8, 3), (8, 2), (4, 4))}[version]
        for (f, R, nt, C, P, e, norm) in sorted(V3.TABLES[version]):
            if f == fmt and nt == NT and e == "store" and not norm:
                for wpc, cps in grids:
                    if version >= 4 and V3.ring_bytes(f, R, C, P, wpc, version) > _cuda.smem_limits()[0]:
                        continue  # more shared memory than one block may have on this device
                    for whole in (0, 1):  # stream-K, whole row groups per warp (the default picks by N)
                        out.append(((C, P, wpc, cps, whole), R))
    seen, uniq = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            uniq.append(c)
    return uniq


def _tune(make, configs) -> tuple[tuple, dict]:
    """Time each (validated) config briefly; return (best config, {config: us})."""
    times = {}
    for cfg in configs:
        times[cfg] = harness.graph_time_us(make(cfg), rep=6)[0]
    return min(times, key=times.get), times


def napkin(M: int, N: int, K: int, copy_gbps: float | None) -> dict:
    """The two numbers before any timing: bytes and FLOPs of y = x W^T at M tokens, the floor each format's weight
    bytes set at the run's copy bandwidth, and what M = 16 asks of the CUDA cores.

    napkin(16, 28672, 8192, 4235)["fp8_floor_us"] -> 55.5;  ["flop_per_fp8_byte"] -> 32"""
    fp8 = N * K + 4 * N
    nv = N * K // 2 + N * K // 16 + 4
    bf = 2 * N * K
    act = 2 * M * K + 2 * M * N
    flops = 2 * M * N * K
    bw = copy_gbps or 4235.0
    d = {"M": M, "N": N, "K": K, "bytes_bf16": bf + act, "bytes_fp8": fp8 + act, "bytes_nvfp4": nv + act,
         "flops": flops, "flop_per_fp8_byte": flops / fp8, "flop_per_nvfp4_byte": flops / nv,
         "bf16_floor_us": (bf + act) / (bw * 1e3), "fp8_floor_us": (fp8 + act) / (bw * 1e3),
         "nvfp4_floor_us": (nv + act) / (bw * 1e3)}
    # at the FP8 floor the FLOPs must flow at this rate; fp32 CUDA-core FMA on an H200 peaks near 67 TFLOP/s
    d["tflops_needed_at_fp8_floor"] = flops / (d["fp8_floor_us"] * 1e6)
    d["cuda_core_fma_share"] = d["tflops_needed_at_fp8_floor"] / 67.0
    return d


def _print_napkin(d: dict) -> None:
    print(f"  napkin M={d['M']} N={d['N']} K={d['K']}: bytes bf16 {d['bytes_bf16'] / 1e6:.1f} MB / fp8 "
          f"{d['bytes_fp8'] / 1e6:.1f} / nvfp4 {d['bytes_nvfp4'] / 1e6:.1f} -> floors {d['bf16_floor_us']:.1f} / "
          f"{d['fp8_floor_us']:.1f} / {d['nvfp4_floor_us']:.1f} us at copy bandwidth; {d['flop_per_fp8_byte']:.0f} FLOP "
          f"per FP8 byte = {d['tflops_needed_at_fp8_floor']:.0f} TFLOP/s at the floor "
          f"({100 * d['cuda_core_fma_share']:.0f} % of fp32 CUDA-core FMA peak)", flush=True)


def shape_weights(N: int, K: int) -> tuple:
    """The decode benches' weights for one (N, K), drawn from seed N + K in this order: FP8 codes (rotating sets past
    the L2), per-channel scales [N], 128x128 block scales, NVFP4 (codes, scale codes) sets, the NVFP4 global scale,
    bf16 weights (the cuBLAS anchor's sets). Returns (w8, sch, sbl, w4, gs, wbf)."""
    import torch

    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    torch.manual_seed(N + K)
    w8 = [F8.random_codes(N, K) for _ in range(n_sets(N * K))]
    sch = torch.rand(N, device="cuda") * 1e-3 + 1e-4
    sbl = torch.rand(math.ceil(N / 128), math.ceil(K / 128), device="cuda") * 1e-3 + 1e-4
    w4 = [F4.random_nvfp4(N, K) for _ in range(n_sets(N * K // 2 + N * K // 16))]
    gs = torch.tensor(0.01, device="cuda")
    wbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(n_sets(2 * N * K))]
    return w8, sch, sbl, w4, gs, wbf


def _anchors(bench: harness.Bench, shape: str, x, xq, w8, wbf, sbl, kinds=("tensorwise", "blockwise")) -> tuple:
    """(timers, meta) of one decode shape's anchors, timed as the libraries give them (other weights of the same shape,
    so trusted, not validated): bf16 F.linear over `wbf`, and `_scaled_mm` of each kind over the FP8 sets `w8`
    (blockwise not at M = 1: no goal reads it there). meta: name -> (label, dtype, bytes moved, extra)."""
    import torch

    M, K = x.shape
    N = w8[0].shape[0]
    act = 2 * M * K + 2 * M * N
    timers, meta = {}, {}
    bench.trust(f"bf16_cublas {shape}", "library anchor (torch F.linear, bf16 weights of the same shape)")
    timers[f"bf16_cublas {shape}"] = lambda: harness.graph_time_us([lambda w=w: torch.nn.functional.linear(x, w) for w in wbf])
    meta[f"bf16_cublas {shape}"] = ("bf16_cublas (torch F.linear)", "bf16 x bf16", 2 * N * K + act, {"weight_bytes": 2 * N * K})
    for kind in kinds:
        if kind == "blockwise" and M == 1:
            continue  # not part of any goal at M = 1; keeps the recording run short
        name = f"scaled_mm_{kind} {shape}"
        try:
            sa = torch.rand(M, math.ceil(K / 128), device="cuda") + 0.5
            fns = [scaled_mm_calls(kind, xq, w.view(torch.float8_e4m3fn), sa, sbl if kind == "blockwise" else None)
                   for w in w8]
        except Exception as e:
            bench.notes.append({"kernel": name, "error": str(e)[:500]})
            continue
        bench.trust(name, "library anchor (torch._scaled_mm)")
        timers[name] = lambda fns=fns: harness.graph_time_us([f for f, _ in fns])
        meta[name] = (f"scaled_mm_{kind} (torch._scaled_mm)", "e4m3 x e4m3", N * K + M * K + 2 * M * N,
                      {"layout": fns[0][1], "weight_bytes": N * K})
    return timers, meta


def _record_round(bench: harness.Bench, t: dict, meta: dict, M: int, N: int, K: int, copy_gbps, family: str) -> None:
    """Record one shape's interleaved timings `t` (name -> Timing): each of ours (a label starting 'gemv') with its
    ratio to every `_scaled_mm` anchor of the round, every kernel with its weight read rate against the run's copy
    bandwidth, and the ratio to bf16 cuBLAS of the same round."""
    shape = f"M={M} N={N} K={K}"
    t_bf16 = t[f"bf16_cublas {shape}"].median
    for name, timing in t.items():
        label, dtype, nbytes, extra = meta[name]
        if label.startswith("gemv"):
            for a, ta in t.items():
                if a.startswith("scaled_mm_"):
                    extra[f"speedup_vs_{a.split()[0]}"] = ta.median / timing.median
        wb = extra.get("weight_bytes")
        if wb and copy_gbps:
            extra["weight_gbps"] = wb / (timing.median * 1e-6) / 1e9
            extra["weight_fraction_of_copy"] = extra["weight_gbps"] / copy_gbps
        bf = label == "bf16_cublas (torch F.linear)"
        bench.record(harness.Result(label, shape, dtype, timing.median, bytes=nbytes, flops=2 * M * N * K,
                                    anchor="" if bf else "bf16_cublas", anchor_time_us=None if bf else t_bf16,
                                    copy_gbps=copy_gbps, extra={**extra, "M": M, "N": N, "K": K, "family": family}),
                     timing)
        print(f"  {label:40s} {shape:24s} {timing.median:8.1f} us [{timing.q1:.1f}, {timing.q3:.1f}]"
              + (f"  {extra['weight_fraction_of_copy']:.2f} of copy" if "weight_fraction_of_copy" in extra else "")
              + (f"  x{extra['speedup_vs_scaled_mm_tensorwise']:.3f} of _scaled_mm tensorwise"
                 if "speedup_vs_scaled_mm_tensorwise" in extra else ""), flush=True)


def bench_decode(bench: harness.Bench, skip: set, shapes=DECODE_SHAPES, Ms=DECODE_M, versions=DECODE_VERSIONS,
                 tune=False, anchors=("tensorwise", "blockwise"), on_shape_done=None, pdl: bool = True) -> None:
    """tune: False (each version at its default config), True (every version's candidates), or the versions to tune.
    on_shape_done(): called after each shape (the CLI writes the JSON then, so a run cut short keeps what it has).
    pdl: also time versions 3 and 4 (channel, NVFP4) launched with programmatic dependent launch (suffix _pdl)."""
    tune_v = set(versions) if tune is True else set(tune or ())
    import torch

    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4
    from . import gemv_v3 as V3

    copy_gbps = bench.ceilings.get("copy_gbps")
    bench.extra.setdefault("napkin", [])
    for N, K in shapes:
        if out_of_time(f"decode N={N} K={K}", bench.notes):
            continue
        w8, sch, sbl, w4, gs, wbf = shape_weights(N, K)
        v3_packs: dict = {}

        def packs(fmt, R):  # version-3 packings (versions 3 and 4) of the same weight sets, made once per shape
            if (fmt, R) not in v3_packs:
                if fmt == "nvfp4":
                    v3_packs[(fmt, R)] = [V3.pack_nvfp4(wp, sc, gs, R=R) for wp, sc in w4]
                else:
                    v3_packs[(fmt, R)] = [V3.pack_fp8(w, sch if fmt == "fp8c" else sbl, R=R) for w in w8]
            return v3_packs[(fmt, R)]
        wd = {"channel": F8.dequant_weight(w8[0], sch), "block": F8.dequant_weight(w8[0], sbl)}  # float64, set 0
        wd4 = F4.dequant_weight(*w4[0], gs)
        for M in Ms:
            shape = f"M={M} N={N} K={K}"
            nap = napkin(M, N, K, copy_gbps)
            bench.extra["napkin"].append(nap)
            _print_napkin(nap)
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            act_bytes = 2 * M * K + 2 * M * N
            xq = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
            timers, meta = _anchors(bench, shape, x, xq, w8, wbf, sbl, anchors)
            # ---- ours: validate every config, tune (or take the default), keep the best
            c8_1, c4_1 = v1_candidates(M, N, K)
            c8_2, c4_2 = v2_candidates(M, N, K)
            ours = []
            for v, suffix in ((1, ""), (2, "_v2")):
                if v not in versions or K % 256:
                    continue
                for mode, scale in (("channel", sch), ("block", sbl)):
                    ours.append((f"gemv_fp8_{mode}{suffix}", "gemv_fp8", N * K + scale.numel() * 4,
                                 lambda cfg, scale=scale, v=v: [F8.prepare(x, w, scale, config=cfg, version=v) for w in w8],
                                 (c8_1 if v == 1 else c8_2) if v in tune_v else [], wd[mode]))
                ours.append((f"gemv_nvfp4{suffix}", "gemv_nvfp4", N * K // 2 + N * K // 16,
                             lambda cfg, v=v: [F4.prepare(x, wp, sc, gs, config=cfg, version=v) for wp, sc in w4],
                             (c4_1 if v == 1 else c4_2) if v in tune_v else [], wd4))
            for ver in GEMV_PACKED_VERSIONS:
                if ver not in versions:
                    continue
                for fmt, label, wbytes, wdeq in (("fp8c", f"gemv_fp8_channel_v{ver}", N * K + 4 * N, wd["channel"]),
                                                 ("fp8b", f"gemv_fp8_block_v{ver}", N * K + sbl.numel() * 4, wd["block"]),
                                                 ("nvfp4", f"gemv_nvfp4_v{ver}", N * K // 2 + N * K // 16, wd4)):
                    cands = v3_candidates(fmt, M, ver in tune_v, ver)
                    if ver not in tune_v and fmt == "fp8b" and M not in (1, 16):
                        continue  # the recording run: block scales at M = 1 and 16 only
                    ours.append((label, "gemv_fp8" if fmt != "nvfp4" else "gemv_nvfp4", wbytes,
                                 lambda cfg, fmt=fmt, ver=ver: [V3.prepare(x, p, config=cfg[0], version=ver)
                                                                for p in packs(fmt, cfg[1])],
                                 cands, wdeq))
            for kname, smoke_name, wbytes, make, cands, wdeq in ours:
                if smoke_name in skip:
                    bench.notes.append({"kernel": kname, "shape": shape, "error": "failed its smoke test: not timed"})
                    continue
                ref, terms = x.double() @ wdeq.T, x.double().abs() @ wdeq.abs().T
                tol = tolerances.matmul(smoke_name, K)
                packed = kname.endswith(tuple(f"_v{v}" for v in GEMV_PACKED_VERSIONS))  # configs ((C, P|D, WPC, CPS), R)
                good = []
                for cfg in ([] if packed else [None]) + list(cands):  # every config validated before any is timed
                    try:
                        launch = make(cfg)[0]
                    except Exception as e:
                        bench.notes.append({"kernel": kname, "shape": shape, "config": str(cfg), "error": str(e)[:300]})
                        continue
                    ok = bench.validate(f"{kname} {cfg} {shape}", launch, lambda y: (
                        (e := tol.worst(y, ref, terms)) <= 1.0, {"err_over_tol": e}), outputs=[launch.out])
                    if ok and (cfg is not None):
                        good.append(cfg)
                    elif ok and not cands:
                        good.append(None)
                if not good:
                    continue
                best, tuned = _tune(make, good) if len(good) > 1 else (good[0], {})
                name = f"{kname} {shape}"
                bench.validation[name] = bench.validation[f"{kname} {best} {shape}"]
                timers[name] = lambda make=make, best=best: harness.graph_time_us(make(best), rep=30)
                version = int(kname[-1]) if packed else 2 if kname.endswith("_v2") else 1
                cfg_key = {1: "config_RSPF", 2: "config_RSCD", 3: "config_CPWC_R", 4: "config_CDWC_R", 5: "config_CDWC_R"}[version]
                info = {}
                if packed:
                    li = make(best)[0].info
                    info = {k: li[k] for k in ("kernel", "grid", "warps", "units", "bytes_per_unit", "smax",
                                               "whole_groups", "smem")}
                meta[name] = (kname, "e2m1+e4m3/16 x bf16" if "nvfp4" in kname else "e4m3 x bf16", wbytes + act_bytes,
                              {"version": version, cfg_key: (list(best) if not packed else [list(best[0]), best[1]])
                               if best is not None else "default",
                               "tuned_us": {str(c): t for c, t in tuned.items()}, "weight_bytes": wbytes, **info})
                if packed and pdl and "_block_" not in kname:
                    # the same kernel and config launched with programmatic dependent launch: consecutive calls
                    # overlap (the next one's weight loads during this one's tail), as in a decode layer. Reported
                    # beside the plain launch; the goals use the plain launch, like the anchors'.
                    pname = f"{kname}_pdl {shape}"
                    bench.validation[pname] = bench.validation[name]

                    def make_pdl(make=make, best=best):
                        ls = make(best)
                        for launch in ls:
                            launch.pdl = True
                        return ls
                    timers[pname] = lambda make_pdl=make_pdl: harness.graph_time_us(make_pdl(), rep=30)
                    meta[pname] = (f"{kname}_pdl", meta[name][1], meta[name][2], {**meta[name][3], "pdl": True})
            # ---- every contender of this shape in interleaved rounds
            _record_round(bench, bench.compare(timers), meta, M, N, K, copy_gbps, "decode")
            del x, xq
        del w8, w4, wbf, wd, wd4, v3_packs
        torch.cuda.empty_cache()
        if on_shape_done is not None:
            on_shape_done()


# ---- where the decode GEMV's time goes: its arithmetic cut away, its loads kept -----------------------------------
# Version 3 compiled from patched copies of gemv_v3_common.cuh (_cuda.patched_sources): the loads, the stream-K split
# and the epilogue stay; the arithmetic on each weight word shrinks. The copies compute WRONG numbers by design (they
# are timed, never validated); a stage's cost is the time it takes away. {name: (what is cut, {fmt: patches})}, a patch
# (old, new) of gemv_v3_common.cuh or (file, old, new).
_FP8_MUL = ("    p01 = bf16x2_mul(a, FP8LAB_BF16X2_E4M3_UNBIAS);\n    p23 = bf16x2_mul(b, FP8LAB_BF16X2_E4M3_UNBIAS);",
            "    p01 = a;\n    p23 = b;")
_FP8_SPLIT = ("const u32 b = ((w & 0x080F080Fu) << 4) | ((w >> 4) & 0x07000700u);", "const u32 b = (w << 4) & 0x87F087F0u;")
_FP8_NO_WIDEN = ("const u32 a = w & 0x87F087F0u;\n    const u32 b = ((w & 0x080F080Fu) << 4) | ((w >> 4) & 0x07000700u);",
                 "const u32 a = w, b = 0u;")
_NV_MUL_OLD = ("const u32 a0 = bf16x2_mul(p[0], sg), a1 = bf16x2_mul(p[1], s8);\n"
               "        const u32 a2 = bf16x2_mul(p[2], sg), a3 = bf16x2_mul(p[3], s8);")
_NV_NO_SCALE = (_NV_MUL_OLD, "const u32 a0 = p[0] ^ sc, a1 = p[1], a2 = p[2], a3 = p[3];")  # the word kept live
_NV_NO_WIDEN = (_NV_MUL_OLD, "const u32 a0 = word_of(w, s) ^ sc, a1 = 0u, a2 = 0u, a3 = 0u;")
_NV_RAW_SCALE = [("scale2_bf16x2(sw & 0xFFFFu)", "(sw & 0xFFFFu)"), ("scale2_bf16x2(sw >> 16)", "(sw >> 16)")]
# each MMA (m16n8k16: A a0..a3, B b0 b1, fp32 C/D) replaced by three-input XORs (one LOP3 each) into the accumulators:
# the A registers once per step (nt == 0 is a compile-time test, the loop is unrolled), each token tile's B pair once,
# which keeps the widening's results and every activation load live (both formats' MMA lines are this text)
_NO_MMA = ("mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);",
           "if (nt == 0) { d[0][0] = __int_as_float(__float_as_int(d[0][0]) ^ a0 ^ a1); "
           "d[0][1] = __int_as_float(__float_as_int(d[0][1]) ^ a2 ^ a3); } "
           "d[nt][2] = __int_as_float(__float_as_int(d[nt][2]) ^ b0 ^ b1);")
# every activation load (v3_xload, global path) replaced by a value made from its address: no memory access, the
# arithmetic and the weight loads unchanged
_NO_X = ("    else return ld_cached16(p);",
         "    else { const u32 a = (u32)(size_t)p; return make_uint4(a, a >> 3, a >> 5, a >> 7); }")
DECODE_GAP = {
    "no_mul": ("the exact bf16x2 multiplies after the bit moves (FP8: x 2**120, two per 4 codes; NVFP4: the block "
               "scale, its decode and four multiplies per 8 codes)",
               {"fp8c": [_FP8_MUL], "nvfp4": [_NV_NO_SCALE] + _NV_RAW_SCALE}),
    "min_widen": ("FP8 only: the widening cut to two integer ops per 4 codes and no multiply (a floor for any bit-move "
                  "widening)", {"fp8c": [_FP8_MUL, _FP8_SPLIT]}),
    "no_mma": ("the MMAs: replaced by one XOR per pair of operands into the accumulators (widening and activation "
               "loads kept)", {"fp8c": [_NO_MMA], "nvfp4": [_NO_MMA]}),
    "loads_only": ("all the arithmetic: no widening, no scale, no MMA; every weight word and activation XORed into the "
                   "accumulators (the loads, the split and the epilogue alone)",
                   {"fp8c": [_FP8_MUL, _FP8_NO_WIDEN, _NO_MMA], "nvfp4": [_NV_NO_WIDEN, _NO_MMA] + _NV_RAW_SCALE}),
    "empty": ("everything but the launch: each warp returns as it starts (the grid's launch, start and end alone)",
              {f: [("gemv_v3.cu", "if (!NORM && u0 >= u1) return;", "if (!NORM) return;")] for f in ("fp8c", "nvfp4")}),
    "no_x_loads": ("the activation loads: each replaced by a value made from its address (no memory access; the "
                   "arithmetic and the weight loads kept). At M = 16 a lane loads twice as many activation bytes "
                   "(through L1 / L2) as weight bytes", {"fp8c": [_NO_X], "nvfp4": [_NO_X]}),
}
#: the Qwen2.5-7B MLP shapes, the largest of the lab's own, and Llama-3-8B's MLP (14336 x 4096, 4096 x 14336: the
#: smallest goal shapes, where a call's fixed cost weighs most)
DECODE_GAP_SHAPES = [(14336, 4096), (4096, 14336), (18944, 3584), (3584, 18944), (28672, 8192)]
DECODE_GAP_M = (1, 16)
DECODE_GAP_FORMATS = ("fp8c", "nvfp4")
_GAP_LABEL = {"fp8c": "gemv_fp8_channel_v3", "nvfp4": "gemv_nvfp4_v3"}


def decode_gap_variants(fmt: str) -> tuple[str, ...]:
    """'full' (the shipped kernel), then every DECODE_GAP variant with a form for `fmt`, in DECODE_GAP order."""
    return ("full",) + tuple(v for v, (_, forms) in DECODE_GAP.items() if fmt in forms)


def decode_gap_keys(fmt: str, Ms=DECODE_GAP_M) -> list[tuple]:
    """The compiled keys (format, R, NT, C, P, epilogue, norm) of version 3's default config at each M (the kernels the
    decode gap run examines: what the recording run times)."""
    from . import gemv_v3 as V3

    keys = []
    for M in Ms:
        (C, P, _, _), R = v3_candidates(fmt, M, False)[0]
        k = (fmt, R, V3.n_tiles(M), C, P, "store", 0)
        if k not in keys:
            keys.append(k)
    return keys


def decode_gap_patches(variant: str, fmt: str, Ms=DECODE_GAP_M) -> dict:
    """_cuda.patched_sources patches of one variant ('full': none) for `fmt`, compiling only decode_gap_keys (a text
    edit of gemv_v3.cu's instantiation line: a few kernels instead of the whole list, seconds instead of a minute).
    ValueError for a variant that has no form for this format."""
    from . import gemv_v3 as V3

    if variant not in decode_gap_variants(fmt):
        raise ValueError(f"decode gap variant {variant!r} has no {fmt} form; variants: "
                         + ", ".join(decode_gap_variants(fmt)))
    only = "".join(f"GEMV3({V3._FMT_ID[f]},{R},{nt},{C},{P},{V3.EPILOGUES[e]},{n})"
                   for f, R, nt, C, P, e, n in decode_gap_keys(fmt, Ms))
    patches = {"gemv_v3.cu": [("#endif\nFP8LAB_GEMV_V3", "#endif\n" + only)]}
    for p in (DECODE_GAP[variant][1][fmt] if variant != "full" else ()):
        fname, old, new = p if len(p) == 3 else ("gemv_v3_common.cuh", *p)   # (file, old, new) or (old, new) of the header
        patches.setdefault(fname, []).append((old, new))
    return patches


def decode_gap_sass(fmt: str, variant: str, cc: int = 90, Ms=DECODE_GAP_M) -> dict:
    """{kernel name: {opcode: count}} of the variant's kernels as this arch compiles them (no GPU: NVRTC), counted over
    the whole function (the epilogue and the fix-up included, the same in every variant)."""
    from . import _cuda, sass

    with _cuda.patched_sources(decode_gap_patches(variant, fmt, Ms)):
        cubin, _ = _cuda.compile_for("gemv_v3.cu", cc)
    return {name: dict(k.opcodes()) for name, k in sass.parse(sass.disassemble(cubin)).items()}


class V3Case:
    """Version 3 at its default config for one format in a V3 round: the config, the packed weight sets, the label
    and dtype of the decode records, the weight bytes, and `reference()` -> (float64 y, |x| . |W| terms, tolerance)."""

    def __init__(self, fmt, M, x, w8, sch, w4, gs):
        from . import gemv_fp8 as F8
        from . import gemv_nvfp4 as F4
        from . import gemv_v3 as V3

        N, K = w8[0].shape
        self.fmt, self.label = fmt, _GAP_LABEL[fmt]
        self.cfg, self.R = v3_candidates(fmt, M, False)[0]
        self.packs = ([V3.pack_nvfp4(wp, sc, gs, R=self.R) for wp, sc in w4] if fmt == "nvfp4"
                      else [V3.pack_fp8(w, sch, R=self.R) for w in w8])
        self.dtype = "e2m1+e4m3/16 x bf16" if fmt == "nvfp4" else "e4m3 x bf16"
        self.weight_bytes = N * K // 2 + N * K // 16 if fmt == "nvfp4" else N * K + 4 * N
        self.bytes = self.weight_bytes + 2 * M * K + 2 * M * N
        self._deq = (lambda: F4.dequant_weight(*w4[0], gs)) if fmt == "nvfp4" else (lambda: F8.dequant_weight(w8[0], sch))
        self._x, self._K = x, K

    def reference(self):
        wd = self._deq()
        x = self._x.double()
        return x @ wd.T, x.abs() @ wd.abs().T, tolerances.matmul("gemv_nvfp4" if self.fmt == "nvfp4" else "gemv_fp8",
                                                                 self._K)

    def validate(self, bench: harness.Bench, name: str, launch, ref=None) -> bool:
        """bench.validate of `launch` (outputs poisoned) against the float64 reference within the GEMV tolerance;
        `ref`: a reference() already computed (several launches checked against one)."""
        y0, terms, tol = ref or self.reference()
        return bench.validate(name, launch, lambda y: ((e := tol.worst(y, y0, terms)) <= 1.0, {"err_over_tol": e}),
                              outputs=[launch.out])

    def extra(self, launch) -> dict:
        return {"version": 3, "config_CPWC_R": [list(self.cfg), self.R], "function": launch.info["kernel"],
                "weight_bytes": self.weight_bytes, "fmt": self.fmt}


def v3_rounds(bench: harness.Bench, skip: set, shapes, Ms, fmts, family: str):
    """The rounds of a run that times version 3 at its defaults beside `_scaled_mm` tensorwise and bf16 cuBLAS (the
    decode gap and timeline runs): yields (shape, x, timers, meta, cases) per (N, K) and M, cases {fmt: V3Case} for
    the formats not in `skip`; the caller adds its timers and meta, and the round is timed interleaved and recorded
    (family `family`) when the caller asks for the next one."""
    import torch

    copy_gbps = bench.ceilings.get("copy_gbps")
    for N, K in shapes:
        if out_of_time(f"{family.replace('_', ' ')} N={N} K={K}", bench.notes):
            continue
        w8, sch, _, w4, gs, wbf = shape_weights(N, K)
        for M in Ms:
            shape = f"M={M} N={N} K={K}"
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            xq = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
            timers, meta = _anchors(bench, shape, x, xq, w8, wbf, None, ("tensorwise",))
            cases = {f: V3Case(f, M, x, w8, sch, w4, gs) for f in fmts
                     if ("gemv_fp8" if f != "nvfp4" else "gemv_nvfp4") not in skip}
            yield shape, x, timers, meta, cases
            _record_round(bench, bench.compare(timers), meta, M, N, K, copy_gbps, family)
            del x, xq, cases
        del w8, w4, wbf
        torch.cuda.empty_cache()


def bench_decode_gap(bench: harness.Bench, skip: set, shapes=DECODE_GAP_SHAPES, Ms=DECODE_GAP_M,
                     fmts=DECODE_GAP_FORMATS, variants=tuple(DECODE_GAP)) -> None:
    """Where version 3's decode time goes: the kernel at its default config (validated against the float64
    reference), the DECODE_GAP variants of it (timed, not validated: wrong numbers by design), `_scaled_mm` tensorwise
    and bf16 cuBLAS, interleaved. Records: family "decode_gap" (apart from the decode table and goals); the variants
    are named '<label>-<variant>' and carry left_out, of_kernel and validated False; each of ours carries
    speedup_vs_scaled_mm_tensorwise."""
    from . import _cuda
    from . import gemv_v3 as V3

    for shape, x, timers, meta, cases in v3_rounds(bench, skip, shapes, Ms, fmts, "decode_gap"):
        for fmt, c in cases.items():
            for variant in (v for v in decode_gap_variants(fmt) if v == "full" or v in variants):
                vname = c.label if variant == "full" else f"{c.label}-{variant}"
                tname = f"{vname} {shape}"
                try:
                    with _cuda.patched_sources(decode_gap_patches(variant, fmt, Ms)):
                        launches = [V3.prepare(x, p, config=c.cfg) for p in c.packs]
                        harness.poison_(launches[0].out)
                        launches[0]()  # compiled from the patched copy while it exists
                except Exception as e:  # noqa: BLE001 - a variant that does not build is recorded, not fatal
                    bench.notes.append({"kernel": tname, "error": f"{type(e).__name__}: {str(e)[:300]}"})
                    continue
                extra = c.extra(launches[0])
                if variant == "full":
                    if not c.validate(bench, tname, launches[0]):
                        break  # the variants are read against a kernel that computes the right numbers
                else:
                    bench.trust(tname, f"decode gap ({DECODE_GAP[variant][0]}): computes wrong numbers by design; "
                                       "timed, not validated")
                    extra.update(left_out=DECODE_GAP[variant][0], validated=False, of_kernel=c.label)
                timers[tname] = lambda ls=launches: harness.graph_time_us(ls, rep=30)
                meta[tname] = (vname, c.dtype, c.bytes, extra)
