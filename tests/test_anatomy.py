"""fp8lab.anatomy: the explanations are computed from the formats, and the MX / NVFP4 measurements are right on
inputs whose answer is known by construction."""
import math

import pytest
import torch

from fp8lab import anatomy as A
from fp8lab.formats import E2M1, E4M3, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0


def test_format_table_has_every_format_and_column():
    rows = A.format_rows()
    assert [r["format"] for r in rows] == ["e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e2m1", "e8m0"]
    text = A.format_table(rows)
    assert len(text.splitlines()) == 7 and "0x7F, 0xFF" in text and "0x7C, 0xFC" in text


def test_why_448_not_480():
    s = A.why_max(E4M3)
    assert "448 = 1.75 * 2**8" in s and "480" in s and "0x7F" in s and "240" in s   # IEEE-style would stop at 240
    assert "240 = 1.875 * 2**7" in A.why_max(E4M3FNUZ) and "0x80" in A.why_max(E4M3FNUZ)
    assert "from 448 to 240" in A.why_max(E4M3FNUZ) and "from 57344 to 57344" in A.why_max(E5M2FNUZ)
    assert "Inf" in A.why_max(E5M2) and "saturate" in A.why_max(E2M1) and "scale format" in A.why_max(E8M0)


def test_top_codes():
    r = A.top_codes(E4M3, 2)
    assert [x["code"] for x in r] == ["0x7D", "0x7E", "0x7F"]
    assert r[1]["value"] == 448.0 and r[1]["meaning"] == "max" and r[2]["meaning"] == "NaN (would be 480)"
    r = A.top_codes(E5M2, 1)
    assert r[0]["value"] == 57344.0 and r[1]["meaning"] == "+Inf" and len(r) == 5
    r = A.top_codes(E4M3FNUZ, 1)
    assert r[0]["value"] == 240.0 and r[-1]["code"] == "0x80" and math.isnan(r[-1]["value"])
    assert A.top_codes(E2M1, 1) == [{"code": "0x07", "bits": "0.11.1", "value": 6.0, "meaning": "max"}]


def test_mx_anatomy_known_landings():
    """Blocks built so that amax / 2**floor(log2 amax) is 500/256 (lands at 500 > 448) or 300/256 (fits)."""
    k = torch.arange(-10, 10).float()
    over = torch.zeros(20, 32)
    over[:, 0] = 500 * 2.0 ** k
    over[:, 1:] = 0.5 * 2.0 ** k[:, None]
    m = A.mx_scale_anatomy(over)
    assert m["frac_blocks_over_max"] == 1.0 and torch.equal(m["landing"], torch.full((20,), 500.0))
    assert m["frac_elements_saturated"] == 1 / 32 and m["saturated_rel_err"] == pytest.approx(52 / 500)
    assert m["sqnr_mx_rceil"] > m["sqnr_mx_floor"]                     # rounding up removes the saturation
    fits = over.clone()
    fits[:, 0] = 300 * 2.0 ** k
    m = A.mx_scale_anatomy(fits)
    assert m["frac_blocks_over_max"] == 0.0 and m["frac_elements_saturated"] == 0.0 and m["saturated_error_share"] == 0


def test_mx_anatomy_on_a_gaussian_orders_the_rules():
    x = torch.randn(128, 1024, generator=torch.Generator().manual_seed(0))
    m = A.mx_scale_anatomy(x)
    assert 0.1 < m["frac_blocks_over_max"] < 0.3                        # ~log2(512/448) for log-uniform mantissas
    assert m["sqnr_mx_floor"] < m["sqnr_tensor"] < m["sqnr_group32_fp32"]
    assert m["sqnr_mx_floor"] < m["sqnr_mx_rceil"]
    assert bool(((m["landing"] >= 256) & (m["landing"] < 512)).all())


def test_nvfp4_levels():
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(1))
    x[0] *= 1e-5                                                        # a row whose block scales are E4M3 subnormals
    n = A.nvfp4_levels(x)
    assert n["global_scale"] == pytest.approx(float(x.abs().max()) / 2688)
    r = n["scale_ratio"][32:]                                           # normal E4M3 block scales: within half an ulp
    assert float((r - 1).abs().max()) <= 2.0 ** -4 + 1e-6
    assert n["frac_subnormal_scale"] == pytest.approx(32 / (64 * 32))
    assert 0 < n["frac_rounded_down"] < 1 and n["sqnr_fp32_scales"] > n["sqnr_e4m3_scales"]


def test_anatomy_figure(tmp_path):
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(2))
    A.anatomy_figure(x, path=tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 10_000
