"""Hadamard matrices and the fast Walsh–Hadamard transform: the rotation QuaRot uses to spread outliers.

A Hadamard matrix H of order n has entries +-1 and H H^T = n I, so R = H / sqrt(n) is orthogonal: rotating a
Linear's input and weight together, (W R^T)(R x) = W x, changes nothing in exact arithmetic. What it changes is
what a quantizer sees: one channel holding a value 100x larger than the rest becomes n channels each holding
about 100/sqrt(n) of it, so a per-tensor (or per-block) scale is no longer set by one channel.

    H(2) = [[1, 1], [1, -1]];  H(2n) = [[H, H], [H, -H]]                    (Sylvester: n a power of two)
    fwht(x) = x @ H(n).T / sqrt(n) in O(n log n) additions                  (in place of an n x n matmul)
    fwht(torch.tensor([1., 0, 0, 0]))  ->  [0.5, 0.5, 0.5, 0.5]            # one spike becomes four halves

Orders that are not a power of two (SmolLM2's hidden size 576 = 9 x 64, its MLP width 1536 = 3 x 512): a
Hadamard matrix exists only for n = 1, 2 or a multiple of 4, and there is none of order 9. We use what QuaRot
uses, a Kronecker product with a small Hadamard matrix built by Paley's construction:
    576  = 36 x 16:   H = Paley_II(q=17) (x) Sylvester(16)      (Paley II: q prime, q = 1 mod 4 -> order 2(q+1))
    1536 = 12 x 128:  H = Paley_I(q=11)  (x) Sylvester(128)     (Paley I:  q prime, q = 3 mod 4 -> order q+1)
`kind="kronecker"` (the default) mixes all n channels; `kind="block"` is the cheaper alternative: a block-diagonal
matrix of Sylvester blocks of the largest power of two dividing n (9 blocks of 64 for 576), which mixes only inside
each block. Both are exact and orthogonal after normalization: the tests check H H^T = c I in integers (c = n, or
the block size), R R^T = I in float64, and the fast transforms against the dense matrix.

`RandomHadamard(n, seed)` is R = H diag(d) / sqrt(n) with random signs d (QuaRot's randomized Hadamard; TurboQuant
rotates KV vectors the same way): the signs make the rotation data-independent "incoherent" -- no input vector is
aligned with a row of H by accident (a fixed H turns the all-ones vector into one spike). `rot.inverse(y)` undoes it.

Every function works along the last dimension of a float tensor on any device; bfloat16/float16 inputs are
transformed in float32 and cast back once (a +-1 sum of 64 bf16 numbers rounded at every step loses bits).
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch

__all__ = ["is_power_of_two", "sylvester", "paley", "small_factor", "row_weight", "hadamard_matrix", "orthonormal",
           "fwht", "hadamard_transform", "random_signs", "RandomHadamard"]


def _work(x: torch.Tensor) -> torch.Tensor:
    """x as float32 when it is a half type (transforms add many numbers: round once, at the end)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"a Hadamard transform needs a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() == 0:
        raise ValueError("a Hadamard transform needs at least one dimension")
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def is_power_of_two(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def sylvester(n: int) -> torch.Tensor:
    """The +-1 Sylvester-Hadamard matrix of order n (a power of two), int64."""
    if not is_power_of_two(n):
        raise ValueError(f"Sylvester's construction needs a power of two, got {n}")
    h = torch.ones(1, 1, dtype=torch.int64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def _is_prime(q: int) -> bool:
    return q >= 2 and all(q % p for p in range(2, int(q ** 0.5) + 1))


def _jacobsthal(q: int) -> torch.Tensor:
    """Q[i, j] = chi(j - i), chi the quadratic character mod q (0, +1 for squares, -1 otherwise)."""
    squares = {(x * x) % q for x in range(1, q)}
    chi = torch.tensor([0] + [1 if r in squares else -1 for r in range(1, q)], dtype=torch.int64)
    idx = (torch.arange(q)[None, :] - torch.arange(q)[:, None]) % q
    return chi[idx]


def paley(order: int) -> torch.Tensor:
    """A +-1 Hadamard matrix of `order` by Paley's construction I (order = q+1, q prime = 3 mod 4) or II
    (order = 2(q+1), q prime = 1 mod 4); ValueError when neither applies."""
    q = order - 1
    if _is_prime(q) and q % 4 == 3:                            # Paley I: H = I + S, S skew with a bordered Q
        Q = _jacobsthal(q)
        S = torch.zeros(order, order, dtype=torch.int64)
        S[0, 1:], S[1:, 0], S[1:, 1:] = 1, -1, Q
        return torch.eye(order, dtype=torch.int64) + S
    q = order // 2 - 1
    if order % 2 == 0 and _is_prime(q) and q % 4 == 1:        # Paley II: a symmetric conference matrix C
        C = torch.zeros(q + 1, q + 1, dtype=torch.int64)
        C[0, 1:], C[1:, 0], C[1:, 1:] = 1, 1, _jacobsthal(q)
        a = torch.tensor([[1, 1], [1, -1]])
        b = torch.tensor([[1, -1], [-1, -1]])
        return torch.kron(C, a) + torch.kron(torch.eye(q + 1, dtype=torch.int64), b)
    raise ValueError(f"no Paley construction of order {order}")


def small_factor(n: int) -> int:
    """The smallest m with n = m * 2**k and a Paley (or trivial, m = 1) Hadamard matrix of order m.

    small_factor(4096) -> 1 ; small_factor(1536) -> 12 ; small_factor(576) -> 36 ; small_factor(18) -> ValueError
    """
    if n < 1:
        raise ValueError(f"order must be positive, got {n}")
    odd = n
    while odd % 2 == 0:
        odd //= 2
    if odd == 1:
        return 1
    m = odd * 4
    while m <= n:
        if n % m == 0:
            try:
                paley(m)
                return m
            except ValueError:
                pass
        m *= 2
    raise ValueError(f"no Hadamard matrix of order {n} from Sylvester x Paley (odd part {odd}); "
                     f"use kind='block' (block-diagonal Sylvester blocks)")


def _block(n: int) -> int:
    """Largest power of two dividing n."""
    return n & (-n)


def _check_kind(kind: str) -> None:
    if kind not in ("kronecker", "block"):
        raise ValueError(f"kind must be 'kronecker' or 'block', got {kind!r}")


@lru_cache(maxsize=None)
def _matrix(n: int, kind: str) -> torch.Tensor:
    _check_kind(kind)
    if kind == "kronecker":
        m = small_factor(n)
        small = paley(m) if m > 1 else torch.ones(1, 1, dtype=torch.int64)
        return torch.kron(small, sylvester(n // m))
    p = _block(n)
    return torch.block_diag(*[sylvester(p)] * (n // p))


def row_weight(n: int, kind: str = "kronecker") -> int:
    """c in H H^T = c I: n for the full (Kronecker) matrix, the block size for the block-diagonal one."""
    _check_kind(kind)
    return n if kind == "kronecker" else _block(n)


def hadamard_matrix(n: int, kind: str = "kronecker") -> torch.Tensor:
    """The +-1 matrix H (int64) of order n; H H^T = row_weight(n, kind) * I exactly."""
    return _matrix(int(n), kind).clone()


def orthonormal(n: int, kind: str = "kronecker") -> torch.Tensor:
    """H / sqrt(row_weight): the orthogonal matrix `hadamard_transform(x, kind)` multiplies by (float64)."""
    return hadamard_matrix(n, kind).double() / math.sqrt(row_weight(n, kind))


def _radix_factors(p: int, radix: int) -> list[int]:
    out = []
    while p > 1:
        out.append(min(p, radix))
        p //= out[-1]
    return out


def _apply_along(y: torch.Tensor, mats: list[torch.Tensor]) -> torch.Tensor:
    """y [B, f1, f2, ...]: multiply axis i+1 by mats[i] (the Kronecker product of mats, applied without forming it)."""
    for i, h in enumerate(mats):
        y = torch.movedim(torch.matmul(torch.movedim(y, i + 1, -1), h.T), -1, i + 1)
    return y


def fwht(x: torch.Tensor, normalize: bool = True, radix: int = 16) -> torch.Tensor:
    """Fast Walsh–Hadamard transform along the last dim (a power of two n): x @ sylvester(n).T (/ sqrt(n)).

    Sylvester's matrix factors as H(n) = H(r) (x) H(r) (x) ... , so the transform is log_r(n) passes, each a small
    r x r +-1 matrix applied along one axis of x viewed as [..., r, r, ...]: n * r * log_r(n) additions in place of
    n**2. radix=2 is the textbook butterfly, (a, b) -> (a + b, a - b); radix=16 does the same arithmetic in fewer,
    wider passes (faster in PyTorch on a CPU). Both are exact up to float rounding of the additions.
    """
    w = _work(x)
    n = x.shape[-1]
    if not is_power_of_two(n):
        raise ValueError(f"fwht needs a power-of-two last dimension, got {n}")
    if not is_power_of_two(radix) or radix < 2:
        raise ValueError(f"radix must be a power of two >= 2, got {radix}")
    facs = _radix_factors(n, radix)
    y = _apply_along(w.reshape(-1, *facs), [sylvester(f).to(w.dtype).to(w.device) for f in facs]).reshape(x.shape)
    return (y / math.sqrt(n) if normalize else y).to(x.dtype)


def hadamard_transform(x: torch.Tensor, kind: str = "kronecker") -> torch.Tensor:
    """x @ orthonormal(n, kind).T along the last dim, fast, for every n the module supports.

    kronecker: x viewed as [..., m, p] (n = m * p, p a power of two): the small m x m Paley matrix over m and the
    fast transform over p.  block: x viewed as [..., n/p, p]: the fast transform inside each block of p.
    """
    _check_kind(kind)
    w = _work(x)
    n = x.shape[-1]
    if kind == "block":
        p = _block(n)
        return fwht(w.reshape(*x.shape[:-1], n // p, p)).reshape(x.shape).to(x.dtype)
    m = small_factor(n)
    if m == 1:
        return fwht(x)
    facs = _radix_factors(n // m, 16)
    mats = [paley(m).to(w.dtype).to(w.device)] + [sylvester(f).to(w.dtype).to(w.device) for f in facs]
    return (_apply_along(w.reshape(-1, m, *facs), mats).reshape(x.shape) / math.sqrt(n)).to(x.dtype)


def random_signs(n: int, seed: int = 0, dtype=torch.float32, device=None) -> torch.Tensor:
    """n signs +-1 from a seeded CPU generator (the same seed gives the same signs on every machine)."""
    g = torch.Generator().manual_seed(int(seed))
    s = (torch.randint(0, 2, (int(n),), generator=g) * 2 - 1).to(dtype)
    return s.to(device) if device is not None else s


class RandomHadamard:
    """R = H diag(d) / sqrt(c), d a seeded vector of random signs: an orthogonal rotation of the last dim.

    rot = RandomHadamard(576, seed=0)
    rot(x)          # R x along the last dim (activations [..., 576], or each row of a weight [N, 576])
    rot(W)          # rows of W rotated = W R^T, so that (W R^T)(R x) = W x
    rot.inverse(y)  # R^T y: x back, up to float rounding

    method="fast" runs `hadamard_transform` (what a GPU kernel does, O(n log n)); method="dense" multiplies by the
    cached dense R. Both give R x up to float rounding; on a CPU in PyTorch, for n <= a few thousand, one BLAS
    matmul is faster than a chain of small passes, so the model hooks use "dense".
    """

    def __init__(self, n: int, seed: int = 0, kind: str = "kronecker", signs: bool = True, method: str = "dense"):
        if method not in ("dense", "fast"):
            raise ValueError(f"method must be 'dense' or 'fast', got {method!r}")
        self.n, self.kind, self.method = int(n), kind, method
        hadamard_matrix(self.n, kind)     # validate the order now, not at the first forward
        g = torch.Generator().manual_seed(seed)
        self.d = random_signs(self.n, seed) if signs else torch.ones(self.n)
        self._dense: dict = {}

    def _check(self, x: torch.Tensor) -> torch.Tensor:
        w = _work(x)
        if x.shape[-1] != self.n:
            raise ValueError(f"rotation of order {self.n} applied to a last dimension of {x.shape[-1]}")
        return w

    def _mat(self, w: torch.Tensor, transpose: bool) -> torch.Tensor:
        key = (w.dtype, w.device, transpose)
        if key not in self._dense:
            r = self.matrix()
            self._dense[key] = (r.T if transpose else r).to(dtype=w.dtype, device=w.device).contiguous()
        return self._dense[key]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        w = self._check(x)
        if self.method == "fast":
            return hadamard_transform(w * self.d.to(w.dtype).to(w.device), self.kind).to(x.dtype)
        return torch.matmul(w, self._mat(w, True)).to(x.dtype)

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """R^T y along the last dim (row form: y @ R): undoes `__call__` up to float rounding."""
        w = self._check(y)
        return torch.matmul(w, self._mat(w, False)).to(y.dtype)

    def matrix(self) -> torch.Tensor:
        """The dense R = H diag(d) / sqrt(c) (float64), for tests and small examples."""
        return orthonormal(self.n, self.kind) * self.d.double()[None, :]
