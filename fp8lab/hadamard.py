"""The normalised fast Walsh–Hadamard transform (FWHT), with an optional random sign flip: a cheap rotation.

Why a rotation helps a quantizer: a vector whose energy sits in a few coordinates (an outlier channel) is hard to
quantize with one scale per block — the outlier sets the scale, everything else rounds to zero. An orthogonal
rotation keeps the vector's length and every dot product (q·k is unchanged if q is rotated the same way) but
spreads each coordinate over all of them:

    x = [8, 0, 0, 0]                      # one outlier
    fwht(x)            -> [4, 4, 4, 4]      # H/sqrt(n): same length (8), no outlier left
    fwht(fwht(x))      -> [8, 0, 0, 0]      # H/sqrt(n) is symmetric and orthogonal: its own inverse

The Sylvester Hadamard matrix of size n = 2**k has entries +-1 and H H^T = n I, so H / sqrt(n) is orthogonal.
The fast transform needs k butterfly stages of n/2 additions and subtractions (n log2 n work, no matrix). A
fixed H maps a few specific vectors badly (the all-ones vector becomes one spike); flipping the signs of the
coordinates at random first (`RandomHadamard`, x -> H diag(s) x / sqrt(n)) makes the rotation "random enough"
that no fixed input pattern lines up with it: the idea behind QuaRot and TurboQuant.

Sizes that are not a power of two (a head dim of 80 or 96) use a block-diagonal transform: the last dimension is
cut into blocks of the largest power of two that divides it (80 = 5 x 16, 96 = 3 x 32) and each block is rotated
on its own. Still orthogonal, but it only mixes coordinates inside a block. `block=` picks a smaller block.

Works on any float tensor (float32, float64, bfloat16/float16 are computed in float32), CPU or CUDA, along the
last dimension; leading dimensions are batch.
"""
from __future__ import annotations

import math

import torch

__all__ = ["largest_pow2_divisor", "hadamard_matrix", "fwht", "random_signs", "RandomHadamard"]


def largest_pow2_divisor(n: int) -> int:
    """The largest power of two dividing n: 64 -> 64, 96 -> 32, 80 -> 16, 7 -> 1."""
    if int(n) < 1:
        raise ValueError(f"size must be a positive integer, got {n}")
    n = int(n)
    return n & -n


def _block_for(n: int, block: int | None) -> int:
    b = largest_pow2_divisor(n) if block is None else int(block)
    if b < 1 or b & (b - 1):
        raise ValueError(f"Hadamard block must be a power of two, got {block}")
    if n % b:
        raise ValueError(f"last dimension {n} is not a multiple of the Hadamard block {b}")
    return b


def hadamard_matrix(n: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """The dense Sylvester Hadamard matrix of size n = 2**k (entries +-1, unnormalised): the test reference.

    hadamard_matrix(2) -> [[1, 1], [1, -1]];  H_2n = [[H_n, H_n], [H_n, -H_n]]
    """
    if n < 1 or n & (n - 1):
        raise ValueError(f"a Sylvester Hadamard matrix needs a power-of-two size, got {n}")
    h = torch.ones(1, 1, dtype=dtype, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def fwht(x: torch.Tensor, normalize: bool = True, block: int | None = None) -> torch.Tensor:
    """Walsh–Hadamard transform along the last dimension (block-diagonal when it is not a power of two).

    normalize=True divides by sqrt(block), making the transform orthogonal and its own inverse.
    Returns a new tensor of x's dtype (bf16/fp16 are transformed in float32 and cast back once).

    fwht(torch.tensor([1., 0, 0, 0]))  -> [0.5, 0.5, 0.5, 0.5]
    fwht(torch.tensor([1., 2, 3, 4]), normalize=False) -> [10, -2, -4, 0]
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"fwht expects a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() == 0:
        raise ValueError("fwht needs at least one dimension")
    n = x.shape[-1]
    b = _block_for(n, block)
    work = x if x.dtype in (torch.float32, torch.float64) else x.float()
    lead = work.shape[:-1]
    # Coordinates first, vectors last ([n, M]): each butterfly stage then adds and subtracts long contiguous
    # runs of h * M numbers, 5x faster on a CPU than pairing along a short last dimension.
    y = work.reshape(-1, n).T.contiguous()
    m = y.shape[1]
    h = 1
    while h < b:
        # pair coordinate i with i + h inside each run of 2h (runs never cross a block: 2h divides b)
        y = y.view(n // (2 * h), 2, h, m)
        a, c = y[:, 0], y[:, 1]
        y = torch.stack((a + c, a - c), dim=1)
        h *= 2
    # back to vectors-last; .contiguous() so that the result has the ordinary layout (a strided view here would
    # carry its stride-m last dimension into every later op: an attention reading such keys ran 5x slower)
    y = y.reshape(n, m).T.contiguous().reshape(*lead, n)
    if normalize:
        y = y * (1.0 / math.sqrt(b))
    return y.to(x.dtype)


def random_signs(n: int, seed: int = 0, dtype=torch.float32, device=None) -> torch.Tensor:
    """n signs +-1 from a seeded generator (the same seed gives the same signs on every machine)."""
    g = torch.Generator().manual_seed(int(seed))
    s = torch.randint(0, 2, (int(n),), generator=g).to(dtype) * 2 - 1
    return s.to(device) if device is not None else s


class RandomHadamard:
    """The randomised rotation R x = H diag(s) x / sqrt(block) along the last dim, and its inverse.

    rot = RandomHadamard(64, seed=0)
    y = rot(x)            # rotate: same norms, outliers spread over the block
    rot.inverse(y)        # == x up to float rounding (R^T = diag(s) H / sqrt(block))
    rot.matrix()          # the dense [n, n] orthogonal matrix (tests, small n)
    """

    def __init__(self, n: int, seed: int = 0, block: int | None = None, signs: bool = True):
        self.n = int(n)
        self.block = _block_for(self.n, block)
        self.seed = int(seed)
        self.signs = random_signs(self.n, seed) if signs else torch.ones(self.n)

    def _s(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.n:
            raise ValueError(f"expected last dimension {self.n}, got {tuple(x.shape)}")
        return self.signs.to(device=x.device, dtype=x.dtype if x.dtype == torch.float64 else torch.float32)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return fwht(x * self._s(x), block=self.block).to(x.dtype)

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        return (fwht(y, block=self.block) * self._s(y)).to(y.dtype)

    def matrix(self, dtype=torch.float64) -> torch.Tensor:
        """Dense R with R @ x == self(x) for a column x: block-diagonal H/sqrt(b), times diag(signs)."""
        hb = hadamard_matrix(self.block, dtype) / math.sqrt(self.block)
        h = torch.block_diag(*([hb] * (self.n // self.block)))
        return h * self.signs.to(dtype)[None, :]
