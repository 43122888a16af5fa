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
NaN weight codes decode as +-480 (finite weights are assumed; see the .cu header).
"""
from __future__ import annotations

import math

import torch

from . import _cuda

MAX_M = 16
_SMEM_LIMIT = 48 * 1024
# compiled (R, NT, PF): 16-row tiles per warp, n-tiles of 8 tokens, prefetch of the next k-block
KERNELS_RNP = {(1, 1, 0), (2, 1, 0), (4, 1, 0), (1, 2, 0), (2, 2, 0), (1, 1, 1), (2, 1, 1), (1, 2, 1)}


def _fp8_codes(w: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(w).__name__}")
    if w.dtype == torch.float8_e4m3fn:
        return w.view(torch.uint8)
    if w.dtype != torch.uint8:
        raise TypeError(f"{name} must hold E4M3 codes as uint8 or torch.float8_e4m3fn, got {w.dtype}")
    return w


def check_activations(x, K: int | None = None) -> tuple[int, int]:
    """x must be a bf16 [M, K] tensor with 1 <= M <= 16; returns (M, K)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x must be bfloat16 activations, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {tuple(x.shape)}")
    M, Kx = x.shape
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
    return mode, M, N, K


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
            out: torch.Tensor | None = None) -> Launch:
    """Validate, pick the config, convert arguments; returns a Launch that computes y (see `gemv_fp8`).

    config = (R, S) or (R, S, PF): 16-row tiles per warp, warps per block (split-K), prefetch 0/1."""
    mode, M, N, K = check_args(x, w, scale)
    w = _fp8_codes(w, "w")
    NT = 1 if M <= 8 else 2
    R, S, *pf = config if config is not None else default_config(M, N, K)
    PF = pf[0] if pf else 0
    if NT == 2 and R == 4:
        R = 2
    if not valid_config(R, S, NT, PF):
        raise ValueError(f"invalid config R={R}, S={S}, PF={PF} for M={M}")
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, N)}")
    cp = _cuda._cupy()
    fn = _cuda.load_module("gemv_fp8.cu").get_function(_kernel_name(mode, R, NT, PF))
    args = (_cuda.as_cupy(w), _cuda.as_cupy(scale.contiguous()), _cuda.as_cupy(x.contiguous()),
            _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(N / (16 * R)),), (32 * S,), args, S * R * NT * 4 * 32 * 4, out)


def gemv_fp8(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, *, config: tuple[int, int] | None = None,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """y[M, N] = x @ dequant(w)^T in bf16 with FP8 weights dequantized in registers. See module doc."""
    return prepare(x, w, scale, config=config, out=out)()


# ---- references and test inputs (CPU or GPU, float64) -------------------------------------------------
def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """uint8 E4M3 codes -> float64 values through fp8lab.formats' table (the single source of truth)."""
    from fp8lab import formats

    return formats.E4M3.table().double().to(codes.device)[codes.long()]


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


def quantize_weight_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel E4M3 (fp8lab.scaling's contract, any device): scale = amax/448 (1.0 if not > 0)."""
    wf = w.float()
    s = wf.abs().amax(dim=1) / torch.tensor(448.0, device=w.device)
    s = torch.where(s > 0, s, torch.ones_like(s))
    codes = (wf / s[:, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return codes, s


def random_codes(N: int, K: int, device="cuda", generator=None) -> torch.Tensor:
    """Uniform over all 254 finite E4M3 codes (subnormals and +-448 included): a harder test than N(0,1)."""
    c = torch.randint(0, 254, (N, K), dtype=torch.int32, device=device, generator=generator)
    c = torch.where(c >= 0x7F, c + 1, c)  # skip 0x7F (NaN); 0xFF is out of range already
    return c.to(torch.uint8)
