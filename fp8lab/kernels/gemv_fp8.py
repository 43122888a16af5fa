"""W8A16 decode GEMV / skinny GEMM: FP8 E4M3 weights widened in registers, bf16 activations (gemv_fp8.cu).

    y = gemv_fp8(x, w, scale)     # x bf16 [M, K] (M = 1..16), w e4m3 [N, K], y bf16 [M, N]

`scale` says the granularity by its shape:
    [N]                          per output channel   (y[m, n] = scale[n] * sum_k x[m, k] * e4m3(w[n, k]))
    [ceil(N/128), K/128]         128x128 blocks       (each 128-wide k-block promoted in fp32 with its scale)

Worked example (what the kernel computes, checked against `reference` in the tests):
    w codes [[0x38, 0xB8]] (= [[1.0, -1.0]]), scale [0.5], x [[3.0, 1.0]]  ->  y = 0.5 * (3 - 1) = [[1.0]]

Why it can be ~2x faster than a bf16 GEMV: at M <= 16 the time is the weight bytes over memory
bandwidth, and E4M3 weights are half the bytes of bf16. The tensor cores do the (tiny) arithmetic:
the weights never exist in bf16 outside registers.

Limits: K % 128 == 0 (the kernel walks 128-wide k-blocks, which are also the block-scale granularity);
w and x 16-byte aligned (16-byte vector loads); NaN weight codes decode as +-480 (finite weights are
assumed; see the .cu header).

Two versions, both kept, both tested, both timed by bench_gemm (llm.c style):
    version=1  config (R, S[, PF]): registers only; PF = 1 prefetches the next k-block into registers.
    version=2  config (R, S, C, D): a D-stage cp.async ring in shared memory holds the bytes in flight
               (D = 0: direct loads), C 64-byte chunks per row per iteration (K % (64 C) == 0).
    gemv_fp8(x, w, scale)              # default_version(M, N, K), its default config
    gemv_fp8(x, w, scale, version=1, config=(2, 4, 0))
"""
from __future__ import annotations

import math

import torch

from . import _cuda
from . import reference as reference_values

MAX_M = 16
_SMEM_LIMIT = 48 * 1024
# compiled (R, NT, PF): 16-row tiles per warp, n-tiles of 8 tokens, prefetch of the next k-block
KERNELS_RNP = {(1, 1, 0), (2, 1, 0), (4, 1, 0), (1, 2, 0), (2, 2, 0), (1, 1, 1), (2, 1, 1), (1, 2, 1)}
# version 2, compiled (R, NT, C, D): ... C 64-byte chunks per row per iteration, D ring stages (0: none)
KERNELS_V2 = {(1, 1, 2, 2), (2, 1, 2, 2), (1, 1, 4, 0), (1, 1, 4, 2), (1, 1, 4, 3), (2, 1, 4, 0), (1, 1, 8, 0),
              (1, 1, 8, 2), (1, 2, 2, 2), (2, 2, 2, 2), (1, 2, 2, 3), (1, 2, 4, 0), (1, 2, 4, 2)}
DEFAULT_VERSION = None  # None: per shape, see default_version

def cuda_defines() -> tuple[str, ...]:
    """The compiled configurations as -D instantiation lists for gemv_fp8.cu (sources.py passes them):
    these sets are the only list, so a config cannot be in one and missing from the other."""
    from .sources import instances

    return (instances("FP8LAB_GEMV_FP8_V1", "GEMV_FP8", KERNELS_RNP), instances("FP8LAB_GEMV_FP8_V2", "GEMV_FP8_V2", KERNELS_V2))

_SMEM_OPTIN = 227 * 1024  # sm_90's per-block shared-memory ceiling (opt-in above 48 KiB)


_fp8_codes = _cuda.byte_codes  # E4M3 weights / activations: uint8 codes or a float8_e4m3fn view


def check_activations(x, K: int | None = None) -> tuple[int, int]:
    """x must be a bf16 [M, K] tensor with 1 <= M <= 16; returns (M, K)."""
    M, Kx = _cuda.bf16_tensor(x, "x", 2, "[M, K]").shape
    if not 1 <= M <= MAX_M:
        raise ValueError(f"these are decode kernels for M = 1..{MAX_M} tokens, got M = {M} (use gemm_w8a8 for prefill)")
    if K is not None and Kx != K:
        raise ValueError(f"x has K = {Kx} but the weights have K = {K}")
    return M, Kx


def check_args(x, w, scale) -> tuple[str, int, int, int]:
    """Validate everything before any CUDA call; returns (mode, M, N, K). mode is 'channel' or 'block'."""
    w = _fp8_codes(w, "w")
    if w.dim() != 2:
        raise ValueError(f"w must be 2-D [N, K], got shape {tuple(w.shape)}")
    N, K = w.shape
    M, _ = check_activations(x, K)
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError(f"scale must be a float32 tensor, got {getattr(scale, 'dtype', type(scale).__name__)}")
    if scale.dim() == 1 or (scale.dim() == 2 and scale.shape[1] == 1 and scale.shape[0] == N):
        mode = "channel"
        if scale.numel() != N:
            raise ValueError(f"per-channel scale must have N = {N} entries, got shape {tuple(scale.shape)}")
    elif scale.dim() == 2:
        mode = "block"
        if K % 128:
            raise ValueError(f"K = {K} is not a multiple of 128: 128x128 block scales need whole k-blocks")
        want = (math.ceil(N / 128), K // 128)
        if tuple(scale.shape) != want:
            raise ValueError(f"128x128 block scales for w [{N}, {K}] must have shape {want}, got {tuple(scale.shape)}")
    else:
        raise ValueError(f"scale must be [N] (per channel) or [ceil(N/128), K/128] (blocks), got shape {tuple(scale.shape)}")
    if K % 128:
        raise ValueError(f"K = {K} is not a multiple of 128: the kernel reads 128-wide k-blocks")
    for name, t in (("x", x), ("w", w), ("scale", scale)):
        if not t.is_cuda:
            raise TypeError(f"{name} must be a CUDA tensor, got one on {t.device}")
    check_aligned(("x", x), ("w", w))
    return mode, M, N, K


def check_aligned(*named) -> None:
    """The kernels read 16-byte vectors from the tensor's start. A non-contiguous tensor is copied
    (fresh allocations are aligned); a contiguous view starting off a 16-byte boundary is refused."""
    for name, t in named:
        if t.is_contiguous() and t.data_ptr() % 16:
            raise ValueError(f"{name} must start on a 16-byte boundary (a view at an odd offset?); pass a copy")


def default_config(M: int, N: int, K: int, kblock: int = 128, sms: int = 132) -> tuple[int, int]:
    """(R, S): 16-row tiles per warp and warps per block (split-K), aiming at ~16 resident warps per SM.

    default_config(1, 28672, 8192) -> (2, 4)   # 896 row pairs x 4 k-splits = 3584 warps
    default_config(1, 4096, 4096)  -> (1, 16)  # small N: split K 16 ways to keep enough bytes in flight
    """
    R = 2 if N >= 8192 else 1
    tiles = math.ceil(N / (16 * R))
    kbs = K // kblock
    S = 1
    while S < 16 and 2 * S <= kbs and tiles * S < sms * 16:
        S *= 2
    return R, S


def _kernel_name(mode: str, R: int, NT: int, PF: int) -> str:
    return f"gemv_fp8_{mode}_r{R}_nt{NT}_pf{PF}"


def valid_config(R: int, S: int, NT: int, PF: int = 0) -> bool:
    return (R, NT, PF) in KERNELS_RNP and S in (1, 2, 4, 8, 16) and S * R * NT * 512 <= _SMEM_LIMIT


def smem_v2(R: int, S: int, NT: int, C: int, D: int) -> int:
    """Version 2's dynamic shared memory: the ring (S warps x D stages x R*2*C chunks x 32 lanes x 16 B)
    plus the split-K reduction (S x R*NT*4 floats x 32 lanes).

    smem_v2(2, 4, 1, 2, 2) -> 36864   # 32 KiB ring + 4 KiB reduction
    """
    return S * D * R * 2 * C * 512 + S * R * NT * 512


def valid_config_v2(R: int, S: int, NT: int, C: int, D: int, K: int | None = None) -> bool:
    """Compiled, at most 256 threads (the kernels' launch bound), shared memory within sm_90's limit,
    and (given K) whole iterations of 64*C k."""
    return ((R, NT, C, D) in KERNELS_V2 and S in (1, 2, 4, 8) and smem_v2(R, S, NT, C, D) <= _SMEM_OPTIN
            and (K is None or K % (64 * C) == 0))


def default_config_v2(M: int, N: int, K: int, sms: int = 132) -> tuple[int, int, int, int]:
    """(R, S, C, D) for version 2, the winners (or near them) of the H200 tuning of every compiled config in
    outputs/kernels/gemm_tune.json (`bench gemm --tune 1,2`) on its four decode shapes: one row tile per warp and
    the smallest split-K giving >= 2048 warps; M <= 8: 128 k per iteration through a 2-stage ring; M = 9..16: 256 k
    per iteration, direct loads.

    default_config_v2(1, 28672, 8192) -> (1, 2, 2, 2)    # 1792 row tiles x 2
    default_config_v2(16, 14336, 4096) -> (1, 4, 4, 0)   #  896 row tiles x 4
    default_config_v2(1, 4096, 4096) -> (1, 8, 2, 2)     #  256 row tiles x 8
    """
    tiles = math.ceil(N / 16)
    S = 1
    while S < 8 and tiles * S < 2048 and 2 * S * 128 <= K:
        S *= 2
    if M > 8 and K % 256 == 0:
        return 1, S, 4, 0
    return 1, S, 2, 2


def default_version(M: int, N: int, K: int) -> int:
    """The version measured faster on the H200, both tuned (outputs/kernels/gemm_tune.json): version 2 on
    28672x8192 (M = 1 and 16) and at M = 9..16 with N >= 8192; version 1 on the smaller shapes at M = 1 and on
    N = 4096, where its register prefetch wins.

    default_version(1, 28672, 8192) -> 2;  default_version(1, 14336, 4096) -> 1;  default_version(16, 14336, 4096) -> 2
    """
    if DEFAULT_VERSION is not None:
        return DEFAULT_VERSION
    return 2 if N * K >= 2**27 or (M > 8 and N >= 8192) else 1


def _launch_v2(mode, x, w, scale, M, N, K, config, out):
    NT = 1 if M <= 8 else 2
    R, S, C, D = config if config is not None else default_config_v2(M, N, K)
    if not valid_config_v2(R, S, NT, C, D, K):
        raise ValueError(f"invalid version-2 config R={R}, S={S}, C={C}, D={D} for M={M}, K={K} "
                         f"(compiled (R, NT, C, D): {sorted(KERNELS_V2)}; S in 1, 2, 4, 8)")
    cp = _cuda._cupy()
    fn = _cuda.load_module("gemv_fp8.cu").get_function(f"gemv_fp8_v2_{mode}_r{R}_nt{NT}_c{C}_d{D}")
    smem = smem_v2(R, S, NT, C, D)
    _cuda.allow_dynamic_smem(fn, smem)
    args = (_cuda.as_cupy(w), _cuda.as_cupy(scale.contiguous()), _cuda.as_cupy(x.contiguous()),
            _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(N / (16 * R)),), (32 * S,), args, smem, out)


class Launch:
    """A prepared kernel launch: arguments converted once, so a call is only the launch.

    Calls go to torch's current stream (ordered with torch work, and capturable in a CUDA graph,
    which is how bench_gemm times microsecond kernels without Python launch overhead).
    """

    def __init__(self, fn, grid, block, args, smem, out):
        self.fn, self.grid, self.block, self.args, self.smem, self.out = fn, grid, block, args, smem, out

    def __call__(self) -> torch.Tensor:
        cp = _cuda._cupy()
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.fn(self.grid, self.block, self.args, shared_mem=self.smem)
        return self.out


def prepare(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, *, config: tuple | None = None,
            out: torch.Tensor | None = None, version: int | None = None) -> Launch:
    """Validate, pick the config, convert arguments; returns a Launch that computes y (see `gemv_fp8`).

    version 1: config = (R, S) or (R, S, PF): 16-row tiles per warp, warps per block (split-K), prefetch 0/1.
    version 2: config = (R, S, C, D): the same R and S, C 64-byte chunks per row per iteration, D ring stages.
    version None: default_version(M, N, K)."""
    if version not in (None, 1, 2):
        raise ValueError(f"version must be 1 or 2, got {version!r}")
    mode, M, N, K = check_args(x, w, scale)
    version = default_version(M, N, K) if version is None else version
    w = _fp8_codes(w, "w")
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, N)}")
    if version == 2:
        return _launch_v2(mode, x, w, scale, M, N, K, config, out)
    NT = 1 if M <= 8 else 2
    R, S, *pf = config if config is not None else default_config(M, N, K)
    PF = pf[0] if pf else 0
    if NT == 2 and R == 4:
        R = 2
    if not valid_config(R, S, NT, PF):
        raise ValueError(f"invalid config R={R}, S={S}, PF={PF} for M={M}")
    cp = _cuda._cupy()
    fn = _cuda.load_module("gemv_fp8.cu").get_function(_kernel_name(mode, R, NT, PF))
    args = (_cuda.as_cupy(w), _cuda.as_cupy(scale.contiguous()), _cuda.as_cupy(x.contiguous()),
            _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(N / (16 * R)),), (32 * S,), args, S * R * NT * 4 * 32 * 4, out)


def gemv_fp8(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, *, config: tuple | None = None,
             out: torch.Tensor | None = None, version: int | None = None) -> torch.Tensor:
    """y[M, N] = x @ dequant(w)^T in bf16 with FP8 weights dequantized in registers. See module doc."""
    return prepare(x, w, scale, config=config, out=out, version=version)()


# ---- references and test inputs (CPU or GPU, float64) -------------------------------------------------
def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """uint8 E4M3 codes -> float64 values through fp8lab.formats' table (reference.decode)."""
    return reference_values.decode("e4m3", codes)


def dequant_weight(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float64 [N, K] weights: decode(w) * scale, for per-channel [N] or 128x128 block scales."""
    w = _fp8_codes(w, "w")
    N, K = w.shape
    v = decode_e4m3(w)
    s = scale.double()
    if s.dim() == 1 or (s.dim() == 2 and s.shape[1] == 1 and s.shape[0] == N):
        return v * s.reshape(N, 1)
    return v * s.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]


def reference(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float64 y = x @ dequant(w)^T: the exact answer the kernel rounds to bf16."""
    return x.double() @ dequant_weight(w, scale).T


def random_codes(N: int, K: int, device="cuda", generator=None) -> torch.Tensor:
    """Uniform over all 254 finite E4M3 codes (subnormals and +-448 included): a harder test than N(0,1)."""
    from fp8lab.formats import E4M3

    c = torch.randint(0, 254, (N, K), dtype=torch.int32, device=device, generator=generator)
    c = torch.where(c >= E4M3.nan_code, c + 1, c)  # skip 0x7F (NaN); 0xFF is out of range already
    return c.to(torch.uint8)
