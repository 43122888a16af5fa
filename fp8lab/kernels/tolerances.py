"""How close a kernel's output must be to the float64 reference: one table, used by the tests and the benches.

A matmul kernel passes when, for every output element,

    |y - ref| <= rel * |ref| + acc(K) * sum_k |x_k w_k|          (ref and the terms in float64)

    t = matmul("gemv_fp8", K=14336)          # Tolerance(rel=2**-8, acc=...)
    t.worst(y, ref, terms)                   # max |y - ref| / bound: <= 1 passes; NaN never passes
    t.acc                                    # 14336 + 112 + 16 roundings of 2**-24: 8.7e-4 (2**-10.2)

Why each term (worst case, not typical: a correct kernel sits far below it, a wrong one far above):
  * rel = 2**-8: the bf16 output rounding is half an ulp (2**-9 relative); one ulp leaves room for an fp32 result
    sitting next to a rounding boundary.
  * acc(K), fp32 accumulation: summing n products in fp32 in any order (MMA chains, split-K partial sums,
    promotions) has an error of at most gamma_n = n u / (1 - n u) ~ n u of sum |terms| (Higham, Accuracy and
    Stability of Numerical Algorithms, sec. 4.2), u = 2**-24. The products themselves are exact (bf16 x bf16,
    e4m3-in-bf16 x bf16: at most 16 significant bits). n = K additions along the k chain, plus one rounding per
    128-wide k-block for the FP32 promotion, plus up to 16 split-K partial sums. The lab's earlier constant
    2**-13 was this bound at K = 2048 and too tight above it (K = 14336 needs 2**-10.2).
  * wgmma FP8 (Hopper): inside one wgmma the FP8 tensor cores keep only ~14 mantissa bits while accumulating
    (DeepSeek-V3 report, sec. 3.3.2); promotion every 128 k caps that at a few 2**-14 of each block's sum |terms|,
    and the blocks' sums add up to the total, so it does not grow with K: 2**-11 (8x margin) plus the fp32
    accumulation of the K / 128 promoted blocks.
  * attention: the softmax-weighted sum over L tokens accumulates in fp32 (L u of max|V|) on top of the rounding
    of P to f16 / bf16 for the MMA and of the output to bf16 (module `attention`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

U32 = 2.0**-24  # unit roundoff of fp32 round-to-nearest


def gamma(n: int, u: float = U32) -> float:
    """Higham's gamma_n = n u / (1 - n u): the worst relative error of n floating-point additions."""
    return n * u / (1 - n * u)


@dataclass(frozen=True)
class Tolerance:
    rel: float
    acc: float
    why: str = ""

    def bound(self, ref, terms):
        return self.rel * ref.abs() + self.acc * terms

    def worst(self, y, ref, terms) -> float:
        """max |y - ref| / bound over all elements (inf where the output is NaN or Inf, or a bound is exceeded at 0)."""
        import torch

        err = (y.double() - ref).abs()
        b = self.bound(ref, terms)
        ratio = torch.where(err <= b, err / b.clamp_min(1e-300), torch.full_like(err, math.inf))
        return float(ratio.max()) if ratio.numel() else 0.0


FP32_ACCUMULATING = ("gemv_fp8", "gemv_nvfp4", "mma_bf16", "mma_fp8")
WGMMA = ("wgmma", "wgmma_pipe", "wgmma_256", "wgmma_ws")


def matmul(kernel: str, K: int, split_k: int = 16) -> Tolerance:
    """The tolerance of a GEMV/GEMM kernel family at reduction length K (see the module docstring)."""
    blocks = math.ceil(K / 128)
    if kernel.startswith(FP32_ACCUMULATING):
        return Tolerance(2**-8, gamma(K + blocks + split_k),
                         f"bf16 output ulp; fp32 accumulation of {K} products, {blocks} promotions, {split_k} split-K sums")
    if kernel.startswith(WGMMA):
        return Tolerance(2**-8, 2**-11 + gamma(blocks + 1),
                         "bf16 output ulp; ~14-bit wgmma accumulation inside a 128-k block (8x margin), fp32 across blocks")
    raise KeyError(f"no tolerance for kernel {kernel!r}; known: {', '.join(FP32_ACCUMULATING + WGMMA)}")


@dataclass(frozen=True)
class AttentionTolerance:
    rtol: float   # of |ref|
    atol: float   # of max |V|
    rms: float    # relative RMS error of the whole output

    def check(self, out, ref, vmax: float, what: str = "", dtype=None) -> tuple[float, float]:
        """Raise AssertionError unless out is finite, every element within atol * vmax + rtol * |ref|, and the
        relative RMS error within rms (the first five offenders listed). Returns (max abs error, relative RMS).
        dtype: compare in this dtype on the CPU (default float64)."""
        import torch

        dtype = dtype or torch.float64
        out, ref = out.to(dtype).cpu(), ref.to(dtype).cpu()
        if not torch.isfinite(out).all():
            raise AssertionError(f"{what}: {int((~torch.isfinite(out)).sum())} non-finite outputs (poison left?)")
        err = (out - ref).abs()
        bad = err > self.atol * vmax + self.rtol * ref.abs()
        if bad.any():
            idx = bad.nonzero()[:5].tolist()
            lines = [f"  [{i}] Yours: {out[tuple(i)].item():.6g}  Spec: {ref[tuple(i)].item():.6g}" for i in idx]
            raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} outside tolerance "
                                 f"(max err {err.max().item():.3g})\n" + "\n".join(lines))
        rel = (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30)).item()
        if rel > self.rms:
            raise AssertionError(f"{what}: relative RMS error {rel:.3g} > {self.rms:.3g}")
        return err.max().item(), rel


def attention(kind: str, L: int) -> AttentionTolerance:
    """FP8-KV ("fp8"), bf16-KV ("bf16") or NVFP4-KV ("nvfp4") decode attention, or chunked prefill ("prefill"), at
    context L.

    fp8: bf16 output rounding (unit roundoff 2**-8 relative) -> rtol 2**-7 (2x margin); P rounded to f16 before
    the P.V MMA (P in [0, 2**15], unit roundoff 2**-11) moves the output by <= 2**-11 max|V| -> atol 2**-10, plus
    fp32 accumulation over L tokens (gamma_L max|V|). K, V (E4M3 -> f16) and Q (power-of-two prescale) are exact.
    RMS: the bf16 output rounding (~2**-9) and the f16 rounding of P dominate; 2**-8.
    bf16: P is rounded to bf16 for the MMA (FlashAttention does the same): 2**-8 max|V| -> atol 2**-7; RMS 2**-7.
    nvfp4: the NVFP4-KV kernel widens e2m1 * e4m3 * 2**-8 to bf16 exactly (<= 6 significant bits) and runs bf16 MMAs,
    so its only roundings are the bf16 cache's: the same bounds, against the float64 attention on the decoded values.
    prefill: the chunked-prefill kernel (attention_prefill.cu) rounds P to bf16 (bf16 cache) or f16 (FP8 cache) like
    the decode kernels; Q is bf16 (exact in both paths), K/V exact after widening: the bf16 bounds cover both.
    """
    if kind == "fp8":
        return AttentionTolerance(2**-7, 2**-10 + gamma(L), 2**-8)
    if kind in ("bf16", "nvfp4", "prefill"):
        return AttentionTolerance(2**-7, 2**-7 + gamma(L), 2**-7)
    raise KeyError(f"attention tolerance kind must be 'fp8', 'bf16', 'nvfp4' or 'prefill', got {kind!r}")


#: the benchmark's looser validation of attention outputs at benchmark sizes (relative RMS against float32 SDPA on
#: the dequantized cache): a wrong kernel (a missed tile, a wrong scale) is orders of magnitude above it.
ATTENTION_BENCH_REL_RMS = 2**-6
