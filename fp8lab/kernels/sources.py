"""Every `.cu` source of the package, what it needs from the compiler, and on which archs it builds.

    SOURCES["gemm_w8a8_wgmma.cu"].target(90)   -> "sm_90a"   # wgmma: the arch-specific target
    SOURCES["quant.cu"].target(121)            -> "sm_121"   # portable code: the plain target
    SOURCES["gemm_w8a8_wgmma.cu"].target(89)   -> ValueError (wgmma exists only on sm_90a)

A source declares `arch_specific`: the device archs (compute capability as an int, 90 for sm_90) for which it is
compiled with the `a` target (sm_90a, sm_120a, sm_121a), which unlocks that chip's own instructions (wgmma and
setmaxnreg on sm_90a; the block-scaled FP4 mma.sync and the E2M1 cvt on sm_120a/sm_121a) and runs only on
exactly that arch. `only` lists the archs it builds for at all (None: every listed arch), with the reason.
`defines` names the function ("module:function") that returns its instantiation lists as -D defines, so the
compiled configurations exist once, in Python. Adding a source (the GB10-native kernels, for instance) is one
entry here; load_module, the offline compiler and the SASS test pick it up.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

#: the device archs the lab compiles for: Ada (L40S, RTX 4090), Hopper (H100/H200), Blackwell GeForce/RTX PRO,
#: and the GB10 (DGX Spark). The lab's numbers come from sm_90 only.
ARCHS = (89, 90, 120, 121)
#: archs that have an `a` (arch-specific) target
HAS_A_TARGET = (90, 100, 101, 103, 110, 120, 121)
#: what `python -m fp8lab.kernels.sass --summary` tabulates: ARCHS and the B200's sm_100, which NVRTC 13.0 compiles
#: for too (no sm_100 test runs in CI: the summary shows it, notebook 09 reads it)
SUMMARY_ARCHS = (89, 90, 100, 120, 121)
#: archs with the hardware E2M1 conversions (cvt.rn.satfinite.e2m1x2.f32, cvt.rn.f16x2.e2m1x2), `a` target only
E2M1_CVT_ARCHS = (100, 120, 121)
#: the decode GEMV versions that share gemv_v3.py's packing, one .cu each (gemv_v3.cu, gemv_v4.cu, gemv_v5.cu); versions 1 and 2
#: are gemv_fp8.cu / gemv_nvfp4.cu
GEMV_PACKED_VERSIONS = (3, 4, 5)
#: archs with the block-scaled mma.sync (kind::mxf4nvf4 ... ue4m3 -> OMMA.SF): sm_120a / sm_121a only
MMA_NVF4_ARCHS = (120, 121)


@dataclass(frozen=True)
class Source:
    file: str
    arch_specific: frozenset = frozenset()
    only: frozenset | None = None
    why: str = ""
    defines: str | None = None
    key_kernels: tuple = field(default=())   # summarized per arch by `python -m fp8lab.kernels.sass --summary`

    def builds_for(self, cc: int) -> bool:
        return self.only is None or cc in self.only

    def target(self, cc: int) -> str:
        """The NVRTC --gpu-architecture value for a device of compute capability `cc` (90 -> 'sm_90' or 'sm_90a')."""
        if not self.builds_for(cc):
            raise ValueError(f"{self.file} does not build for sm_{cc}: {self.why}")
        return f"sm_{cc}" + ("a" if cc in self.arch_specific and cc in HAS_A_TARGET else "")

    def instantiation_defines(self) -> tuple[str, ...]:
        if self.defines is None:
            return ()
        mod, fn = self.defines.split(":")
        return tuple(getattr(importlib.import_module(mod), fn)())


SOURCES = {s.file: s for s in (
    Source("quant.cu", key_kernels=("quant_group_bf16_e4m3_hw", "quant_group_bf16_e4m3_sw", "quant_block_bf16_e4m3_hw",
                                    "dequant_e4m3_bf16")),
    Source("nvfp4.cu", key_kernels=("nvfp4_quant_bf16_bits_hw", "nvfp4_quant_bf16_branchless_sw",
                                    "nvfp4_quant_bf16_branchy_sw", "e2m1_chain_bits", "e2m1_chain_branchy")),
    Source("nvfp4_hw.cu", arch_specific=frozenset(E2M1_CVT_ARCHS), only=frozenset(E2M1_CVT_ARCHS),
           why="cvt.rn.satfinite.e2m1x2.f32 exists only on sm_100a / sm_120a / sm_121a (not sm_89, sm_90a, nor plain "
               "sm_120 / sm_121)",
           key_kernels=("nvfp4_quant_bf16_cvt_hw", "e2m1_chain_cvt")),
    Source("gemv_fp8.cu", defines="fp8lab.kernels.gemv_fp8:cuda_defines",
           key_kernels=("gemv_fp8_block_r1_nt1_pf0", "gemv_fp8_v2_block_r1_nt1_c2_d2")),
    Source("gemv_nvfp4.cu", defines="fp8lab.kernels.gemv_nvfp4:cuda_defines",
           key_kernels=("gemv_nvfp4_r1_nt1_pf0", "gemv_nvfp4_v2_r1_nt1_c2_d2", "gemv_nvfp4_v2_r1_nt1_c2_d0")),
    Source("gemv_v3.cu", defines="fp8lab.kernels.gemv_v3:cuda_defines",
           key_kernels=("gemv3_fp8c_r1_nt1_c2_p3_e0_n0", "gemv3_fp8b_r1_nt1_c2_p3_e0_n0", "gemv3_nvfp4_r1_nt1_c2_p3_e0_n0")),
    Source("gemv_v4.cu", only=frozenset({90, 100, 120, 121}), defines="fp8lab.kernels.gemv_v3:cuda_defines4",
           why="cp.async.bulk (the bulk copy engine) exists from sm_90 on; Ada (sm_89) has none",
           key_kernels=("gemv4_fp8c_r1_nt1_c2_d4_e0_n0", "gemv4_fp8b_r1_nt1_c2_d4_e0_n0", "gemv4_nvfp4_r1_nt1_c2_d4_e0_n0")),
    Source("gemv_v5.cu", only=frozenset({90, 100, 120, 121}), defines="fp8lab.kernels.gemv_v3:cuda_defines5",
           why="cp.async.bulk (the bulk copy engine) exists from sm_90 on; Ada (sm_89) has none",
           key_kernels=("gemv5_fp8c_r1_nt1_c4_d3_e0_n0", "gemv5_fp8b_r1_nt1_c4_d3_e0_n0", "gemv5_nvfp4_r1_nt1_c4_d3_e0_n0")),
    Source("gemv_v6.cu", arch_specific=frozenset({90}), only=frozenset({90}),
           why="FP8 wgmma (the weights multiplied from shared memory) exists only on sm_90a",
           defines="fp8lab.kernels.gemv_v6:cuda_defines", key_kernels=("gemv6_split", "gemv6_0_n8_m1_s4_x0", "gemv6_0_n8_m2_s4_x1")),
    Source("decode_layer.cu", key_kernels=("rmsnorm_bf16", "rope_append_fp8", "silu_mul_bf16", "add_bf16")),
    Source("gemv_nvfp4_hw.cu", arch_specific=frozenset(E2M1_CVT_ARCHS), only=frozenset(E2M1_CVT_ARCHS),
           why="cvt.rn.f16x2.e2m1x2 exists only on sm_100a / sm_120a / sm_121a",
           defines="fp8lab.kernels.gemv_nvfp4_hw:cuda_defines", key_kernels=("gemv_nvfp4_hw_r1_nt1_c2",)),
    Source("gemm_w8a8.cu", key_kernels=("w8a8_mma_fp8", "w8a8_mma_fp8_s3", "w8a8_mma_bf16")),
    Source("gemm_w4a4.cu", arch_specific=frozenset(MMA_NVF4_ARCHS), only=frozenset(MMA_NVF4_ARCHS),
           why="mma.sync kind::mxf4nvf4 block_scale (OMMA) exists only on sm_120a / sm_121a (sm_100a has tcgen05 instead)",
           key_kernels=("w4a4_omma",)),
    Source("gemm_w4a4_emu.cu", key_kernels=("w4a4_emu",)),
    Source("gemm_w8a8_wgmma.cu", arch_specific=frozenset({90}), only=frozenset({90}),
           why="wgmma and setmaxnreg exist only on sm_90a (Hopper); Blackwell has tcgen05 instead",
           key_kernels=("w8a8_wgmma", "w8a8_wgmma_ws")),
    Source("gemm_w8a8_tma.cu", arch_specific=frozenset({90}), only=frozenset({90}),
           why="wgmma, setmaxnreg and TMA multicast exist only on sm_90a (Hopper); Blackwell has tcgen05 instead",
           defines="fp8lab.kernels.gemm_w8a8:tma_cuda_defines",
           key_kernels=("w8a8_tma_n128_w1_s6_c1_e0", "w8a8_tma_n256_w2_s4_c2_e0")),
    Source("attention_fp8kv.cu", key_kernels=("decode_attn_fp8cvt_d128_g8_va", "decode_attn_fp8bit_d128_g8_va",
                                              "decode_attn_bf16_d128_g8_va")),
    Source("attention_decode_v2.cu", defines="fp8lab.kernels.attention_fp8kv:cuda_defines",
           key_kernels=("decode_v2_fp8cvt_d128_g8_n1_s3_r1_b4", "decode_v2_bf16_d128_g8_n1_s2_r1_b3")),
    Source("attention_decode_v3.cu", only=frozenset({90, 100, 120, 121}), defines="fp8lab.kernels.attention_fp8kv:cuda_defines_v3",
           why="cp.async.bulk (the bulk copy engine) exists from sm_90 on; Ada (sm_89) has none",
           key_kernels=("decode_v3_fp8cvt_d128_g8_s2_c1_b4", "decode_v3_bf16_d128_g8_s2_c1_b3")),
    Source("attention_nvfp4kv.cu", defines="fp8lab.kernels.attention_nvfp4kv:cuda_defines",
           key_kernels=("decode_v2_nvfp4_d128_g8_n1_s4_r1_b4",)),
    Source("attention_prefill.cu", defines="fp8lab.kernels.attention_prefill:cuda_defines",
           key_kernels=("prefill_bf16_d128_w4_p1", "prefill_fp8_d128_w4_p1")),
)}


def instances(define: str, macro: str, configs) -> str:
    """One instantiation list as a define: instances("X", "GEMV", {(2, 1), (1, 1)}) -> 'X=GEMV(1,1)GEMV(2,1)'."""
    return f"{define}=" + "".join(f"{macro}({','.join(map(str, c))})" for c in sorted(configs))


def get(filename: str) -> Source:
    try:
        return SOURCES[filename]
    except KeyError:
        raise KeyError(f"unknown kernel source {filename!r}; the package's sources: {', '.join(SOURCES)}") from None
