"""Worked answers to notebook 10's exercises (accumulation precision): the CPU model of fp8lab.accumulation, and
the recorded torch._scaled_mm run when this checkout has it.

    python notebooks/solutions/10_accumulation_precision.py
"""
import torch

from fp8lab import accumulation as acc
from fp8lab import findings
from fp8lab import notebook as nb
from fp8lab.metrics import relative_error

KS = (256, 1024, 4096)
MN = 16


def _fast_errors(bits: int, ks=KS) -> list[float]:
    out = []
    for k in ks:
        a, b = acc.operands(MN, MN, k)
        qa, _, qb, _ = acc.quantize_operands(a, b)
        exact = qa.double() @ qb.double().T
        out.append(relative_error(exact, acc.accumulate(qa, qb, acc_bits=bits, promote_every=None)))
    return out


def exercise_1() -> dict:
    """The bit count moves the level, not the shape: one bit fewer roughly doubles the error at every K, one more
    roughly halves it, and the growth with K (the log-log slope) stays the same, because truncation loses up to one
    unit in the last place per addition whatever that unit is. So "around 14 bits" matters for how large the error
    is, not for whether it grows with K; the remedy (promotion) is the same."""
    out = {}
    for bits in (acc.HOPPER_ACC_BITS - 1, acc.HOPPER_ACC_BITS, acc.HOPPER_ACC_BITS + 1):
        e = _fast_errors(bits)
        out[f"acc_bits={bits}"] = {f"K={k}": f"{v:.2e}" for k, v in zip(KS, e)}
        out[f"acc_bits={bits} log-log slope"] = round(findings._loglog_slope(KS, e), 2)
    return out


def exercise_2() -> dict:
    """With promotion every P, the limited accumulator sums at most P products, so the error stops growing once K
    exceeds P: it is flat from K = P on and grows like fast accumulation below it. Larger P buys fewer promotions
    (cheaper for the kernel) at the price of a higher plateau — roughly the fast-accumulation error at K = P."""
    ks = (512, 1024, 2048)
    out = {}
    for p in (128, 256, 512):
        row = {}
        for k in ks:
            a, b = acc.operands(MN, MN, k)
            qa, _, qb, _ = acc.quantize_operands(a, b)
            exact = qa.double() @ qb.double().T
            row[f"K={k}"] = f"{relative_error(exact, acc.accumulate(qa, qb, promote_every=p)):.2e}"
        out[f"promote_every={p}"] = row
    return out


def exercise_3() -> dict:
    """Compare the two columns. In every row the total error (against the unquantized inputs) is an order of
    magnitude or more above the accumulator's (against the same FP8 inputs): the inputs' E4M3 rounding dominates.
    The outlier channel does not raise the *relative* error of C much here, because that channel also dominates C's
    norm: the other channels' coarser rounding is measured against a larger C (a metric on the small outputs, or a
    per-row one, would show it). 1×128 groups confine the coarse scale to the group that holds the outlier, and
    promotion every 128 cuts the accumulator's own error several-fold; the total changes little. The rows without
    an outlier are the reference. Lesson: check which error dominates before fixing the accumulator."""
    k = 1024
    out = {}
    for outlier in (False, True):
        a, b = acc.operands(MN, MN, k)
        if outlier:
            a[:, 0] *= 100
        for scales, promote in (("tensor", None), ("block", 128)):
            c = acc.simulate_gemm(a, b, scales=scales, promote_every=promote)
            same_fp8, unquantized = acc.exact_gemm(a, b, scales)
            out[f"{'outlier' if outlier else 'no outlier'}, {scales} scales, promote={promote}"] = {
                "vs same FP8 inputs (accumulator)": f"{relative_error(same_fp8, c):.2e}",
                "vs unquantized inputs (total)": f"{relative_error(unquantized, c):.2e}"}
    return out


def exercise_4() -> dict:
    """Read the recorded run: the speed ratio off/on at each K, the K where it is largest, whether the rounds'
    min–max ranges separate there (if they overlap, the gain is not resolved by this run), and the error of both
    settings at that K. Without a recorded file the answer says how to make it."""
    path = nb.OUTPUTS / "accumulation" / "scaled_mm_fast_accum.json"
    rec = acc.load_gpu_record(path)
    if rec is None:
        return {"recorded": False, "make it": "python -m fp8lab.accumulation --gpu (CUDA device)"}
    sp = {(r["K"], r["fast_accum"]): r for r in rec["speed"]}
    ks = sorted({k for k, _ in sp})
    ratio = {k: sp[(k, False)]["median_us"] / sp[(k, True)]["median_us"] for k in ks}
    k = max(ratio, key=ratio.get)
    off, on = sp[(k, False)], sp[(k, True)]
    err = {(r["dist"], r["fast_accum"]): r["rel_err"] for r in rec["error"] if r["K"] == k}
    return {"provenance": nb.provenance_line(rec), "best K": k, "speed ratio off/on": round(ratio[k], 3),
            "ranges separate": on["max_us"] < off["min_us"] or off["max_us"] < on["min_us"],
            "error (dist, fast_accum)": {f"{d}, {f}": f"{v:.1e}" for (d, f), v in err.items()}}


if __name__ == "__main__":
    nb.run_exercises(globals())
