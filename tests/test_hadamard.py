"""The fast Walsh–Hadamard transform equals the dense Sylvester matrix and is orthogonal, for every size we use."""
import math

import pytest
import torch

from fp8lab.hadamard import RandomHadamard, fwht, hadamard_matrix, largest_pow2_divisor, random_signs

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 64, 128, 256])
def test_dense_hadamard_is_orthogonal_up_to_n(n):
    h = hadamard_matrix(n)
    assert torch.equal(h @ h.T, n * torch.eye(n, dtype=torch.float64))
    assert set(h.unique().tolist()) <= {-1.0, 1.0}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [2, 8, 64, 128])
def test_fwht_equals_dense_matrix(n, dtype, device):
    x = torch.randn(5, 3, n, dtype=dtype, generator=torch.Generator().manual_seed(n)).to(device)
    ref = x.double().cpu() @ hadamard_matrix(n).T
    got = fwht(x, normalize=False)
    assert got.dtype == dtype and got.device.type == device
    tol = 1e-12 if dtype == torch.float64 else 1e-5 * math.sqrt(n)
    torch.testing.assert_close(got.double().cpu(), ref, atol=tol, rtol=tol)
    # integers stay exact in float32 (sums of +-ints): the butterflies add and subtract, nothing else
    xi = torch.randint(-50, 50, (4, n), generator=torch.Generator().manual_seed(1)).to(dtype).to(device)
    assert torch.equal(fwht(xi, normalize=False).double().cpu(), xi.double().cpu() @ hadamard_matrix(n).T)


@pytest.mark.parametrize("n,expected", [(96, 32), (80, 16), (64, 64), (1, 1), (7, 1), (12, 4), (4096, 4096)])
def test_largest_pow2_divisor(n, expected):
    assert largest_pow2_divisor(n) == expected


@pytest.mark.parametrize("n,block", [(96, 32), (80, 16), (48, 16), (64, 64), (64, 16), (12, 4), (7, 1)])
def test_block_diagonal_for_non_powers_of_two(n, block):
    rot = RandomHadamard(n, seed=3, block=block)
    r = rot.matrix()
    assert torch.allclose(r @ r.T, torch.eye(n, dtype=torch.float64), atol=1e-12)   # orthogonal
    x = torch.randn(10, n, dtype=torch.float64)
    torch.testing.assert_close(rot(x), x @ r.T, atol=1e-12, rtol=1e-12)               # matrix == fast path
    torch.testing.assert_close(rot.inverse(rot(x)), x, atol=1e-12, rtol=1e-12)
    # block-diagonal: coordinates of one block never leak into another
    e = torch.zeros(n, dtype=torch.float64)
    e[0] = 1
    assert torch.count_nonzero(rot(e)[block:]) == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normalised_transform_keeps_norms_and_dots_and_is_an_involution(dtype, device):
    x = torch.randn(200, 64, dtype=dtype).to(device)
    q = torch.randn(200, 64, dtype=dtype).to(device)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(fwht(x).norm(dim=-1), x.norm(dim=-1), atol=tol, rtol=tol)
    torch.testing.assert_close((fwht(x) * fwht(q)).sum(-1), (x * q).sum(-1), atol=tol * 10, rtol=tol)
    torch.testing.assert_close(fwht(fwht(x)), x, atol=tol, rtol=tol)
    rot = RandomHadamard(64, seed=7)
    torch.testing.assert_close(rot.inverse(rot(x)), x, atol=tol, rtol=tol)
    torch.testing.assert_close((rot(x) * rot(q)).sum(-1), (x * q).sum(-1), atol=tol * 10, rtol=tol)


def test_outlier_is_spread_and_signs_are_seeded():
    x = torch.zeros(64)
    x[5] = 8.0
    y = fwht(x)
    assert torch.allclose(y.abs(), torch.full((64,), 1.0))           # 8 / sqrt(64) in every coordinate
    assert torch.equal(random_signs(64, 1), random_signs(64, 1))
    assert not torch.equal(random_signs(64, 1), random_signs(64, 2))
    assert set(random_signs(64, 1).tolist()) == {-1.0, 1.0}
    # without signs, the all-ones vector (a common "DC" pattern) becomes a single spike; random signs avoid it
    ones = torch.ones(64)
    assert torch.count_nonzero(fwht(ones)) == 1
    assert torch.count_nonzero(RandomHadamard(64, seed=0)(ones)) > 16


def test_bf16_in_bf16_out_and_bad_input():
    x = torch.randn(3, 32).bfloat16()
    assert fwht(x).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="multiple"):
        fwht(torch.randn(3, 24), block=16)
    with pytest.raises(ValueError, match="power of two"):
        fwht(torch.randn(3, 24), block=12)
    with pytest.raises(TypeError):
        fwht(torch.arange(8))
    with pytest.raises(ValueError, match="expected last dimension"):
        RandomHadamard(64)(torch.randn(2, 32))
