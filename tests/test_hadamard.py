"""Hadamard matrices are exact (H H^T = c I in integers), the fast transforms equal the dense matrix, rotations are
orthogonal in float64 and the rotation identity (W R^T)(R x) = W x holds."""
import math

import pytest
import torch

from fp8lab import hadamard as H
from fp8lab.hadamard import RandomHadamard, fwht

ORDERS = [1, 2, 4, 12, 20, 28, 36, 44, 64, 96, 576, 1536, 960, 2048]


@pytest.mark.parametrize("kind", ["kronecker", "block"])
@pytest.mark.parametrize("n", ORDERS)
def test_hadamard_matrix_is_exact(n, kind):
    h = H.hadamard_matrix(n, kind)
    assert h.dtype == torch.int64 and h.shape == (n, n)
    nz = h[h != 0]
    assert torch.all(nz.abs() == 1)
    c = H.row_weight(n, kind)
    assert torch.equal(h @ h.T, c * torch.eye(n, dtype=torch.int64))
    if kind == "kronecker":
        assert nz.numel() == n * n          # a full Hadamard matrix mixes every channel


@pytest.mark.parametrize("kind", ["kronecker", "block"])
@pytest.mark.parametrize("n", ORDERS)
def test_fast_transform_equals_dense_and_is_orthonormal(n, kind):
    r = H.orthonormal(n, kind)
    assert torch.allclose(r @ r.T, torch.eye(n, dtype=torch.float64), atol=1e-12)
    x = torch.randn(5, 3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    assert torch.allclose(H.hadamard_transform(x, kind), x @ r.T, atol=1e-12, rtol=0)


@pytest.mark.parametrize("radix", [2, 4, 16])
@pytest.mark.parametrize("n", [1, 2, 8, 64, 512, 4096])
def test_fwht_equals_sylvester_matmul(n, radix):
    x = torch.randn(7, n, dtype=torch.float64)
    want = x @ H.sylvester(n).double().T
    assert torch.allclose(H.fwht(x, normalize=False, radix=radix), want, atol=1e-10, rtol=0)
    assert torch.allclose(H.fwht(x, radix=radix), want / math.sqrt(n), atol=1e-12, rtol=0)


def test_fwht_spreads_one_spike():
    assert H.fwht(torch.tensor([1.0, 0, 0, 0])).tolist() == [0.5, 0.5, 0.5, 0.5]


@pytest.mark.parametrize("n, m", [(4096, 1), (1536, 12), (576, 36), (768, 12), (960, 60), (20, 20)])
def test_small_factor(n, m):
    assert H.small_factor(n) == m


def test_unsupported_orders_fail_clearly():
    with pytest.raises(ValueError, match="block"):
        H.small_factor(18)             # 18 = 2 x 9: no Hadamard matrix of order 18 (not a multiple of 4)
    with pytest.raises(ValueError):
        H.fwht(torch.zeros(3, 12))
    with pytest.raises(ValueError):
        H.paley(16)                    # 15 is not prime and 7 is not 1 mod 4
    with pytest.raises(ValueError):
        H.hadamard_transform(torch.zeros(4), kind="dense")


@pytest.mark.parametrize("kind", ["kronecker", "block"])
@pytest.mark.parametrize("method", ["dense", "fast"])
def test_random_hadamard_rotation_identity(kind, method):
    n = 576
    rot = H.RandomHadamard(n, seed=3, kind=kind, method=method)
    r = rot.matrix()
    assert torch.allclose(r @ r.T, torch.eye(n, dtype=torch.float64), atol=1e-12)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 9, n, generator=g, dtype=torch.float64), torch.randn(32, n, generator=g, dtype=torch.float64)
    assert torch.allclose(rot(x), x @ r.T, atol=1e-12, rtol=0)                 # R x for every row
    assert torch.allclose(rot(w) @ rot(x).transpose(-1, -2), w @ x.transpose(-1, -2), atol=1e-9, rtol=0)  # (W R^T)(R x)
    x32, w32 = x.float(), w.float()
    ref = (w32.double() @ x32.double().transpose(-1, -2))
    got = rot(w32) @ rot(x32).transpose(-1, -2)
    assert (got.double() - ref).abs().max() / ref.abs().max() < 1e-5          # float32 tolerance


# ---- the KV rotation's contract (fp8lab.kv_quant): inverse, half types, seeded signs, bad input -------------------
@pytest.mark.parametrize("n", [64, 128, 576])
def test_inverse_undoes_the_rotation(n):
    x = torch.randn(5, n, dtype=torch.float64)
    rot = RandomHadamard(n, seed=7)
    torch.testing.assert_close(rot.inverse(rot(x)), x, atol=1e-12, rtol=0)
    torch.testing.assert_close(rot(x).norm(dim=-1), x.norm(dim=-1), atol=1e-12, rtol=0)


def test_outlier_is_spread_and_signs_are_seeded():
    from fp8lab.hadamard import random_signs
    x = torch.zeros(64)
    x[3] = 8.0
    assert torch.allclose(fwht(x).abs(), torch.full((64,), 1.0))
    assert torch.equal(random_signs(64, 5), random_signs(64, 5))
    assert not torch.equal(random_signs(64, 5), random_signs(64, 6))
    ones = torch.ones(64)
    assert torch.count_nonzero(fwht(ones)) == 1                       # a fixed H maps all-ones to one spike
    assert torch.count_nonzero(RandomHadamard(64, seed=0)(ones)) > 16  # the random signs break that


def test_bf16_in_bf16_out_and_bad_input():
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    assert fwht(x).dtype == torch.bfloat16 and RandomHadamard(64)(x).dtype == torch.bfloat16
    torch.testing.assert_close(fwht(x), fwht(x.float()).bfloat16(), atol=0, rtol=0)
    with pytest.raises(TypeError):
        fwht(torch.arange(8))
    with pytest.raises(ValueError):
        RandomHadamard(64)(torch.randn(2, 32))
