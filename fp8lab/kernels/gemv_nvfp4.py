"""W4A16 NVFP4 decode GEMV / skinny GEMM: E2M1 nibbles + E4M3 block scales widened in registers (gemv_nvfp4.cu).

    y = gemv_nvfp4(x, w_packed, scale_codes, global_scale)
        x bf16 [M, K] (M = 1..16); w_packed uint8 [N, K/2] (element 2i in the low nibble, as
        fp8lab.scaling.pack_nibbles); scale_codes E4M3 [N, K/16]; global_scale fp32 (0-d tensor or float)

    w[n, k] = e2m1(nibble) * e4m3(scale_codes[n, k // 16]) * global_scale   (dequantize's order)

Worked example: nibbles [0x2, 0xA] (= [1.0, -1.0]) with scale code 0x38 (1.0) and global 0.25, x = [[4, 2]]
    -> y = 0.25 * (4 - 2) = [[0.5]]

Bytes per weight: 0.5 + 1/16 = 0.5625, against 2 for bf16: the memory-bound ideal is 3.56x (Marlin's
3.87x counts 4-bit weights with 128-wide fp16 groups). Limits: K % 256 == 0 (one iteration reads 256 k);
x, w_packed and scale_codes 16-byte aligned.

Two versions, both kept, both tested, both timed by bench_gemm (llm.c style):
    version=1  config (R, S[, PF]): ~19 integer ops per 8 nibbles, ~9 per block scale (see the .cu).
    version=2  config (R, S, C, D): 11 integer ops per 8 nibbles (one-lop3 select trick), hardware
               e4m3x2 -> f16x2 for the scales, C 64-byte chunks (128 k) per row per iteration (C = 4
               needs K % 512 == 0), optional D-stage cp.async ring (D = 0: direct loads).
With C = 2 both compute the same products in the same order: on the same (R, S) their outputs are
bit-identical, except where a block's E4M3 scale is subnormal (codes 1..7, 2**-9 .. 7 * 2**-9):
version 1 computes scales in fp32 and CuPy's NVRTC compiles with -ftz=true, so it flushes those to 0;
version 2 converts them exactly.
"""
from __future__ import annotations

import math

import torch

from . import _cuda
from . import reference as reference_values
from .gemv_fp8 import Launch, check_activations, check_aligned, decode_e4m3, default_config

_SMEM_LIMIT = 48 * 1024
_SMEM_OPTIN = 227 * 1024
KERNELS_RNP = {(1, 1, 0), (2, 1, 0), (1, 2, 0), (2, 2, 0), (1, 1, 1), (2, 1, 1)}  # compiled (R, NT, PF)
# version 2, compiled (R, NT, C, D): row tiles per warp, token tiles, 64-byte chunks per row per
# iteration, cp.async ring stages (0: none)
KERNELS_V2 = {(1, 1, 2, 0), (2, 1, 2, 0), (1, 1, 2, 2), (2, 1, 2, 2), (1, 1, 4, 0), (1, 1, 4, 2), (2, 1, 4, 0),
              (1, 2, 2, 0), (2, 2, 2, 0), (1, 2, 2, 2), (2, 2, 2, 2), (2, 2, 4, 0)}
DEFAULT_VERSION = 2

def cuda_defines() -> tuple[str, ...]:
    """The compiled configurations as -D instantiation lists for gemv_nvfp4.cu (sources.py passes them):
    these sets are the only list, so a config cannot be in one and missing from the other."""
    from .sources import instances

    return (instances("FP8LAB_GEMV_NVFP4_V1", "GEMV_NVFP4", KERNELS_RNP), instances("FP8LAB_GEMV_NVFP4_V2", "GEMV_NVFP4_V2", KERNELS_V2))



def check_args(x, w_packed, scale_codes, global_scale) -> tuple[int, int, int]:
    """Validate before any CUDA call; returns (M, N, K)."""
    w_packed = _cuda.byte_codes(w_packed, "w_packed", "packed E2M1 nibbles")
    scale_codes = _cuda.byte_codes(scale_codes, "scale_codes", "E4M3 scale codes")
    if w_packed.dim() != 2:
        raise ValueError(f"w_packed must be 2-D [N, K/2], got shape {tuple(w_packed.shape)}")
    N, KH = w_packed.shape
    K = 2 * KH
    M, _ = check_activations(x, K)
    if K % 256:
        raise ValueError(f"K = {K} is not a multiple of 256: the kernel reads 256-wide k-blocks (16 NVFP4 scale blocks)")
    if tuple(scale_codes.shape) != (N, K // 16):
        raise ValueError(f"scale_codes for w [{N}, {K}] must have shape {(N, K // 16)}, got {tuple(scale_codes.shape)}")
    if isinstance(global_scale, torch.Tensor):
        if global_scale.numel() != 1 or global_scale.dtype != torch.float32:
            raise ValueError("global_scale must be one float32 value")
    elif not isinstance(global_scale, (int, float)):
        raise TypeError(f"global_scale must be a float or a 1-element float32 tensor, got {type(global_scale).__name__}")
    for name, t in (("x", x), ("w_packed", w_packed), ("scale_codes", scale_codes)):
        if not t.is_cuda:
            raise TypeError(f"{name} must be a CUDA tensor, got one on {t.device}")
    check_aligned(("x", x), ("w_packed", w_packed), ("scale_codes", scale_codes))
    return M, N, K


def valid_config(R: int, S: int, NT: int, PF: int = 0) -> bool:
    return (R, NT, PF) in KERNELS_RNP and S in (1, 2, 4, 8, 16) and S * R * NT * 512 <= _SMEM_LIMIT


def smem_v2(R: int, S: int, NT: int, C: int, D: int) -> int:
    """Version 2's dynamic shared memory: ring (S warps x D stages x (R*2*C weight + R*C scale) 16-byte
    lines x 32 lanes) + split-K reduction (S x R*NT*4 floats x 32 lanes).

    smem_v2(2, 4, 1, 2, 2) -> 53248   # 48 KiB ring + 4 KiB reduction: above 48 KiB, opted in at launch
    """
    return S * D * (R * 2 * C + R * C) * 512 + S * R * NT * 512


def valid_config_v2(R: int, S: int, NT: int, C: int, D: int, K: int | None = None) -> bool:
    """Compiled, at most 256 threads, shared memory within sm_90's limit, whole iterations of 128*C k."""
    return ((R, NT, C, D) in KERNELS_V2 and S in (1, 2, 4, 8) and smem_v2(R, S, NT, C, D) <= _SMEM_OPTIN
            and (K is None or K % (128 * C) == 0))


def default_config_v2(M: int, N: int, K: int, sms: int = 132) -> tuple[int, int, int, int]:
    """(R, S, C, D) for version 2, the winners (or near them) of the H200 tuning of every compiled config in
    outputs/kernels/gemm_tune.json (`bench gemm --tune 1,2`) on its four decode shapes, 256 k per iteration:
      M <= 8:  one row tile per warp, split-K 4 (N >= 8192) or 8, a 2-stage ring except on 4096x4096;
      M > 8:   two row tiles, direct loads, the smallest split-K giving >= 1792 warps.

    default_config_v2(1, 28672, 8192) -> (1, 4, 2, 2)
    default_config_v2(16, 28672, 8192) -> (2, 2, 2, 0)
    default_config_v2(1, 4096, 4096) -> (1, 8, 2, 0)
    """
    if M <= 8:
        return 1, (4 if N >= 8192 else 8), 2, (2 if N * K >= 2**25 else 0)
    S = 1
    while S < 8 and math.ceil(N / 32) * S < 1792 and 2 * S * 256 <= K:
        S *= 2
    return 2, S, 2, 0


def scale_and_out(x, global_scale, M: int, N: int, out):
    """The global scale as a 1-element fp32 tensor on x's device, and the bf16 [M, N] output (checked when given):
    what every NVFP4 GEMV kernel (versions 1, 2 and the hardware-E2M1 one) takes besides the weights."""
    if not isinstance(global_scale, torch.Tensor):
        global_scale = torch.tensor([float(global_scale)], dtype=torch.float32, device=x.device)
    gs = global_scale.reshape(1).to(device=x.device, dtype=torch.float32).contiguous()
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, N)}")
    return gs, out


def prepare(x, w_packed, scale_codes, global_scale, *, config=None, out=None, version=None) -> Launch:
    """Validate, pick the config, convert arguments; returns a Launch computing y (see `gemv_nvfp4`).

    version 1: config (R, S) or (R, S, PF);  version 2: config (R, S, C, D);  None: DEFAULT_VERSION."""
    version = DEFAULT_VERSION if version is None else version
    if version not in (1, 2):
        raise ValueError(f"version must be 1 or 2, got {version!r}")
    M, N, K = check_args(x, w_packed, scale_codes, global_scale)
    w_packed = _cuda.byte_codes(w_packed, "w_packed", "packed E2M1 nibbles")
    scale_codes = _cuda.byte_codes(scale_codes, "scale_codes", "E4M3 scale codes")
    NT = 1 if M <= 8 else 2
    if version == 2:
        R, S, C, D = config if config is not None else default_config_v2(M, N, K)
        if not valid_config_v2(R, S, NT, C, D, K):
            raise ValueError(f"invalid version-2 config R={R}, S={S}, C={C}, D={D} for M={M}, K={K} "
                             f"(compiled (R, NT, C, D): {sorted(KERNELS_V2)}; S in 1, 2, 4, 8)")
        name, smem = f"gemv_nvfp4_v2_r{R}_nt{NT}_c{C}_d{D}", smem_v2(R, S, NT, C, D)
    else:
        R, S, *pf = config if config is not None else default_config(M, N, K, kblock=256)
        PF = pf[0] if pf else 0
        R = min(R, 2)
        if not valid_config(R, S, NT, PF):
            raise ValueError(f"invalid config R={R}, S={S}, PF={PF} for M={M}")
        name, smem = f"gemv_nvfp4_r{R}_nt{NT}_pf{PF}", S * R * NT * 4 * 32 * 4
    gs, out = scale_and_out(x, global_scale, M, N, out)
    cp = _cuda._cupy()
    fn = _cuda.load_module("gemv_nvfp4.cu").get_function(name)
    _cuda.allow_dynamic_smem(fn, smem)
    args = (_cuda.as_cupy(w_packed), _cuda.as_cupy(scale_codes), _cuda.as_cupy(gs), _cuda.as_cupy(x.contiguous()),
            _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(N / (16 * R)),), (32 * S,), args, smem, out)


def gemv_nvfp4(x, w_packed, scale_codes, global_scale, *, config=None, out=None, version=None) -> torch.Tensor:
    """y[M, N] = x @ dequant(W)^T in bf16, NVFP4 weights dequantized in registers. See module doc."""
    return prepare(x, w_packed, scale_codes, global_scale, config=config, out=out, version=version)()


def e2m1x8_to_bf16_bits(q):
    """CPU model (numpy, uint32 words) of version 2's e2m1x8_to_bf16: the bit trick, checked in the tests.

    Returns four uint32 arrays p[i] = bf16x2 bits of (nibble i, nibble i+4) of each word, value * 2**-126:
    e2m1x8_to_bf16_bits(np.array([0xA], np.uint32))[0] -> [0x8080]  # nibble 0 = 0xA = -1.0: low half -2**-126
    (tests/test_kernels_gemm.py checks it against the E2M1 table on every nibble in every position.)
    """
    import numpy as np

    q = np.asarray(q, dtype=np.uint32)
    sel, m = np.uint32(0x88008800), np.uint32(0x81C081C0)

    def select(a, c):  # lop3 LUT 0xE2: (a & sel) | (c & ~sel)
        return (a & sel) | (c & ~sel)

    pb = select(q, q >> np.uint32(6))
    pa = select((q << np.uint32(8)) & np.uint32(0xFFFFFFFF), (q << np.uint32(2)) & np.uint32(0xFFFFFFFF))
    sh4 = lambda v: (v << np.uint32(4)) & np.uint32(0xFFFFFFFF)  # noqa: E731
    return [sh4(pa) & m, pa & m, sh4(pb) & m, pb & m]


# ---- references (any device) ---------------------------------------------------------------------------
def dequant_weight(w_packed, scale_codes, global_scale) -> torch.Tensor:
    """float64 [N, K]: e2m1 * e4m3(scale) * global, as fp8lab.scaling.dequantize."""
    from fp8lab.scaling import unpack_nibbles

    v = reference_values.decode("e2m1", unpack_nibbles(_cuda.byte_codes(w_packed, "w_packed", "packed E2M1 nibbles")))
    s = decode_e4m3(_cuda.byte_codes(scale_codes, "scale_codes", "E4M3 scale codes")).repeat_interleave(16, dim=1)
    g = global_scale.double().reshape(()) if isinstance(global_scale, torch.Tensor) else float(global_scale)
    return v * s * g


def reference(x, w_packed, scale_codes, global_scale) -> torch.Tensor:
    return x.double() @ dequant_weight(w_packed, scale_codes, global_scale).to(x.device).T


def random_nvfp4(N: int, K: int, device="cuda", generator=None):
    """Uniform random nibbles (all 16 codes) and finite E4M3 scale codes in [2**-9, 448]: every path exercised."""
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.int32, device=device, generator=generator).to(torch.uint8)
    sc = torch.randint(1, 0x7F, (N, K // 16), dtype=torch.int32, device=device, generator=generator).to(torch.uint8)
    return packed, sc
