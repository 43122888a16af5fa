"""Version 6 of the W8A16 GEMV (gemv_v6.cu): bf16 activations split into two E4M3 terms, FP8 wgmma on the weights.

CPU part: the split (fp8lab.kernels.gemv_v6.split_reference) keeps bf16's precision where it should and says where it
cannot; the row layout (hi, lo per token, zero padding); the split's effect on y is small next to one bf16 rounding of
x; the argument checks and the compiled list.
GPU part (@gpu, sm_90 only): the split kernel equals split_reference bit for bit; the GEMV equals
gemv_v6.reference within tolerances.matmul("wgmma", K) on poisoned outputs, per channel and 128 x 128 blocks, every
compiled (MH, ST), small grids (tiles cut among several CTAs) and large, the split fused into the GEMV and as its own
kernel; two calls give the same bits.
"""
import math

import pytest
import torch

from fp8lab import formats
from fp8lab.kernels import cuda_available
from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels import gemv_v6 as V6
from fp8lab.kernels import tolerances


def _cc():
    from fp8lab.kernels import _cuda

    return _cuda.device_cc() if cuda_available() else None


def gpu(test):
    """A GPU test that needs sm_90 (wgmma): marked `gpu`, skipped elsewhere."""
    return pytest.mark.gpu(pytest.mark.skipif(_cc() != 90, reason="needs an sm_90 GPU (wgmma)")(test))


def _x(M, K, seed=0, spread=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g)
    if spread:  # magnitudes over many binades: some groups with a large outlier, some tiny values
        x = x * torch.exp2(torch.randint(-12, 4, (M, K), generator=g).float())
    return x.to(torch.bfloat16)


# ---- CPU: the split ---------------------------------------------------------------------------------------------
def test_split_layout_and_scales():
    from fp8lab import scaling

    x = _x(3, 512)
    x8, sx = V6.split_reference(x)
    assert x8.shape == (8, 512) and x8.dtype == torch.uint8 and sx.shape == (3, 4)
    amax = x.float().abs().view(3, 4, 128).amax(-1)
    e = scaling.mx_scale_exponent(amax, formats.E4M3, "ceil")
    assert torch.equal(sx, torch.exp2(e.float()))                    # powers of two: MX's "ceil" rule per 128-group
    q = x.float() / sx.repeat_interleave(128, 1)
    assert float(q.abs().max()) <= 256                               # never near E4M3's 448: no saturation
    assert torch.equal(x8[0:6:2], formats.E4M3.encode(q))             # hi: q rounded to E4M3
    assert int(x8[6:].count_nonzero()) == 0                          # padding rows stay zero
    assert V6.rows_for(1) == 8 and V6.rows_for(4) == 8 and V6.rows_for(5) == 16 and V6.rows_for(16) == 32


def test_split_keeps_bf16_precision_for_normal_quotients():
    x = _x(4, 1024, seed=1)
    v = V6.split_values(x)
    _, sx = V6.split_reference(x)
    s = sx.double().repeat_interleave(128, dim=1)
    q = x.double() / s
    err = (v - x.double()).abs()
    normal = q.abs() >= 2.0**-6   # E4M3's smallest normal
    assert bool(normal.any()) and bool((~normal).any())
    assert float((err[normal] / x.double().abs()[normal]).max()) <= 2.0**-8          # 8 significant bits
    assert float((err[~normal] / s[~normal]).max()) <= 2.0**-14                      # both terms subnormal
    # and it is not exact in general: the split is a rounding, which the lab reports
    assert float(err.max()) > 0


def test_split_worked_example():
    x = torch.zeros(1, 128, dtype=torch.bfloat16)
    x[0, 0], x[0, 1] = 256.0, 3.3     # amax 256 -> e = ceil(log2 256) - 8 = 0
    x8, sx = V6.split_reference(x)
    E = formats.E4M3.table().double()
    assert float(sx[0, 0]) == 1.0
    hi, lo = float(E[x8[0, 1].long()]), float(E[x8[1, 1].long()])
    assert hi == 3.25 and lo == 0.75 and hi + lo / 16 == float(x[0, 1])   # 3.296875: every bit of the bf16


def test_split_of_zero_and_nonfinite_groups():
    x = torch.zeros(1, 384, dtype=torch.bfloat16)
    x[0, 130] = float("nan")
    x[0, 131] = 2.0
    x[0, 260], x[0, 261] = float("inf"), 1.0
    x8, sx = V6.split_reference(x)
    assert float(sx[0, 0]) == 2.0**-127 and int(x8[:2, :128].count_nonzero()) == 0   # all zero: E8M0's smallest
    assert float(sx[0, 1]) == 2.0**-7                                                # NaN ignored: amax 2 -> e = -7
    assert int(x8[0, 130]) == int(x8[1, 130]) == formats.E4M3.nan_code              # and propagated in both terms
    assert float(sx[0, 2]) == 2.0**-8 and int(x8[0, 260]) == 0x7E                  # Inf ignored, then saturated


def test_split_error_is_below_one_bf16_rounding():
    g = torch.Generator().manual_seed(3)
    w, scale = F8.random_codes(256, 1024, device="cpu", generator=g), torch.rand(256, generator=g) + 0.5
    e = V6.split_error(_x(2, 1024, seed=4), w, scale)
    assert e["max"] <= 2.0**-8 and e["rms"] <= e["max"]


def test_reference_is_the_split_activations_times_the_weights():
    g = torch.Generator().manual_seed(5)
    x, w, scale = _x(2, 256, seed=6), F8.random_codes(128, 256, device="cpu", generator=g), torch.rand(128, generator=g)
    ref = V6.reference(x, w, scale)
    exact = F8.reference(x, w, scale)
    assert ref.shape == (2, 128) and not torch.equal(ref, exact)
    terms = x.double().abs() @ F8.dequant_weight(w, scale).abs().T
    assert float(((ref - exact).abs() / terms).max()) <= 2.0**-8


def test_rejects_bad_arguments():
    x = torch.zeros(1, 256, dtype=torch.bfloat16)
    w = torch.zeros(128, 256, dtype=torch.uint8)
    with pytest.raises(ValueError, match="M = 1..16"):
        V6.prepare(torch.zeros(17, 256, dtype=torch.bfloat16), w, torch.ones(128))
    with pytest.raises(TypeError, match="CUDA tensor"):
        V6.prepare(x, w, torch.ones(128))
    with pytest.raises(ValueError, match="multiple of 128"):
        V6.split_reference(torch.zeros(1, 200, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="must be compiled"):
        V6.check_config((3, 3, 0), 1, 128, "channel")
    with pytest.raises(ValueError, match="multiple of 128"):
        V6.check_config((2, 4, 1), 1, 192, "channel")


def test_default_grid_and_split_placement():
    assert V6.default_config(1, 14336, 132) == (1, 4, 0)          # 224 whole 64-row tiles: one CTA each
    assert V6.default_config(1, 4096, 132) == (2, 4, 1)           # 64 tiles: too few, stream-K over the SMs
    assert V6.fused_default(1, 1) and V6.fused_default(4, 2)
    assert not V6.fused_default(5, 1) and not V6.fused_default(1, 0)


@pytest.mark.parametrize("T,KB,grid", [(112, 32, 132), (224, 32, 224), (1, 2, 396), (16, 8, 396), (7, 3, 5),
                                       (64, 112, 132), (13, 1, 4), (3, 5, 15)])
def test_grid_plan_counts_every_ctas_piece(T, KB, grid):
    """The kernel's owner of unit u, ((u + 1) P - 1) // U, against the CTAs' ranges written out: every CTA holds >= 1
    unit, and maxp is the most distinct CTAs any tile's units fall in."""
    P, maxp = V6.grid_plan(T, KB, grid)
    U = T * KB
    assert P == min(grid, U)
    ranges = [(c * U // P, (c + 1) * U // P) for c in range(P)]
    assert all(u1 > u0 for u0, u1 in ranges)
    holders = [{c for c, (u0, u1) in enumerate(ranges) for u in range(t * KB, (t + 1) * KB) if u0 <= u < u1}
               for t in range(T)]
    assert maxp == max(len(h) for h in holders)
    owner = lambda u: ((u + 1) * P - 1) // U  # noqa: E731 - gemv_v6.cu's v6_owner
    assert all(min(h) == owner(t * KB) and max(h) == owner(t * KB + KB - 1) and len(h) == max(h) - min(h) + 1
               for t, h in enumerate(holders))


def test_compiled_list_is_the_define():
    (d,) = V6.cuda_defines()
    assert d.startswith("FP8LAB_GEMV_V6=") and d.count("GEMV6(") == len(V6.KERNELS)


# ---- GPU ---------------------------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("M,K", [(1, 128), (3, 1024), (8, 4096), (16, 2048)])
def test_split_kernel_is_bit_exact(M, K):
    x = _x(M, K, seed=M).cuda()
    x[0, :128] = 0                      # an all-zero group
    x[-1, 5] = float("nan")
    x[-1, 300 % K] = float("-inf")
    x[0, 129 % K] = 1e-39               # a subnormal bf16
    launch = V6.prepare(x, torch.zeros(128, K, dtype=torch.uint8, device="cuda"), torch.ones(128, device="cuda"),
                        fused=False)
    launch.x8.fill_(0x55)
    launch.x8[2 * M:].zero_()
    launch.split_only()
    torch.cuda.synchronize()
    x8, sx = V6.split_reference(x)
    assert torch.equal(launch.x8, x8)
    assert torch.equal(launch.sx.view(torch.int32), sx.view(torch.int32))


CASES = [(1, 128, 256, None, None), (1, 512, 1024, None, 3), (4, 1024, 2048, None, 132), (5, 256, 4096, None, 7),
         (8, 2048, 1024, None, None), (16, 384, 3072, None, 5), (16, 4096, 4096, None, None), (2, 192, 512, (1, 8, 1), 4),
         (12, 640, 1024, (1, 4, 0), None), (1, 1024, 4096, (2, 6, 1), 17), (3, 1024, 3072, (2, 8, 1), 9),
         (16, 1024, 2048, (2, 6, 2), None), (1, 256, 1024, (2, 4, 1), 1), (9, 512, 512, (1, 8, 0), 2),
         (1, 2048, 2048, (2, 8, 1), 16), (8, 1024, 1024, (1, 4, 3), None), (1, 19968, 512, (1, 2, 0), None),
         (16, 1536, 1024, (2, 3, 0), None), (4, 768, 2048, (1, 3, 2), None), (2, 1024, 512, (2, 2, 1), None)]


@gpu
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("mode", ["channel", "block"])
@pytest.mark.parametrize("M,N,K,config,grid", CASES)
def test_gemv_v6_matches_the_reference(mode, M, N, K, config, grid, fused):
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N)
    w = F8.random_codes(N, K, generator=g)
    scale = (torch.rand(N, device="cuda", generator=g) + 0.5) * 1e-2 if mode == "channel" else \
        (torch.rand(math.ceil(N / 128), K // 128, device="cuda", generator=g) + 0.5) * 1e-2
    x = _x(M, K, seed=N).cuda()
    if K >= 512:
        x[0, 130:140] = 0               # assorted groups: partly zero, one tiny, one with a NaN-free outlier
        x[-1, 256:384] = x[-1, 256:384] * 1e-30
        x[M // 2, 400] = 3e4
    launch = V6.prepare(x, w, scale, config=config, grid=grid, pdl=bool(M % 2), fused=fused)
    launch.out.fill_(float("nan"))
    y = launch().clone()
    ref = V6.reference(x, w, scale)
    terms = V6.split_values(x).abs() @ F8.dequant_weight(w, scale).abs().T
    tol = tolerances.matmul("wgmma", K)
    assert tol.worst(y, ref, terms) <= 1.0, launch.info
    # repeatable: the same bits on a second call (split tiles are summed in piece order)
    launch.out.fill_(float("nan"))
    assert torch.equal(launch().view(torch.int16), y.view(torch.int16))


@gpu
def test_gemv_v6_is_close_to_the_exact_w8a16_answer():
    M, N, K = 4, 1024, 4096
    g = torch.Generator(device="cuda").manual_seed(11)
    w, scale = F8.random_codes(N, K, generator=g), torch.rand(N, device="cuda", generator=g) + 0.5
    x = _x(M, K, seed=12, spread=False).cuda()
    y = V6.gemv_v6(x, w, scale)
    exact = F8.reference(x, w, scale)
    terms = x.double().abs() @ F8.dequant_weight(w, scale).abs().T
    # the split (<= 2**-8 of sum |x w|, split_error) on top of the kernel's own tolerance
    tol = tolerances.matmul("wgmma", K)
    bound = tol.bound(exact, terms) + 2.0**-8 * terms
    assert bool(((y.double() - exact).abs() <= bound).all())


# ---- CPU: the report of a probe run (gemm_report.v6_table, findings.v6_sentence) ----------------------------------
def _probe_doc():
    rows, checks = [], []
    for (N, K, M, sm, v3, v6, fz) in [(4096, 1024, 1, 20.0, 19.0, 21.0, 25.0), (8192, 1024, 1, 40.0, 41.0, 38.0, 50.0),
                                      (4096, 1024, 16, 22.0, 25.0, 24.0, 40.0)]:
        for name, t in (("_scaled_mm tensorwise", sm), ("v3 default", v3), ("v6 split+gemv default", v6),
                        ("v6 split+gemv 1:2:0", v6 * 1.1), ("v6 fused default", fz), ("v6 split only", 1.5)):
            rows.append({"family": "v6", "N": N, "K": K, "M": M, "variant": name, "median_us": t, "q1_us": t * 0.99,
                         "q3_us": t * 1.01, "vs_scaled_mm": sm / t, "of_copy": N * K / 4e3 / t})
        checks.append({"N": N, "K": K, "M": M, "split_error": {"max": 1e-9, "rms": 1e-10},
                       "err_over_tol": {"v3 default": 0.5, "v6 split+gemv default": 0.4, "v6 fused default": 0.3,
                                        "not timed": 7.0}})
    rows.append({"family": "other", "N": 1, "K": 1, "M": 1, "variant": "v6 split+gemv default"})  # not this probe's
    return {"results": rows, "checks": checks}


def test_v6_table_reads_a_probe_run():
    from fp8lab.kernels import gemm_report

    rows = gemm_report.v6_table(_probe_doc())
    assert [(r["N"], r["M"]) for r in rows] == [(4096, 1), (8192, 1), (4096, 16)]   # by M, then size
    r = rows[1]
    assert r["v6"] == round(40 / 38, 3) and r["v3"] == round(40 / 41, 3) and r["v6_fused"] == 0.8
    assert r["v6_lo"] == round(40 * 0.99 / (38 * 1.01), 3) and r["v6_hi"] == round(40 * 1.01 / (38 * 0.99), 3)
    assert r["best"] == "default" and r["split_us"] == 1.5 and r["err_over_tol"] == 0.5   # untimed variants ignored
    assert r["gemv_only"] is None                                   # not timed in this run
    doc = _probe_doc()
    doc["results"].append({**doc["results"][0], "variant": "v6 gemv only", "vs_scaled_mm": 1.05})
    assert gemm_report.v6_table(doc)[0]["gemv_only"] == 1.05
    assert gemm_report.v6_table({}) == []


def test_v6_configs_ranks_each_point():
    from fp8lab.kernels import gemm_report

    rows = gemm_report.v6_configs(_probe_doc())
    assert [(r["N"], r["M"]) for r in rows] == [(4096, 1), (8192, 1), (4096, 16)]
    r = rows[0]   # 1:2:0 took 1.1x the default's time: the default is the best
    assert r["best"] == "default" and r["default"] == round(20 / 21, 3) and r["gain"] == 1.0
    assert r["configs"] == {"1:2:0": round(20 / 23.1, 3), "default": round(20 / 21, 3)}   # split+gemv only
    assert gemm_report.v6_configs({}) == []
    assert r["gain_lo"] == round(21 * 0.99 / (21 * 1.01), 3)            # the default against itself: quartiles overlap
    r = gemm_report.v6_configs(_probe_doc())[1]
    assert r["best"] == "default" and r["configs"]["1:2:0"] < r["default"]


def test_v6_tune_sentence_names_the_configs_that_won():
    from fp8lab import findings
    from fp8lab.kernels import gemm_report

    doc = _probe_doc()
    for r in doc["results"]:   # at (8192, 1024, M=1) 1:2:0 takes 30 us against the default's 38: quartiles apart
        if (r["N"], r["M"], r["variant"]) == (8192, 1, "v6 split+gemv 1:2:0"):
            r.update(median_us=30.0, q1_us=29.7, q3_us=30.3, vs_scaled_mm=40 / 30)
    rows = gemm_report.v6_configs(doc)
    assert rows[1]["best"] == "1:2:0" and rows[1]["gain"] == round((40 / 30) / (40 / 38), 3) and rows[1]["gain_lo"] > 1
    text = findings.v6_tune_sentence(rows, "TEST GPU")
    assert "TEST GPU, 2 configurations of the split+GEMV call at 3 points" in text
    assert "the default was the fastest, or not beaten beyond the quartiles, at 2 of 3." in text
    assert "`1:2:0` at 8192x1024 M = 1 (1.267x the default's speed)" in text
    assert findings.v6_tune_sentence([]) == "This run holds no version-6 tuning."


def test_v6_sentence_renders_the_numbers():
    from fp8lab import findings
    from fp8lab.kernels import gemm_report

    text = findings.v6_sentence(gemm_report.v6_table(_probe_doc()), "TEST GPU")
    assert "TEST GPU" in text and "over 2 shapes" in text
    assert f"{20 / 21:.3f}–{40 / 38:.3f}x" in text                      # M = 1 range of version 6
    assert "faster of the two at 2 of 3 points" in text                  # 21 < 19? no; 38 < 41 yes; 24 < 25 yes
    assert "at 1 of 3" in text and "slower than the two-kernel call at 3 of 3" in text
    assert findings.v6_sentence([]) == "This run holds no timing of version 6."
    assert "GEMV alone" not in text                                      # not timed in this run
    rows = gemm_report.v6_table(_probe_doc())
    rows[0]["gemv_only"], rows[1]["gemv_only"] = 1.02, 0.9
    text = findings.v6_sentence(rows)
    assert "At M = 1 the default's GEMV alone" in text and "ran 0.900–1.020x `_scaled_mm`" in text
    assert "(faster than the two-kernel call at 1 of 2 shapes, and at least as fast as `_scaled_mm` at 1)" in text
