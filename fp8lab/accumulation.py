"""Accumulation precision: where the products of an FP8 GEMM are summed, and in how many bits.

A format is only half of a low-precision matrix multiply. Each output C[m, n] = sum_k A[m, k] * B[n, k] is a sum
of K products, and on Hopper's FP8 tensor cores that running sum is *not* kept in full FP32: DeepSeek-V3 reports
that it retains "around 14 bits", and public measurements describe an e8m13 accumulator (13 stored fraction bits,
14 significant bits) that truncates. The fix DeepSeek-V3 uses (and the lab's W8A8 kernel, notebook 07) is to
*promote*: every N_C = 128 elements of K, the tensor-core partial sum is multiplied by its scales and added to an
FP32 register on the CUDA cores.

The CPU model (`accumulate`), and its assumptions -- a model, not a bit-exact copy of any GPU:
  1. the inputs are FP8 values (decoded codes); every product is exact (E4M3 x E4M3 has at most 8 significant bits);
  2. the hardware adds `chunk` products at once, exactly (default 32: one FP8 `wgmma` k-step), then rounds the
     running sum `acc + chunk_sum` to `acc_bits` significant bits, toward zero ("toward_zero", what the public
     measurements describe) or to nearest-even ("nearest", for comparison); the exponent range is never an issue;
  3. with `promote_every=128` the limited accumulator restarts at zero every 128 k; each 128-partial is multiplied
     by its scales and added to an FP32 accumulator (float64 arithmetic, rounded to float32 once per add);
  4. without promotion the limited accumulator runs through all of K and the (per-tensor) scales are applied
     once at the end: `torch._scaled_mm(..., use_fast_accum=True)` on Hopper.
  acc_bits=24 with "nearest" is plain FP32 accumulation (per chunk).

    a, b = torch.randn(64, 4096), torch.randn(64, 4096)
    simulate_gemm(a, b, acc_bits=14, promote_every=None)     # ~1e-3 relative error against float64
    simulate_gemm(a, b, acc_bits=14, promote_every=128)      # ~1e-4: the error no longer grows with K

Why a scale that varies along K cannot be pulled out of the sum (`scale_factoring_example`):
    C = sum_k (sa_k qa_k)(sb_k qb_k). If sa, sb are constant along k (per tensor, per row of A, per column of B),
    C = sa * sb * sum_k qa_k qb_k: one multiply in the epilogue, after the tensor core has summed the codes.
    If they change every 128 k (1x128 activation groups, 128x128 weight blocks), C = sum_g sa_g sb_g sum_{k in g}
    qa_k qb_k: each group's partial sum must be finished, scaled, and only then added -- which is exactly the
    per-block promotion. A kernel that summed the codes over all of K first would add numbers that live on
    different scales.

The GPU side (`bench_scaled_mm_fast_accum`, `python -m fp8lab.accumulation --gpu --out PATH`) measures the real
thing: `torch._scaled_mm` with `use_fast_accum` off and on, time (CUDA graphs, interleaved rounds, median and
spread) and error against float64 at growing K, plus this model replayed on a tile of the same inputs.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch

from . import formats as _f
from .scaling import QuantSpec, quantize

__all__ = ["HOPPER_ACC_BITS", "round_to_bits", "accumulate", "quantize_operands", "simulate_gemm",
           "VARIANTS", "error_vs_k", "format_error_table", "scale_factoring_example", "bench_scaled_mm_fast_accum",
           "summarize_gpu", "sim_verdict", "plot_error_vs_k", "plot_gpu", "load_gpu_record", "main"]

HOPPER_ACC_BITS = 14    # significant bits (e8m13: 13 stored fraction bits + the leading one)
ROUNDINGS = ("toward_zero", "nearest")


def round_to_bits(x: torch.Tensor, bits: int, rounding: str = "nearest") -> torch.Tensor:
    """Round float64 `x` to `bits` significant bits (exponent unbounded). Exact arithmetic on float64.

    round_to_bits(tensor([1 + 2**-14]), 14)                      -> [1.0]              # below half an ulp
    round_to_bits(tensor([1.99999]), 14, "toward_zero")          -> [1.99987793]       # 2 - 2**-13
    """
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    if not 2 <= bits <= 53:
        raise ValueError(f"bits must be in [2, 53], got {bits}")
    if x.dtype != torch.float64:
        raise TypeError(f"round_to_bits works on float64 (exact), got {x.dtype}")
    m, e = torch.frexp(x)                  # x = m * 2**e, 0.5 <= |m| < 1: the leading bit is worth 2**-1
    r = m * 2.0 ** bits
    r = torch.round(r) if rounding == "nearest" else torch.trunc(r)
    return torch.ldexp(r * 2.0 ** -bits, e)


def _block_scales(scale: torch.Tensor | float, rows: int, n_blocks: int, block_rows: int = 1) -> torch.Tensor:
    """Scales as a [rows, n_blocks] float64 table (one per row per k-block): scalar, [rows, G] or [rows/B, G]."""
    s = torch.as_tensor(scale, dtype=torch.float64)
    if s.dim() == 0:
        return s.expand(rows, n_blocks)
    if s.dim() != 2 or s.shape[1] != n_blocks:
        raise ValueError(f"k-varying scales must be [rows or row-blocks, {n_blocks}], got {tuple(s.shape)}")
    if s.shape[0] != rows:
        s = s.repeat_interleave(block_rows, dim=0)[:rows]
    return s


def accumulate(qa: torch.Tensor, qb: torch.Tensor, scale_a=1.0, scale_b=1.0, *, acc_bits: int = HOPPER_ACC_BITS,
               chunk: int = 32, promote_every: int | None = 128, rounding: str = "toward_zero",
               b_block_rows: int = 128) -> torch.Tensor:
    """C = A B^T for FP8 values qa [M, K], qb [N, K] with a limited-precision accumulator (module docstring).

    scale_a / scale_b: a scalar (per tensor), or a table varying along K with one entry per `promote_every`
    block: scale_a [M, K/P] (1 x P activation groups), scale_b [N/b_block_rows, K/P] (weight blocks).
    Returns float64 values that are float32 numbers (the output register).
    """
    if qa.dim() != 2 or qb.dim() != 2 or qa.shape[1] != qb.shape[1]:
        raise ValueError(f"need qa [M, K] and qb [N, K] with the same K, got {tuple(qa.shape)}, {tuple(qb.shape)}")
    M, K = qa.shape
    N = qb.shape[0]
    if chunk < 1 or K % chunk:
        raise ValueError(f"K={K} must be a multiple of chunk={chunk}")
    if promote_every is not None and (promote_every % chunk or K % promote_every):
        raise ValueError(f"promote_every={promote_every} must be a multiple of chunk={chunk} and divide K={K}")
    k_varying = any(torch.as_tensor(s).dim() > 0 for s in (scale_a, scale_b))
    if k_varying and promote_every is None:
        raise ValueError("a scale that varies along K cannot be pulled out of the sum: block scales need "
                         "promote_every = the block size (each block's partial sum is scaled before it is added)")
    qa64, qb64 = qa.double(), qb.double()
    n_chunks = K // chunk
    # exact sum of each chunk of `chunk` products: [n_chunks, M, N] (products have <= 8 significant bits)
    parts = torch.einsum("mcj,ncj->cmn", qa64.reshape(M, n_chunks, chunk), qb64.reshape(N, n_chunks, chunk))
    per = n_chunks if promote_every is None else promote_every // chunk
    blocks = parts.reshape(n_chunks // per, per, M, N)          # [n_blocks, chunks per block, M, N]
    acc = torch.zeros(blocks.shape[0], M, N, dtype=torch.float64)
    for c in range(per):                                       # the tensor core's accumulator, all blocks at once
        acc = round_to_bits(acc + blocks[:, c], acc_bits, rounding)
    n_blocks = acc.shape[0]
    sa = _block_scales(scale_a, M, n_blocks)                   # [M, n_blocks]
    sb = _block_scales(scale_b, N, n_blocks, b_block_rows)     # [N, n_blocks]
    if promote_every is None:                                  # fast accumulation: scale once, in the epilogue
        return (acc[0] * sa[:, :1] * sb[:, 0][None, :]).float().double()
    out = torch.zeros(M, N, dtype=torch.float64)
    for g in range(n_blocks):                                  # FP32 promotion: scale the partial, then add
        out = (out + acc[g] * sa[:, g:g + 1] * sb[:, g][None, :]).float().double()
    return out


def quantize_operands(a: torch.Tensor, b: torch.Tensor, scales: str = "tensor", fmt: str = "e4m3", block: int = 128):
    """FP8 values and scales of A [M, K] and B [N, K] through fp8lab.scaling (the lab's one scale rule).

    scales="tensor": one scale each; "block": A in 1 x block groups along K, B in block x block tiles.
    Returns (qa, sa, qb, sb) with qa, qb the decoded codes (float32) and sa, sb the dequant multipliers.
    """
    if scales == "tensor":
        spec_a = spec_b = QuantSpec(fmt, "tensor")
    elif scales == "block":
        spec_a, spec_b = QuantSpec(fmt, "group", group_size=block), QuantSpec(fmt, "block", block=(block, block))
    else:
        raise ValueError(f"scales must be 'tensor' or 'block', got {scales!r}")
    f = _f.get(fmt)
    qa, qb = quantize(a, spec_a), quantize(b, spec_b)
    return f.decode(qa.codes), qa.scale, f.decode(qb.codes), qb.scale


def simulate_gemm(a: torch.Tensor, b: torch.Tensor, *, scales: str = "tensor", acc_bits: int = HOPPER_ACC_BITS,
                  chunk: int = 32, promote_every: int | None = 128, rounding: str = "toward_zero") -> torch.Tensor:
    """Quantize A, B to E4M3 (`scales`), then `accumulate`. Returns the float32 result as float64."""
    qa, sa, qb, sb = quantize_operands(a, b, scales)
    return accumulate(qa, qb, sa, sb, acc_bits=acc_bits, chunk=chunk, promote_every=promote_every,
                      rounding=rounding)


def exact_gemm(a: torch.Tensor, b: torch.Tensor, scales: str = "tensor") -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 GEMM of the dequantized FP8 inputs, float64 GEMM of the original inputs)."""
    qa, sa, qb, sb = quantize_operands(a, b, scales)
    K = a.shape[1]
    if scales == "tensor":
        da, db = qa.double() * float(sa), qb.double() * float(sb)
    else:
        da = qa.double() * sa.double().repeat_interleave(128, dim=1)[:, :K]
        db = qb.double() * sb.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:b.shape[0], :K]
    return da @ db.T, a.double() @ b.double().T


#: the configurations compared in notebook 10: (scales, acc_bits, promote_every, rounding)
VARIANTS = {
    "fast accum (14 bits, truncating, no promotion)": ("tensor", HOPPER_ACC_BITS, None, "toward_zero"),
    "fast accum, if it rounded to nearest": ("tensor", HOPPER_ACC_BITS, None, "nearest"),
    "14 bits + FP32 promotion every 128": ("tensor", HOPPER_ACC_BITS, 128, "toward_zero"),
    "1x128 / 128x128 scales + promotion (DeepSeek-V3)": ("block", HOPPER_ACC_BITS, 128, "toward_zero"),
    "FP32 accumulation": ("tensor", 24, None, "nearest"),
}


def operands(m: int, n: int, k: int, dist: str = "gaussian", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random A [m, k], B [n, k]: "gaussian" N(0, 1) (products of both signs: rounding errors partly cancel), or
    "positive" |N(0, 1)| (every product positive: the sum only grows, the worst case for a truncating sum)."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    if dist == "positive":
        return a.abs(), b.abs()
    if dist != "gaussian":
        raise ValueError(f"dist must be 'gaussian' or 'positive', got {dist!r}")
    return a, b


def error_vs_k(ks=(128, 512, 2048, 8192, 16384), m: int = 64, n: int = 64, dists=("gaussian", "positive"),
               variants=None, chunk: int = 32, seed: int = 0) -> list[dict]:
    """Relative error ||C - C_64|| / ||C_64|| for every variant, K and input distribution.

    `rel_err_acc` is against float64 on the *same FP8 inputs* (the accumulation alone); `rel_err_total` against
    float64 on the unquantized inputs (accumulation + FP8 rounding of the inputs); `shrink` = 1 - <C, C_64> / <C_64,
    C_64>, the part of the error that is a uniform bias toward zero (what a truncating accumulator does).
    """
    from .metrics import relative_error

    variants = variants or VARIANTS
    rows = []
    for dist in dists:
        for k in ks:
            a, b = operands(m, n, k, dist, seed)
            ref = {s: exact_gemm(a, b, s) for s in {v[0] for v in variants.values()}}
            for name, (scales, bits, promote, rnd) in variants.items():
                t0 = time.perf_counter()
                c = simulate_gemm(a, b, scales=scales, acc_bits=bits, chunk=chunk, promote_every=promote,
                                  rounding=rnd)
                r64 = ref[scales][0]
                shrink = 1.0 - float((c * r64).sum() / (r64 * r64).sum())   # > 0: outputs biased toward zero
                rows.append({"dist": dist, "K": k, "variant": name, "rel_err_acc": relative_error(r64, c),
                             "rel_err_total": relative_error(ref[scales][1], c), "shrink": shrink,
                             "seconds": time.perf_counter() - t0})
    return rows


def format_error_table(rows: list[dict], key: str = "rel_err_acc") -> str:
    """One line per (dist, variant), one column per K (`key`: rel_err_acc, rel_err_total or shrink)."""
    ks = sorted({r["K"] for r in rows})
    w = max(len(r["variant"]) for r in rows) + 2
    out = []
    for dist in dict.fromkeys(r["dist"] for r in rows):
        out.append(f"{dist + ' inputs':<{w}}" + "".join(f"{'K=' + str(k):>10}" for k in ks))
        for v in dict.fromkeys(r["variant"] for r in rows):
            cells = {r["K"]: r[key] for r in rows if r["dist"] == dist and r["variant"] == v}
            out.append(f"{v:<{w}}" + "".join(f"{cells[k]:>10.1e}" if k in cells else f"{'-':>10}" for k in ks))
        out.append("")
    return "\n".join(out).rstrip()


def scale_factoring_example() -> dict:
    """A worked example: K = 4 in two groups of 2, activations whose magnitude changes along K.

    a = [0.015, -0.03, 250, 500], b = [1, 1, 1, 1]. Per-group E4M3 scales sa = [0.03/448, 500/448]; every value
    is exact in E4M3 after its group's scale (codes 224, -448, 224, 448), so only the summation order matters.
    Right: scale each group's partial sum, then add (749.985). Wrong: add the codes over all K, then apply one
    scale (500 with the second group's scale, 0.03 with the first's).
    """
    a = torch.tensor([[0.015, -0.03, 250.0, 500.0]])
    b = torch.ones(1, 4)
    spec = QuantSpec("e4m3", "group", group_size=2)
    q = quantize(a, spec)
    codes = _f.E4M3.decode(q.codes)[0]                         # the E4M3 values the tensor core multiplies
    sa = q.scale[0]                                            # [2]: one scale per group of 2 along K
    partial = torch.stack([codes[:2].sum(), codes[2:].sum()])  # per-group sums of codes (b = 1)
    right = float((partial * sa).sum())
    wrong = {f"one scale = group {g}'s": float(codes.sum() * sa[g]) for g in range(2)}
    return {"a": a[0].tolist(), "scales": sa.tolist(), "codes": codes.tolist(), "partials": partial.tolist(),
            "exact": float(a.sum()), "per_group_then_add": right, "codes_summed_then_scaled": wrong}


# ---- the GPU measurement ----------------------------------------------------------------------------------
def _gpu_operands(m, n, k, dist, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=g, device=device)
    b = torch.randn(n, k, generator=g, device=device)
    if dist == "positive":
        a, b = a.abs(), b.abs()
    fmax = torch.tensor(_f.E4M3.max, device=device)
    sa, sb = a.abs().amax() / fmax, b.abs().amax() / fmax     # the lab's per-tensor rule: amax / 448, fp32
    qa, qb = (a / sa).to(torch.float8_e4m3fn), (b / sb).to(torch.float8_e4m3fn)
    return qa, sa, qb, sb


def bench_scaled_mm_fast_accum(m: int = 4096, n: int = 4096, ks=(256, 1024, 4096, 16384, 65536),
                               dists=("gaussian", "positive"), rounds: int = 5, ref_rows: int = 256,
                               tile: int = 64, sim_ks=(256, 1024, 4096, 16384), seed: int = 0,
                               progress: bool = True) -> dict:
    """`torch._scaled_mm` E4M3 x E4M3 (per-tensor scales) with use_fast_accum False / True on the CUDA device.

    speed: bf16 output (what a model layer writes); per K, `rounds` interleaved rounds (the order of the two
      settings alternates), each a CUDA-graph replay median (fp8lab.kernels.harness); median and min/max over rounds.
    error: fp32 output, against float64 on the same FP8 inputs, over the first `ref_rows` rows.
    sim_check: the CPU model (`accumulate`) replayed on a `tile` x `tile` corner of the same inputs, next to the
      GPU's own error on that tile, for the truncating and the round-to-nearest model.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("bench_scaled_mm_fast_accum needs a CUDA device (torch.cuda.is_available() is False)")
    from .kernels import harness
    from .metrics import relative_error

    dev = "cuda"
    speed, error, sim = [], [], []
    for k in ks:
        qa, sa, qb, sb = _gpu_operands(m, n, k, "gaussian", seed, dev)
        calls = {f: (lambda f=f: torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                   use_fast_accum=f)) for f in (False, True)}
        times = {False: [], True: []}
        for r in range(rounds):
            for f in ((False, True) if r % 2 == 0 else (True, False)):
                t, how = harness.graph_time_us([calls[f]], min_calls=8, rep=10)
                times[f].append(t)
        for f in (False, True):
            ts = sorted(times[f])
            med = ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
            speed.append({"M": m, "N": n, "K": k, "fast_accum": f, "median_us": med, "min_us": ts[0],
                          "max_us": ts[-1], "tflops": 2.0 * m * n * k / (med * 1e-6) / 1e12, "rounds": rounds,
                          "timing": how})
        if progress:
            print(f"K={k:6d}  fast_accum off {speed[-2]['median_us']:9.1f} us   on {speed[-1]['median_us']:9.1f} us",
                  flush=True)
        del qa, qb
        for dist in dists:
            qa, sa, qb, sb = _gpu_operands(m, n, k, dist, seed + 1, dev)
            ref = (qa[:ref_rows].double() * sa.double()) @ (qb.double() * sb.double()).T
            for f in (False, True):
                c = torch._scaled_mm(qa[:ref_rows], qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32,
                                     use_fast_accum=f)
                error.append({"M": ref_rows, "N": n, "K": k, "dist": dist, "fast_accum": f,
                              "rel_err": relative_error(ref, c)})
            if k in sim_ks:
                qt_a, qt_b = qa[:tile].float().cpu(), qb[:tile].float().cpu()
                sa_c, sb_c = float(sa), float(sb)
                ref_t = ref[:tile, :tile].cpu()
                row = {"K": k, "dist": dist, "tile": tile}
                for f in (False, True):
                    c = torch._scaled_mm(qa[:tile], qb[:tile].t(), scale_a=sa, scale_b=sb,
                                         out_dtype=torch.float32, use_fast_accum=f)
                    row[f"gpu_fast_accum_{str(f).lower()}"] = relative_error(ref_t, c.cpu())
                for rnd in ROUNDINGS:
                    for promote in (None, 128):
                        cs = accumulate(qt_a, qt_b, sa_c, sb_c, promote_every=promote, rounding=rnd)
                        row[f"sim_{rnd}_{'promote128' if promote else 'fast'}"] = relative_error(ref_t, cs)
                sim.append(row)
            del qa, qb, ref
        torch.cuda.empty_cache()
    return {"settings": {"M": m, "N": n, "ks": list(ks), "dists": list(dists), "rounds": rounds,
                         "ref_rows": ref_rows, "tile": tile, "seed": seed, "fmt": "e4m3 x e4m3, per-tensor scales",
                         "speed_out_dtype": "bfloat16", "error_out_dtype": "float32",
                         "sim_model": f"acc_bits={HOPPER_ACC_BITS}, chunk=32"},
            "speed": speed, "error": error, "sim_check": sim}


def summarize_gpu(rec: dict) -> str:
    """The short table a device run prints last (and notebook 10 shows)."""
    lines = [f"{'K':>7} {'off us':>9} {'on us':>9} {'speedup':>8}   rel. error vs float64 (off / on)"]
    sp = {(r["K"], r["fast_accum"]): r for r in rec["speed"]}
    err = {(r["K"], r["dist"], r["fast_accum"]): r["rel_err"] for r in rec["error"]}
    for k in rec["settings"]["ks"]:
        off, on = sp[(k, False)], sp[(k, True)]
        errs = "  ".join(f"{d}: {err[(k, d, False)]:.1e} / {err[(k, d, True)]:.1e}" for d in rec["settings"]["dists"])
        lines.append(f"{k:>7} {off['median_us']:>9.1f} {on['median_us']:>9.1f} "
                     f"{off['median_us'] / on['median_us']:>8.3f}   {errs}")
    return "\n".join(lines)


def _plt():
    # no matplotlib.use("Agg") here: it would stop a notebook from showing the figure (matplotlib picks Agg by
    # itself on a machine without a display)
    import matplotlib.pyplot as plt
    return plt


def plot_error_vs_k(rows: list[dict], key: str = "rel_err_acc"):
    """Relative error vs K (log-log), one line per variant, one panel per input distribution."""
    plt = _plt()
    dists = list(dict.fromkeys(r["dist"] for r in rows))
    fig, axes = plt.subplots(1, len(dists), figsize=(7 * len(dists), 4.6), squeeze=False)
    for ax, dist in zip(axes[0], dists):
        for j, v in enumerate(dict.fromkeys(r["variant"] for r in rows)):
            rr = sorted((r for r in rows if r["dist"] == dist and r["variant"] == v), key=lambda r: r["K"])
            ax.plot([r["K"] for r in rr], [r[key] for r in rr], "o-", color=f"C{j}", label=v)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("K (length of each dot product)")
        ax.set_ylabel("||C - C_float64|| / ||C_float64||")
        ax.set_title(f"{dist} inputs" + (" (same FP8 inputs: accumulation error only)" if key == "rel_err_acc" else ""),
                     fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def sim_verdict(rec: dict) -> list[dict]:
    """For each K and distribution of the GPU tile check: which CPU model is closest to the GPU's fast-accum error
    (ratio in log space), and the GPU's own error with fast accumulation off."""
    out = []
    for r in rec["sim_check"]:
        gpu = r["gpu_fast_accum_true"]
        models = {k: v for k, v in r.items() if k.startswith("sim_") and k.endswith("_fast")}
        best = min(models, key=lambda k: abs(math.log(max(models[k], 1e-30) / max(gpu, 1e-30))))
        out.append({"K": r["K"], "dist": r["dist"], "gpu_fast_on": gpu, "gpu_fast_off": r["gpu_fast_accum_false"],
                    **{k: v for k, v in r.items() if k.startswith("sim_")}, "closest_model": best})
    return out


def plot_gpu(rec: dict):
    """Left: time of _scaled_mm with fast accumulation off / on vs K (median, min-max bars). Right: error vs K."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.6))
    for j, f in enumerate((False, True)):
        rr = sorted((r for r in rec["speed"] if r["fast_accum"] == f), key=lambda r: r["K"])
        k = [r["K"] for r in rr]
        rate = lambda r, t: 2.0 * r["M"] * r["N"] * r["K"] / (t * 1e-6) / 1e12     # TFLOP/s at time t (us)
        tf = [rate(r, r["median_us"]) for r in rr]
        lo = [max(0.0, a - rate(r, r["max_us"])) for a, r in zip(tf, rr)]
        hi = [max(0.0, rate(r, r["min_us"]) - a) for a, r in zip(tf, rr)]
        axes[0].errorbar(k, tf, yerr=[lo, hi], marker="o", capsize=3, color=f"C{j}", label=f"use_fast_accum={f}")
        for d, ls in zip(rec["settings"]["dists"], ("-", "--")):
            re = sorted((r for r in rec["error"] if r["fast_accum"] == f and r["dist"] == d), key=lambda r: r["K"])
            axes[1].plot([r["K"] for r in re], [r["rel_err"] for r in re], marker="o", ls=ls, color=f"C{j}",
                         label=f"use_fast_accum={f}, {d}")
    s = rec["settings"]
    axes[0].set_title(f"torch._scaled_mm E4M3, M=N={s['M']}, bf16 out: TFLOP/s (median, min-max)", fontsize=10)
    axes[1].set_title("relative error vs float64 on the same FP8 inputs (fp32 out)", fontsize=10)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("K")
        ax.legend(fontsize=8)
    axes[1].set_yscale("log")
    fig.tight_layout()
    return fig


def load_gpu_record(path) -> dict | None:
    """The recorded GPU run, or None when it is not there (a CPU checkout before the first GPU run)."""
    from .store import read_json

    p = Path(path)
    if not p.is_file():
        return None
    return read_json(p, required=("provenance", "settings", "speed", "error", "sim_check"))


# ---- CLI ----------------------------------------------------------------------------------------------------
#: the K values of the CPU model when --ks is not given
CPU_KS = (128, 512, 2048, 8192, 16384)
#: the largest M x N x K the CPU model takes: it holds M x N x K / 32 float64 partial sums (2**32 -> 1 GiB)
CPU_MAX_MNK = 2 ** 32
#: the largest M x K (and M x N) the GPU measurement takes: fp32 operands of 8 GiB each (defaults: 2**28)
GPU_MAX_MK = 2 ** 31


def _size_problem(gpu: bool, m: int, ks) -> str | None:
    """Why M = N = m with these K is too large to run (one line), or None."""
    kmax = max(ks)
    if gpu:
        if m * kmax > GPU_MAX_MK or m * m > GPU_MAX_MK:
            return (f"--mn {m} with K up to {kmax} is too large for the GPU measurement: keep M x K and M x N "
                    f"<= 2**31 (the default is --mn 4096 with K up to 65536)")
        return None
    if m * m * kmax > CPU_MAX_MNK:
        fit = math.isqrt(CPU_MAX_MNK // kmax)
        return (f"--mn {m} with K up to {kmax} is too large for the CPU model (it holds M x N x K / 32 float64 "
                f"partial sums, {m * m * kmax / 4 / 2 ** 30:.3g} GiB): keep M x N x K <= 2**32"
                + (f", e.g. --mn {fit} for these K" if fit >= 1 else ", with a smaller K"))
    return None


def main(argv=None) -> int:
    from .cli import OneLineParser, UsageError, fail, parse, split_list

    p = OneLineParser(prog="python -m fp8lab.accumulation",
                      description="FP8 GEMM accumulation precision: CPU model, or torch._scaled_mm "
                                  "fast accumulation on a CUDA GPU (--gpu)")
    p.add_argument("--gpu", action="store_true", help="measure torch._scaled_mm use_fast_accum off/on")
    p.add_argument("--out", default=None, help="JSON file to write (GPU default: "
                   "outputs/accumulation/scaled_mm_fast_accum.json)")
    p.add_argument("--ks", default=None, help="comma-separated K values")
    p.add_argument("--mn", type=int, default=None, help="M = N (GPU default 4096, CPU default 64)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (GPU)")
    a, status = parse(p, argv)
    if a is None:
        return status
    try:
        ks = tuple(int(x) for x in split_list(a.ks, "--ks")) if a.ks is not None else None
    except UsageError as e:
        return fail(str(e))
    except ValueError:
        return fail(f"--ks must be comma-separated integers, got {a.ks!r}")
    if (ks and any(k < 128 or k % 128 for k in ks)) or (a.mn is not None and a.mn < 1) or not 1 <= a.rounds <= 1000:
        return fail("every K must be a positive multiple of 128, --mn >= 1, --rounds in 1 .. 1000")
    if a.gpu:
        import inspect
        dflt = inspect.signature(bench_scaled_mm_fast_accum).parameters
        problem = _size_problem(True, a.mn or dflt["m"].default, ks or dflt["ks"].default)
    else:
        problem = _size_problem(False, a.mn or 64, ks or CPU_KS)
    if problem:
        return fail(problem)
    if a.out is not None and not a.out.strip():
        return fail("--out is empty: name a JSON file (or leave it out)")
    from .provenance import provenance
    from .store import OutputError, atomic_write_json, check_file_target

    out = a.out or ("outputs/accumulation/scaled_mm_fast_accum.json" if a.gpu else None)
    try:
        if out is not None:
            check_file_target(out)          # a bad --out is refused before the work, not after
    except OutputError as e:
        return fail(str(e))

    cmd = "python -m fp8lab.accumulation " + " ".join(argv if argv is not None else sys.argv[1:])
    t0 = time.time()
    if a.gpu:
        if not torch.cuda.is_available():
            print("error: --gpu needs a CUDA device (torch.cuda.is_available() is False); without --gpu this "
                  "command runs the CPU model", file=sys.stderr)
            return 2
        kw = {"ks": ks} if ks else {}
        if a.mn:
            kw.update(m=a.mn, n=a.mn)
        rec = bench_scaled_mm_fast_accum(rounds=a.rounds, **kw)
        rec = {"provenance": provenance(cmd, cuda=True, wall_s=round(time.time() - t0, 1)), **rec}
        out = Path(out)
        try:
            atomic_write_json(out, rec)
        except OutputError as e:
            return fail(str(e))
        print(f"wrote {out} in {time.time() - t0:.0f} s")
        print(summarize_gpu(rec))
        return 0
    m = a.mn or 64
    rows = error_vs_k(ks or CPU_KS, m=m, n=m)
    if a.out:
        try:
            atomic_write_json(a.out, {"provenance": provenance(cmd, wall_s=round(time.time() - t0, 1)),
                                      "settings": {"M": m, "N": m, "chunk": 32}, "rows": rows})
        except OutputError as e:
            return fail(str(e))
        print(f"wrote {a.out}")
    print(format_error_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
