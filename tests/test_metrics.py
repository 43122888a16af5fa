import math

import pytest
import torch

from fp8lab import metrics as m


def test_docstring_numbers():
    x, y = torch.tensor([1.0, 2.0, 3e-4]), torch.tensor([1.0, 2.0, 0.0])
    assert m.relative_error(x, y) == pytest.approx(3e-4 / math.sqrt(5 + 9e-8))
    assert m.mean_relative_error(x, y) == pytest.approx(1 / 3)
    assert m.sqnr_db(x, y) == pytest.approx(10 * math.log10((5 + 9e-8) / 9e-8))
    assert m.flushed_pct(x, y) == pytest.approx(100 / 3)
    assert m.saturated_pct(torch.tensor([448.0, -448.0, 1.0, 2.0]), 448) == 50.0
    assert m.cosine(x, y) == pytest.approx(1.0, abs=1e-7)


def test_against_float64_definitions():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=g)
    y = x + 0.01 * torch.randn(1000, generator=g)
    xd, yd = x.double(), y.double()
    assert m.relative_error(x, y) == pytest.approx(((xd - yd).norm() / xd.norm()).item())
    assert m.cosine(x, y) == pytest.approx(torch.nn.functional.cosine_similarity(xd, yd, dim=0).item())
    assert m.sqnr_db(x, y) == pytest.approx(-20 * math.log10(m.relative_error(x, y)))


@pytest.mark.parametrize("fn", [m.relative_error, m.sqnr_db, m.flushed_pct, m.cosine, m.mean_relative_error])
def test_edge_and_bad_input(fn):
    with pytest.raises(ValueError, match="empty"):
        fn(torch.tensor([]), torch.tensor([]))
    with pytest.raises(ValueError, match="shapes differ"):
        fn(torch.ones(3), torch.ones(4))
    z = torch.zeros(4)
    assert not math.isnan(fn(z, z))  # all-zero: a documented number, never NaN


def test_exact_match():
    x = torch.randn(10)
    assert m.sqnr_db(x, x) == math.inf and m.relative_error(x, x) == 0.0 and m.flushed_pct(x, x) == 0.0
