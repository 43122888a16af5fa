"""fp8lab.formats against ml_dtypes and torch, exhaustively (ml_dtypes-test style).

Formats: E4M3, E5M2, E2M1, E8M0 and the fnuz FP8s (E4M3FNUZ, E5M2FNUZ). Counts checked, per format: every bf16 pattern (65,536), every fp16 pattern (65,536), every code,
1,000,000 random float32 values spread over 60 binades, every midpoint between neighbouring values
(the ties) and the values one float32 ulp either side of each midpoint, plus hypothesis-drawn bit patterns.
"""
import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fp8lab import formats
from fp8lab.formats import E2M1, E4M3, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0, INT8

ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
      "e2m1": ml_dtypes.float4_e2m1fn, "e8m0": ml_dtypes.float8_e8m0fnu,
      "e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "e5m2fnuz": ml_dtypes.float8_e5m2fnuz}
FMTS = [E4M3, E5M2, E2M1, E8M0, E4M3FNUZ, E5M2FNUZ]


def all_bf16() -> torch.Tensor:
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()


def all_fp16() -> torch.Tensor:
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16).float()


def random_f32(n=1_000_000, seed=0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32) * np.exp2(rng.uniform(-30, 30, n)).astype(np.float32)
    return torch.from_numpy(x)


def ties_and_neighbours(fmt) -> torch.Tensor:
    """Every midpoint between neighbouring representable magnitudes, +- one float32 ulp, both signs."""
    t = fmt.table().numpy().astype(np.float64)
    v = np.unique(t[np.isfinite(t) & (t >= 0)])
    mids = ((v[:-1] + v[1:]) / 2).astype(np.float32)
    top = np.float32(v[-1] + (v[-1] - v[-2]) / 2)  # the overflow boundary
    m = np.concatenate([mids, [top], v.astype(np.float32)])
    around = np.concatenate([m, np.nextafter(m, np.float32(np.inf)), np.nextafter(m, np.float32(0))])
    return torch.from_numpy(np.concatenate([around, -around]).astype(np.float32))


def ml_codes(fmt, x: torch.Tensor) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        c = x.numpy().astype(ML[fmt.name]).view(np.uint8)
    return c & 0xF if fmt.name == "e2m1" else c


def mismatches(fmt, x: torch.Tensor) -> np.ndarray:
    """Indices where our encode(saturate=False) differs from ml_dtypes (NaN codes may differ only in sign)."""
    ours = fmt.encode(x, saturate=False).numpy()
    ref = ml_codes(fmt, x)
    bad = ours != ref
    nan_in = np.isnan(x.numpy())
    if fmt.name == "e2m1":  # no NaN in E2M1: ml_dtypes gives a signed zero, we give +0
        bad &= ~(nan_in & ((ours & 0x7) == (ref & 0x7)))
    elif fmt.signed:
        bad &= ~(nan_in & ((ours & 0x7F) == (ref & 0x7F)))
    return np.nonzero(bad)[0]


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("inputs", ["bf16", "fp16", "random", "ties"])
def test_encode_matches_ml_dtypes(fmt, inputs):
    x = {"bf16": all_bf16, "fp16": all_fp16, "random": random_f32,
         "ties": lambda: ties_and_neighbours(fmt)}[inputs]()
    bad = mismatches(fmt, x)
    assert len(bad) == 0, f"{len(bad)} of {x.numel()} differ; first: {x[bad[:5]].tolist()}"
    print(f"{fmt.name} {inputs}: 0 mismatches in {x.numel()} values")


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
def test_decode_every_code_matches_ml_dtypes(fmt):
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    ref = codes.view(ML[fmt.name]).astype(np.float32) if fmt.name != "e2m1" else \
        np.array([np.uint8(c).view(ML["e2m1"]) for c in codes]).astype(np.float32)
    ours = fmt.decode(torch.from_numpy(codes)).numpy()
    np.testing.assert_array_equal(ours, ref)  # NaNs compare equal in assert_array_equal


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("saturate", [False, True])
def test_round_equals_decode_encode(fmt, saturate):
    """The fast arithmetic `round` and the table-based reference agree on every input class."""
    x = torch.cat([all_bf16(), all_fp16(), random_f32(200_000, 1), ties_and_neighbours(fmt)])
    r = fmt.round(x, saturate=saturate)
    d = fmt.decode(fmt.encode(x, saturate=saturate))
    same = (r == d) | (torch.isnan(r) & torch.isnan(d))
    assert bool(same.all()), x[~same][:5].tolist()


TORCH_FP8 = [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2), (E4M3FNUZ, torch.float8_e4m3fnuz),
             (E5M2FNUZ, torch.float8_e5m2fnuz)]


@pytest.mark.parametrize("fmt,tdtype", TORCH_FP8, ids=lambda v: getattr(v, "name", ""))
def test_matches_torch_cast_after_clamp(fmt, tdtype):
    """torch's cast saturates E4M3 but not always E5M2 (version dependent): clamp to +-max first, then compare."""
    x = torch.cat([all_bf16(), all_fp16(), random_f32(200_000, 2)])
    x = x[torch.isfinite(x)].clamp(-fmt.max, fmt.max)
    ours = fmt.encode(x, saturate=True)
    ref = x.to(tdtype).view(torch.uint8)
    assert torch.equal(ours, ref), int((ours != ref).sum())


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("inputs", ["bf16", "fp16", "random", "ties"])
def test_encode_fast_equals_encode(fmt, inputs):
    """encode_fast (torch's cast / seven compares) is the saturating reference encode, NaN and Inf included."""
    x = {"bf16": all_bf16, "fp16": all_fp16, "random": random_f32, "ties": lambda: ties_and_neighbours(fmt)}[inputs]()
    x = torch.cat([x, torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0])])
    ours, ref = fmt.encode_fast(x), fmt.encode(x, saturate=True)
    assert torch.equal(ours, ref), x[ours != ref][:5].tolist()


def test_e8m0_torch_agrees_on_positive_values_and_differs_where_documented():
    x = torch.cat([all_bf16(), all_fp16()])
    pos = x[(x >= 2.0 ** -126) & torch.isfinite(x) & (x < 2.0 ** 127)]
    assert torch.equal(E8M0.encode(pos), pos.to(torch.float8_e8m0fnu).view(torch.uint8))
    # float32 subnormals: torch rounds on the bits (everything above 2**-127 goes up), ours (and ml_dtypes >= 0.7)
    # round by value (the rounding point is 1.5 * 2**-127, the tie goes up)
    t = 2.0 ** -127
    sub = torch.tensor([t, 1.25 * t, 1.5 * t, 1.75 * t, 0.5 * t])
    assert E8M0.encode(sub).tolist() == [0, 0, 1, 1, 0]
    assert sub.to(torch.float8_e8m0fnu).view(torch.uint8).tolist() == [0, 1, 1, 1, 0]
    # zero: torch -> code 0 (2**-127); ml_dtypes -> NaN. Ours: NaN without saturation, code 0 with it.
    assert int(torch.tensor([0.0]).to(torch.float8_e8m0fnu).view(torch.uint8)) == 0
    assert int(E8M0.encode(torch.tensor([0.0]), saturate=False)) == 0xFF
    assert int(E8M0.encode(torch.tensor([0.0]), saturate=True)) == 0
    # negative: torch takes |x|, ml_dtypes and ours give NaN
    assert int(torch.tensor([-1.0]).to(torch.float8_e8m0fnu).view(torch.uint8)) == 127
    assert int(E8M0.encode(torch.tensor([-1.0]))) == 0xFF


# Edge cases, each row commented (torchao style): (format, input, saturate, expected code)
EDGE = [
    (E4M3, 448.0, False, 0x7E),       # max normal S.1111.110
    (E4M3, 464.0, False, 0x7E),       # tie between 448 (even code 0x7E) and the virtual 480: stays 448
    (E4M3, 464.5, False, 0x7F),       # past the tie: overflow -> NaN (no Inf in "fn")
    (E4M3, 464.5, True, 0x7E),        # saturating: -> 448
    (E4M3, math.inf, True, 0x7E),     # Inf saturates to max
    (E4M3, -math.inf, False, 0xFF),   # Inf without saturation -> NaN (sign kept)
    (E4M3, 2.0 ** -9, False, 0x01),   # min subnormal
    (E4M3, 2.0 ** -10, False, 0x00),  # half the min subnormal: tie to even -> 0
    (E4M3, 3 * 2.0 ** -10, False, 0x02),  # 1.5 ulp of 2**-9: tie between code 1 and 2 -> even 2
    (E4M3, 3e-4, False, 0x00),        # the probe's small activation: flushed
    (E4M3, -0.0, False, 0x80),        # negative zero keeps its sign
    (E5M2, 57344.0, False, 0x7B),     # max normal
    (E5M2, 61440.0, False, 0x7C),     # tie between max (odd code 0x7B) and 65536 (Inf code, even) -> Inf
    (E5M2, 61439.0, False, 0x7B),     # just below the tie
    (E5M2, 1e9, True, 0x7B),          # saturating
    (E5M2, math.nan, False, 0x7E),    # quiet NaN code
    (E2M1, 0.25, False, 0x0),         # tie 0|0.5 -> 0 (even)
    (E2M1, 0.75, False, 0x2),         # tie 0.5|1 -> 1.0 (code 2, even)
    (E2M1, 1.25, False, 0x2),         # tie 1|1.5 -> 1.0
    (E2M1, 2.5, False, 0x4),          # tie 2|3 -> 2.0
    (E2M1, 5.0, False, 0x6),          # tie 4|6 -> 4.0
    (E2M1, 7.0, False, 0x7),          # no overflow code: saturates to 6 even without saturate
    (E2M1, -6.0, False, 0xF),         # sign bit 3
    (E8M0, 1.0, False, 127),          # 2**0
    (E8M0, 1.5, False, 128),          # tie 1|2 -> up (ml_dtypes and torch agree)
    (E8M0, 1.4999, False, 127),       # below the tie
    (E8M0, 2.0 ** 127, False, 254),   # max
    (E8M0, 2.0 ** 127 * 1.5, False, 255),  # overflow -> NaN
    (E8M0, 2.0 ** 127 * 1.5, True, 254),   # saturating
    (E4M3FNUZ, 240.0, False, 0x7F),   # max: S.1111.111 is finite in fnuz (1.875 * 2**7)
    (E4M3FNUZ, 1.0, False, 0x40),     # bias 8: 1.0 is exponent field 8
    (E4M3FNUZ, 248.0, False, 0x80),   # tie between 240 (odd code) and the virtual 256 (even): overflow -> NaN 0x80
    (E4M3FNUZ, 247.9, False, 0x7F),   # below the tie
    (E4M3FNUZ, -1e9, True, 0xFF),     # saturating: -240 (0xFF is a number in fnuz, not NaN)
    (E4M3FNUZ, -0.0, False, 0x00),    # no negative zero: -0.0 -> +0
    (E4M3FNUZ, -1e-4, False, 0x00),   # a negative value that flushes is +0 too (2**-11 is the flush point)
    (E4M3FNUZ, 2.0 ** -10, False, 0x01),  # min subnormal
    (E4M3FNUZ, math.nan, False, 0x80),    # the only NaN
    (E4M3FNUZ, -math.inf, False, 0x80),   # no Inf: overflow is NaN without saturation
    (E5M2FNUZ, 57344.0, False, 0x7F),     # max, same as E5M2 (E5M2 spends exponent 31 on Inf/NaN, fnuz does not)
    (E5M2FNUZ, 2.0 ** -17, False, 0x01),  # min subnormal: bias 16
    (E5M2FNUZ, math.inf, True, 0x7F),     # saturating
]


@pytest.mark.parametrize("fmt,x,sat,code", EDGE)
def test_edge_cases(fmt, x, sat, code):
    assert int(fmt.encode(torch.tensor([x], dtype=torch.float32), saturate=sat)[0]) == code


def test_descriptions():
    assert (E4M3.max, E4M3.min_normal, E4M3.min_subnormal) == (448.0, 2.0 ** -6, 2.0 ** -9)
    assert (E5M2.max, E5M2.min_normal, E5M2.min_subnormal) == (57344.0, 2.0 ** -14, 2.0 ** -16)
    assert (E2M1.max, E2M1.min_subnormal) == (6.0, 0.5)
    assert E8M0.max == 2.0 ** 127 and E8M0.min_subnormal == 2.0 ** -127
    assert (E4M3FNUZ.max, E4M3FNUZ.min_normal, E4M3FNUZ.min_subnormal) == (240.0, 2.0 ** -7, 2.0 ** -10)
    assert (E5M2FNUZ.max, E5M2FNUZ.min_normal, E5M2FNUZ.min_subnormal) == (57344.0, 2.0 ** -15, 2.0 ** -17)
    assert E4M3FNUZ.nan_codes == [0x80] == E5M2FNUZ.nan_codes and E4M3.nan_codes == [0x7F, 0xFF]
    assert [f.emax for f in FMTS] == [8, 15, 2, 127, 7, 15]
    assert (E5M2.inf_code, E4M3.inf_code) == (0x7C, None) and len(E5M2.nan_codes) == 6
    for f in FMTS:  # ml_dtypes invariant
        assert int(f.signed) + f.exp_bits + f.man_bits == f.bits
        fi = ml_dtypes.finfo(ML[f.name])
        assert f.max == float(fi.max)
    assert E2M1.table()[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert E4M3.table().shape == (256,) and E2M1.table().shape == (16,)


def test_get_and_errors():
    assert formats.get("e4m3") is E4M3 and formats.get("E5M2") is E5M2
    assert formats.get("float8_e4m3fn") is E4M3 and formats.get("e8m0fnu") is E8M0
    assert formats.get("float8_e4m3fnuz") is E4M3FNUZ and formats.get("E5M2FNUZ") is E5M2FNUZ
    with pytest.raises(ValueError, match="valid: e4m3, e5m2"):
        formats.get("e3m4")
    with pytest.raises(TypeError):
        E4M3.encode(torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(TypeError):
        E4M3.decode(torch.tensor([1.0]))
    with pytest.raises(ValueError):
        E2M1.decode(torch.tensor([16], dtype=torch.uint8))


def test_docstring_examples():
    assert E4M3.round(3e-4) == 0.0
    assert E4M3.round(0.3) == 0.3125 and E5M2.round(0.3) == 0.3125
    assert E4M3.round(1000.0) == 448.0
    assert E2M1.round(2.5) == 2.0
    assert formats.bf16_round(1.00390625) == 1.0
    assert INT8.round(2.5) == 2.0 and INT8.round(300.0) == 127.0


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
def test_round_trip_and_monotonic(fmt):
    # decode -> encode is the identity on every non-NaN code (except -0 for unsigned formats)
    codes = torch.arange(1 << fmt.bits, dtype=torch.int32).to(torch.uint8)
    vals = fmt.decode(codes)
    keep = ~torch.isnan(vals)
    assert torch.equal(fmt.encode(vals[keep], saturate=False), codes[keep])
    # rounding is monotonic: sorted inputs give sorted outputs
    x = torch.sort(torch.cat([random_f32(100_000, 3), ties_and_neighbours(fmt)])).values
    x = x[x >= 0] if not fmt.signed else x
    y = fmt.round(x)
    y = y[~torch.isnan(y)]
    assert bool((y[1:] >= y[:-1]).all())


def test_bf16_round_exhaustive_against_torch():
    """Every bf16 and fp16 pattern, 1e6 random float32 and the ties (x.5 ulp) of every bf16 value."""
    b = all_bf16()
    bits = b.view(torch.int32)
    ties = (bits | 0x8000).view(torch.float32)     # exactly halfway to the next bf16
    x = torch.cat([b, all_fp16(), random_f32(), ties, (bits | 0x8001).view(torch.float32)])
    ours = formats.bf16_round(x)
    ref = x.to(torch.bfloat16).float()
    same = (ours.view(torch.int32) == ref.view(torch.int32)) | (torch.isnan(ours) & torch.isnan(ref))
    assert bool(same.all()), x[~same][:5].tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=256))
def test_hypothesis_bit_patterns(words):
    x = torch.from_numpy(np.array(words, dtype=np.uint32).view(np.float32))
    for f in FMTS:
        assert len(mismatches(f, x)) == 0


def test_int8():
    assert INT8.encode(torch.tensor([1.4, -1.6, 300.0, -300.0])).tolist() == [1, -2, 127, -127]
    with pytest.raises(ValueError, match="NaN"):
        INT8.encode(torch.tensor([float("nan")]))


# ---- seed 002's branchless E2M1 -----------------------------------------------------------------
def test_seed_branchless_e2m1_rounds_four_ties_away():
    ties = np.array([0.25, 1.25, 2.5, 5.0], dtype=np.float32)
    seed = formats.e2m1_branchless_seed(ties)
    rne = E2M1.encode(torch.from_numpy(ties)).numpy()
    assert seed.tolist() == [0x1, 0x3, 0x5, 0x7]    # 0.5, 1.5, 3, 6: away from zero
    assert rne.tolist() == [0x0, 0x2, 0x4, 0x6]     # 0, 1, 2, 4: to even
    # ...and those four ties (with their negatives) are the ONLY disagreements over every bf16 pattern
    x = all_bf16()
    x = x[torch.isfinite(x)].numpy()
    differ = x[formats.e2m1_branchless_seed(x) != E2M1.encode(torch.from_numpy(x)).numpy()]
    assert sorted(set(np.abs(differ).tolist())) == [0.25, 1.25, 2.5, 5.0]


@pytest.mark.parametrize("inputs", ["bf16", "fp16", "random", "ties"])
def test_fixed_branchless_e2m1_is_exhaustively_rne(inputs):
    x = {"bf16": all_bf16, "fp16": all_fp16, "random": random_f32, "ties": lambda: ties_and_neighbours(E2M1)}[inputs]()
    x = x[~torch.isnan(x)]  # the branchless form saturates NaN (documented); RNE encode maps it to 0
    ours = formats.e2m1_branchless(x.numpy())
    ref = E2M1.encode(x).numpy()
    assert np.array_equal(ours, ref), int((ours != ref).sum())


# ---- anatomy and the GPU constants ----------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
def test_anatomy_against_ml_dtypes_finfo(fmt):
    """Every field of the anatomy row from an independent source: ml_dtypes' finfo and its value table."""
    a, fi = fmt.anatomy(), ml_dtypes.finfo(ML[fmt.name])
    assert (a["max"], a["min_normal"], a["min_subnormal"]) == (float(fi.max), float(fi.smallest_normal),
                                                               float(fi.smallest_subnormal))
    assert (a["exp_bits"], a["man_bits"]) == (fi.nexp, fi.nmant) and a["bits"] == fi.bits
    ref = np.array([np.uint8(c).view(ML[fmt.name]) for c in range(1 << fmt.bits)]).astype(np.float64)
    assert a["finite_codes"] == int(np.isfinite(ref).sum())
    assert fmt.nan_codes == [c for c in range(1 << fmt.bits) if np.isnan(ref[c])]
    assert a["negative_zero"] == any(ref[c] == 0 and np.signbit(ref[c]) for c in range(1 << fmt.bits))
    assert a["emax"] == int(np.floor(np.log2(float(fi.max))))


def _parse_c(v: str):
    if v.endswith("u"):
        return int(v[:-1], 16) if v.startswith("0x") else int(v[:-1])
    if v.endswith("f"):
        return float.fromhex(v[:-1]) if "0x" in v else float(v[:-1])
    return int(v)


def test_cuda_defines_are_the_format_description():
    d = formats.cuda_defines()
    assert all(" " not in v and " " not in k for k, v in d.items())    # safe as NVRTC -D options
    for f in FMTS:
        p = f"FP8LAB_{f.name.upper()}"
        assert _parse_c(d[f"{p}_MAX"]) == f.max and _parse_c(d[f"{p}_MAX_CODE"]) == f.max_code
        assert _parse_c(d[f"{p}_MAX_BITS"]) == int(np.float32(f.max).view(np.uint32))
        assert _parse_c(d[f"{p}_MIN_NORMAL"]) == f.min_normal and _parse_c(d[f"{p}_EMAX"]) == f.emax
        assert _parse_c(d[f"{p}_BIAS"]) == f.bias and _parse_c(d[f"{p}_MAN_BITS"]) == f.man_bits
        if f.nan_code is not None:
            assert math.isnan(float(f.decode(torch.tensor([_parse_c(d[f"{p}_NAN_CODE"])], dtype=torch.uint8))[0]))
        if f.special != "nan_only":  # decode by bit placement, as the kernels do, equals the table
            mags = np.arange(f.magnitude_mask + 1, dtype=np.uint32)
            vals = (mags << np.uint32(_parse_c(d[f"{p}_DECODE_SHIFT"]))).view(np.float32).astype(np.float64) \
                * _parse_c(d[f"{p}_DECODE_MUL"])
            t = f.table().numpy()[: f.magnitude_mask + 1]
            ok = np.isfinite(t)
            assert np.array_equal(vals[ok], t[ok])
    vals = [_parse_c(v) for v in d["FP8LAB_E2M1_VALUES"].strip("{}").split(",")]
    assert np.array_equal(np.array(vals), E2M1.table().numpy()) and str(vals[8]) == "-0.0"
    for i, (m, strict) in enumerate(formats.e2m1_midpoints()):
        assert _parse_c(d[f"FP8LAB_E2M1_MID{i}"]) == m and _parse_c(d[f"FP8LAB_E2M1_MID{i}_STRICT"]) == strict
        assert _parse_c(d[f"FP8LAB_E2M1_MID{i}_BITS"]) == int(np.float32(m).view(np.uint32))
    assert _parse_c(d["FP8LAB_NVFP4_GLOBAL_DIV"]) == 2688.0 == formats.NVFP4_GLOBAL_DIV
    assert (_parse_c(d["FP8LAB_NVFP4_BLOCK"]), _parse_c(d["FP8LAB_MX_BLOCK"])) == (16, 32)
    assert formats.cuda_define_options()[:2] == ("FP8LAB_FORMATS_DEFINED=1", "FP8LAB_E4M3_EXP_BITS=4")
    mids = [int(v.rstrip("u"), 16) for v in d["FP8LAB_E2M1_MIDS"].split(",")]   # the list form formats.cuh reads
    assert mids == [int(np.float32(m).view(np.uint32)) for m, _ in formats.e2m1_midpoints()]
    assert _parse_c(d["FP8LAB_E2M1_TIES_DOWN"]) == sum(1 << i for i, (_, s) in enumerate(formats.e2m1_midpoints()) if s)
    hdr = formats.cuda_header()
    assert hdr.count("#define ") == len(d) and "#define FP8LAB_E4M3_MAX 0x1.cp+8f" in hdr


def test_e2m1_midpoints_from_the_table():
    assert formats.e2m1_midpoints() == [(0.25, True), (0.75, False), (1.25, True), (1.75, False), (2.5, True),
                                        (3.5, False), (5.0, True)]


def test_bit_helpers():
    e = torch.tensor([0, -1, -126, -127, -149, 127])
    assert formats.pow2_f32(e).tolist() == [2.0 ** int(v) for v in e]
    a = torch.tensor([1.0, 1.5, 2 ** -126, 2 ** -130, 0.0, 3e38])
    assert formats.floor_log2_f32(a).tolist() == [0, 0, -126, -127, -127, 127]
