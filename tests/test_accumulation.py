"""The accumulation model against exact references: float64 sums, float32 sequential sums, the scale-factoring rule."""
import math

import pytest
import torch

from fp8lab import accumulation as A


def test_round_to_bits_24_nearest_is_the_float32_cast():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100_000, generator=g, dtype=torch.float64) * torch.logspace(-20, 20, 100_000, dtype=torch.float64)
    assert torch.equal(A.round_to_bits(x, 24, "nearest"), x.float().double())


@pytest.mark.parametrize("x, bits, rounding, want", [
    (1 + 2.0 ** -14, 14, "nearest", 1.0),                    # below half an ulp (ulp = 2**-13)
    (1 + 3 * 2.0 ** -14, 14, "nearest", 1 + 2 * 2.0 ** -13),  # exact midpoint 1.5 ulp -> even (2 ulp)
    (1 + 2.0 ** -14, 14, "toward_zero", 1.0),
    (2 - 2.0 ** -20, 14, "toward_zero", 2 - 2.0 ** -13),      # truncation never rounds up
    (-(2 - 2.0 ** -20), 14, "toward_zero", -(2 - 2.0 ** -13)),  # toward zero, not toward -inf
    (0.0, 14, "nearest", 0.0),
])
def test_round_to_bits_cases(x, bits, rounding, want):
    assert A.round_to_bits(torch.tensor([x], dtype=torch.float64), bits, rounding).item() == want


def test_round_to_bits_rejects_bad_arguments():
    with pytest.raises(ValueError):
        A.round_to_bits(torch.zeros(1, dtype=torch.float64), 14, "up")
    with pytest.raises(TypeError):
        A.round_to_bits(torch.zeros(1), 14)


def _fp8_values(m, k, seed):
    qa, sa, _, _ = A.quantize_operands(*A.operands(m, k, k, "gaussian", seed))
    return qa


def test_full_precision_accumulator_equals_float64_sum():
    qa, qb = _fp8_values(8, 512, 0), _fp8_values(6, 512, 1)
    exact = (qa.double() @ qb.double().T).float().double()      # one rounding, at the output register
    assert torch.equal(A.accumulate(qa, qb, acc_bits=53, rounding="nearest", promote_every=None), exact)
    # promotion: exact 128-block partials, added one by one in float32
    want = torch.zeros(8, 6, dtype=torch.float32)
    for g in range(4):
        want = (want.double() + qa[:, g * 128:(g + 1) * 128].double() @ qb[:, g * 128:(g + 1) * 128].double().T).float()
    assert torch.equal(A.accumulate(qa, qb, acc_bits=53, rounding="nearest", promote_every=128), want.double())


def test_fp32_accumulator_with_chunk_1_equals_sequential_float32_sum():
    qa, qb = _fp8_values(4, 256, 2), _fp8_values(3, 256, 3)
    want = torch.zeros(4, 3, dtype=torch.float32)
    for k in range(256):   # one product at a time, float32 add (products are exact in float32)
        want = want + (qa[:, k:k + 1] * qb[:, k][None, :]).float()
    got = A.accumulate(qa, qb, acc_bits=24, chunk=1, promote_every=None, rounding="nearest")
    assert torch.equal(got, want.double())


def test_truncating_fast_accumulation_error_grows_with_k_and_promotion_bounds_it():
    rows = A.error_vs_k(ks=(256, 4096), m=32, n=32, dists=("gaussian",),
                        variants={k: v for k, v in A.VARIANTS.items() if "promotion every" in k or "truncating" in k})
    err = {(r["variant"], r["K"]): r["rel_err_acc"] for r in rows}
    fast = next(v for v in A.VARIANTS if "truncating" in v)
    prom = next(v for v in A.VARIANTS if "promotion every" in v)
    assert err[(fast, 4096)] > 8 * err[(fast, 256)]            # ~linear in K for a truncating sum
    assert err[(prom, 4096)] < 1.5 * err[(prom, 256)]          # bounded by one 128-block's error
    assert err[(prom, 4096)] < err[(fast, 4096)] / 10
    assert 2.0 ** -16 < err[(prom, 256)] < 2.0 ** -11          # about 2**-13 relative: a 14-bit accumulator


def test_block_scales_need_promotion():
    a, b = A.operands(8, 8, 256)
    with pytest.raises(ValueError, match="cannot be pulled out"):
        A.simulate_gemm(a, b, scales="block", promote_every=None)


def test_block_scaled_gemm_with_exact_accumulator_matches_dequantized_float64():
    a, b = A.operands(16, 128, 384, seed=4)   # N = 128: one 128-row weight block
    a = a * torch.logspace(-3, 3, 384)[None, :]     # scales that really vary along K
    got = A.simulate_gemm(a, b, scales="block", acc_bits=53, rounding="nearest")
    exact, _ = A.exact_gemm(a, b, "block")
    assert torch.allclose(got, exact, rtol=2e-7, atol=1e-6 * exact.abs().max().item())


def test_scale_factoring_example():
    ex = A.scale_factoring_example()
    assert ex["codes"] == [224.0, -448.0, 224.0, 448.0]
    assert math.isclose(ex["per_group_then_add"], ex["exact"], rel_tol=1e-6)
    for wrong in ex["codes_summed_then_scaled"].values():
        assert abs(wrong - ex["exact"]) > 100


def test_cli_errors_are_one_line_exit_2(capsys):
    assert A.main(["--ks", "100"]) == 2
    assert A.main(["--ks", "a,b"]) == 2
    if not torch.cuda.is_available():
        assert A.main(["--gpu"]) == 2
        assert "CUDA" in capsys.readouterr().err


def test_cli_cpu_model_runs(capsys):
    assert A.main(["--ks", "128,256", "--mn", "8"]) == 0
    assert "FP32 accumulation" in capsys.readouterr().out


def test_missing_gpu_record_is_none(tmp_path):
    assert A.load_gpu_record(tmp_path / "nope.json") is None


@pytest.mark.gpu
def test_scaled_mm_fast_accum_bench_small():
    rec = A.bench_scaled_mm_fast_accum(m=256, n=256, ks=(256, 2048), rounds=1, ref_rows=64, tile=32,
                                       sim_ks=(2048,), progress=False)
    assert {(r["K"], r["fast_accum"]) for r in rec["speed"]} == {(k, f) for k in (256, 2048) for f in (False, True)}
    for r in rec["error"]:
        assert r["rel_err"] > 0, r
        if r["fast_accum"] and r["dist"] == "positive":
            # the lesson itself: sums that only grow lose their low bits in the fast accumulator, and the loss grows
            # with K; bounded, but not by the 1e-2 that holds everywhere else
            assert r["rel_err"] < 0.25, r
        else:
            assert r["rel_err"] < 1e-2, r
    by = {(r["K"], r["dist"], r["fast_accum"]): r["rel_err"] for r in rec["error"]}
    assert by[(2048, "positive", True)] > by[(2048, "positive", False)]
    assert "gpu_fast_accum_true" in rec["sim_check"][0]
    print(A.summarize_gpu(rec))


def test_truncation_error_is_a_shrink_toward_zero():
    rows = A.error_vs_k(ks=(2048,), m=16, n=16, dists=("gaussian",))
    by = {r["variant"]: r for r in rows}
    trunc = by[next(v for v in A.VARIANTS if "truncating" in v)]
    near = by[next(v for v in A.VARIANTS if "nearest" in v)]
    assert trunc["shrink"] > 0.8 * trunc["rel_err_acc"]        # almost all of the error is a bias toward zero
    assert abs(near["shrink"]) < 0.5 * near["rel_err_acc"]     # rounding to nearest: no systematic direction


def _fake_record():
    """A record in the schema bench_scaled_mm_fast_accum writes (made-up values, for the readers and plots only)."""
    ks = [256, 1024]
    speed = [{"M": 64, "N": 64, "K": k, "fast_accum": f, "median_us": 10.0 + f, "min_us": 9.0, "max_us": 12.0,
              "tflops": 1.0, "rounds": 3, "timing": "cuda_graph"} for k in ks for f in (False, True)]
    error = [{"M": 8, "N": 64, "K": k, "dist": d, "fast_accum": f, "rel_err": 1e-4 * (1 + f)}
             for k in ks for d in ("gaussian", "positive") for f in (False, True)]
    sim = [{"K": k, "dist": d, "tile": 8, "gpu_fast_accum_false": 1e-4, "gpu_fast_accum_true": 3e-4,
            "sim_toward_zero_fast": 3.1e-4, "sim_toward_zero_promote128": 1e-4, "sim_nearest_fast": 5e-5,
            "sim_nearest_promote128": 4e-5} for k in ks for d in ("gaussian", "positive")]
    return {"provenance": {"git_commit": "0" * 40, "dirty": False, "device": "test"},
            "settings": {"M": 64, "N": 64, "ks": ks, "dists": ["gaussian", "positive"]},
            "speed": speed, "error": error, "sim_check": sim}


def test_gpu_record_readers_and_plots(tmp_path):
    from fp8lab.store import DamagedFile, atomic_write_json

    rec = _fake_record()
    p = atomic_write_json(tmp_path / "r.json", rec)
    assert A.load_gpu_record(p)["settings"]["ks"] == [256, 1024]
    assert "speedup" in A.summarize_gpu(rec)
    assert {r["closest_model"] for r in A.sim_verdict(rec)} == {"sim_toward_zero_fast"}
    A.plot_gpu(rec)
    A.plot_error_vs_k(A.error_vs_k(ks=(128, 256), m=4, n=4))
    atomic_write_json(tmp_path / "bad.json", {"speed": []})
    with pytest.raises(DamagedFile):
        A.load_gpu_record(tmp_path / "bad.json")
