// ptx_sm120a.cuh -- the Blackwell low-precision instructions the GB10-native kernels use (sm_120a / sm_121a, the
// E2M1 conversions also sm_100a). Only the sources that sources.py builds for those arch-specific targets include
// this header; ptxas refuses every instruction here for sm_89, sm_90a and for the plain (non-`a`) sm_120 / sm_121
// targets ("Instruction 'cvt with .e2m1x2' not supported on .target 'sm_121'"), and the block-scaled MMA for
// sm_100a too (B200 has tcgen05 instead). tests/test_kernels_sass.py proves each refusal by compiling.
//
// Semantics, and where they come from (no GB10 was available: these are read, not measured):
//   * cvt.rn.satfinite.e2m1x2.f32 d, a, b -- two fp32 -> two E2M1 nibbles, `a` in the HIGH nibble, `b` in the LOW;
//     round to nearest even; |x| > 6 and +-Inf -> +-6; a NaN input -> +6 (0x7). Source: CUDA 13.0's cuda_fp4.hpp,
//     whose __nv_cvt_float2_to_fp4x2 issues this instruction with (x.y, x.x) and whose software path (used where
//     the instruction does not exist, the same answer by design) rounds to nearest even, saturates, and maps NaN to
//     positive MAXNORM. The lab's policy (fp8lab.formats.E2M1.encode) maps NaN to 0 instead: the callers below
//     canonicalize NaN; the quantizer never feeds NaN to it (a NaN block gets the NaN scale code and codes 0).
//   * cvt.rn.f16x2.e2m1x2 d, b8 -- two nibbles -> two exact f16, the LOW nibble into the LOW half (cuda_fp4.hpp,
//     __nv_cvt_fp4x2_to_halfraw2).
//   * mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3
//     D = (A * scale_A)(B * scale_B) + C, scale_A M x 4 and scale_B 4 x N: one UE4M3 scale per 16 elements of K,
//     i.e. NVFP4's block scale, consumed by the tensor core itself (PTX ISA 9.0, "Block Scaling for mma.sync").
//     Fragments (CUTLASS include/cute/atom/mma_traits_sm120.hpp, SM120_16x8x64_TN_VS ALayout/BLayout/SFALayout/
//     SFBLayout; the same A/B layout as PTX's m16n8k64 for 4-bit integers), lane = 4 g + t:
//       a0: row g,   k 8t .. 8t+7 (8 nibbles, element k at bits 4(k - 8t))   a1: row g + 8, same k
//       a2: row g,   k 32 + 8t .. 32 + 8t + 7                                a3: row g + 8, same k
//       b0: col g,   k 8t .. 8t+7                                           b1: col g, k 32 + 8t ..
//       c/d: c0, c1 -> (row g, cols 2t, 2t+1); c2, c3 -> (row g + 8, same cols)
//       scale-a-data: a b32 whose byte j is the scale of k-block j (k 16j .. 16j+15) of row g + 8 (lane & 1),
//                     read from lanes 4g + 2 tid_a and 4g + 2 tid_a + 1; scale-b-data: byte j = k-block j of
//                     col g, read from lane 4g + tid_b. With scale_vec::4X, byte-id must be 0 and thread-id-a is
//                     0..1, thread-id-b 0..3 (ptxas 13.0 says so when given anything else). The kernels put the
//                     values in every lane of the quad, so any thread-id would do; they pass 0.
//     Packed NVFP4 rows (element 2i in the LOW nibble of byte i, scaling.pack_nibbles) are exactly these words:
//     a 32-bit load of 8 consecutive elements is a fragment register, no nibble shuffling.
#pragma once

#include "ptx.cuh"

// Two fp32 -> one byte of two E2M1 codes, `lo` in bits 0..3 (element 2i of a packed row), `hi` in bits 4..7.
// NaN inputs give +6 here (the hardware's choice); callers that can see NaN canonicalize it.
__device__ __forceinline__ u32 e2m1x2_cvt(float lo, float hi) {
    u16 r;
    asm("{ .reg .b8 t; cvt.rn.satfinite.e2m1x2.f32 t, %1, %2; mov.b16 %0, {t, 0}; }" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// One byte of two E2M1 codes (bits 0..7 of `byte`) -> f16x2, exact: the low nibble's value in the low half.
__device__ __forceinline__ u32 e2m1x2_to_f16x2(u32 byte) {
    u32 d;
    asm("{ .reg .b16 s; .reg .b8 t, z; cvt.u16.u32 s, %1; mov.b16 {t, z}, s; cvt.rn.f16x2.e2m1x2 %0, t; }"
        : "=r"(d) : "r"(byte));
    return d;
}

// The native NVFP4 tensor-core MMA (SASS OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X): d += (A * sfa)(B * sfb) over
// k 0..63 of this fragment. sfa / sfb: four UE4M3 scale codes each (byte j = k-block j), laid out as above.
__device__ __forceinline__ void mma_nvf4_16864(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1, u32 sfa, u32 sfb) {
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {0, 0}, %11, {0, 0};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(sfa), "r"(sfb));
}
