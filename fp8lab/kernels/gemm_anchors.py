"""The anchors every gemm result is compared with, measured in the same run: cuBLAS bf16 (torch) and
torch._scaled_mm FP8 (tensorwise, rowwise, blockwise 1x128 x 128x128) -- what a user would pick off the shelf.

    fn, layout = scaled_mm_calls("blockwise", xq, wq, sa, sb)   # a zero-arg callable and the layout torch accepted
    measure_ceilings() -> {"copy_gbps": ..., "bf16_gemm_tflops_8192": ..., "fp8_scaled_mm_tensorwise_tflops_8192": ...}
"""
from __future__ import annotations

from . import harness


def scaled_mm_calls(kind: str, xq, wq, sa, sb):
    """A zero-arg callable for torch._scaled_mm with `kind` scaling, and a note on the layout used.

    xq [M, K] fp8, wq [N, K] fp8 (passed as wq.t(), column-major as cuBLASLt wants); sa [M, K/128] and
    sb [N/128, K/128] dequant scales (blockwise only). Raises if torch rejects every layout tried."""
    import torch

    M, K = xq.shape
    N = wq.shape[0]
    dev = xq.device
    if kind == "tensorwise":
        one = torch.tensor(1.0, device=dev)
        return (lambda: torch._scaled_mm(xq, wq.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), "scalar scales"
    if kind == "rowwise":
        ra, rb = torch.ones(M, 1, device=dev), torch.ones(1, N, device=dev)
        return (lambda: torch._scaled_mm(xq, wq.t(), scale_a=ra, scale_b=rb, out_dtype=torch.bfloat16)), "[M,1] x [1,N]"
    assert kind == "blockwise"
    sa_cm = sa.t().contiguous().t()  # 'outer-dim-major' [M, K/128], strides (1, M)
    tries = [
        ("_scaled_mm(sa col-major, sb.t())", lambda: torch._scaled_mm(xq, wq.t(), scale_a=sa_cm, scale_b=sb.t(), out_dtype=torch.bfloat16)),
        ("_scaled_mm(sa col-major, sb)", lambda: torch._scaled_mm(xq, wq.t(), scale_a=sa_cm, scale_b=sb, out_dtype=torch.bfloat16)),
    ]
    try:
        from torch.nn.functional import ScalingType, scaled_mm

        tries.append(("F.scaled_mm(BlockWise1x128, BlockWise128x128)",
                      lambda: scaled_mm(xq, wq.t(), sa_cm, ScalingType.BlockWise1x128, sb.t(),
                                        ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)))
    except Exception:
        pass
    errors = []
    for note, fn in tries:
        try:
            fn()
            torch.cuda.synchronize()
            return fn, note
        except Exception as e:
            errors.append(f"{note}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    raise RuntimeError(" | ".join(errors))


def measure_ceilings() -> dict:
    import torch

    out = {"copy_gbps": harness.copy_bandwidth_gbps(2 * 2**30)}
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    t, _ = harness.graph_time_us([lambda: a @ b], min_calls=4, rep=10)
    out["bf16_gemm_tflops_8192"] = 2 * n**3 / (t * 1e-6) / 1e12
    aq, bq = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    try:
        fn, _ = scaled_mm_calls("tensorwise", aq, bq, None, None)
        t, _ = harness.graph_time_us([fn], min_calls=4, rep=10)
        out["fp8_scaled_mm_tensorwise_tflops_8192"] = 2 * n**3 / (t * 1e-6) / 1e12
    except Exception as e:
        out["fp8_scaled_mm_tensorwise_error"] = str(e)[:300]
    del a, b, aq, bq
    torch.cuda.empty_cache()
    return out
