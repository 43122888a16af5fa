// fp8_decode.cuh -- widening E4M3 / E5M2 / E2M1 codes to fp32, bf16 and f16, exactly, in registers.
//
// One idea throughout: a small float's exponent and mantissa bits, slid into place inside a wider float,
// ARE the value times a power of two, subnormals included (the wider format's subnormals have the same
// shape). One exact multiply by that power of two (or none, where the factor is folded into a scale)
// finishes the conversion. The shifts follow from the formats' man_bits and bias (formats.cuh defines).
//   E4M3 0x38 (1.0) as fp32 bits 0x38 << 20 = 0x03800000 = 2**-120;  * 2**120 = 1.0
//   E4M3 0x01 (2**-9) -> fp32 bits 0x00100000 = 2**-129 (an fp32 subnormal);  * 2**120 = 2**-9
#pragma once

#include "ptx.cuh"

#define FP8LAB_F32_QNAN 0x7FC00000u

// ---- to fp32 (exact; the quantization kernels' dequantize) --------------------------------------------
// f_mul: IEEE multiply without .ftz (CuPy compiles with -ftz=true, which would flush the subnormal values).

template <int MB, int B>
__device__ __forceinline__ float small_float_decode(u32 sign31, u32 mag) {  // sign31: the sign at bit 31; mag: exp|man bits
    return f_mul(__uint_as_float(sign31 | (mag << (23 - MB))), __uint_as_float(FP8LAB_POW2_BITS(127 - B)));
}
__device__ __forceinline__ float e4m3_decode(u32 c) {  // NaN code (S.1111.111) -> NaN
    const u32 m = c & 0x7Fu;
    const float v = small_float_decode<FP8LAB_E4M3_MAN_BITS, FP8LAB_E4M3_BIAS>((c & 0x80u) << 24, m);
    return m == FP8LAB_E4M3_NAN_CODE ? __uint_as_float(FP8LAB_F32_QNAN) : v;
}
__device__ __forceinline__ float e5m2_decode(u32 c) {  // exponent 31: Inf (mantissa 0) or NaN
    const u32 m = c & 0x7Fu;
    const float v = small_float_decode<FP8LAB_E5M2_MAN_BITS, FP8LAB_E5M2_BIAS>((c & 0x80u) << 24, m);
    if (m > 0x7Cu) return __uint_as_float(FP8LAB_F32_QNAN);
    return m == 0x7Cu ? __uint_as_float(((c & 0x80u) << 24) | F32_INF_BITS) : v;
}
// E2M1 code (sign bit 3, 3 magnitude bits):  0x1 -> 0.5 ;  0x7 -> 6.0 ;  0xA -> -1.0
__device__ __forceinline__ float e2m1_decode(u32 c) {
    return small_float_decode<FP8LAB_E2M1_MAN_BITS, FP8LAB_E2M1_BIAS>((c & 0x8u) << 28, c & 0x7u);
}

// ---- E4M3 -> bf16x2, four at a time (the GEMV and GEMM inner loops) -------------------------------------------
// bytes [b3 b2 b1 b0] -> bf16x2 (b0, b2) and (b1, b3), exact values. b1 and b3 already sit in bits 15:8 / 31:24:
// the sign stays, the 7 value bits move down 4 places (bf16 has 7 mantissa bits, E4M3 3); b0 and b2 the same
// after moving up one byte. That is the value times 2**-(127 - bias) in bf16; one bf16x2 multiply by
// 2**(127 - bias) (exact: a power of two, |value| <= 448 cannot overflow) restores it.
// NaN codes (0x7F/0xFF) widen to +-480: the GEMV/GEMM kernels assume finite weights.
static_assert(FP8LAB_E4M3_EXP_BITS + FP8LAB_E4M3_MAN_BITS == 7 && FP8LAB_E4M3_MAN_BITS == 3,
              "the bit moves below place E4M3's 7 value bits into bf16's low exponent and top mantissa bits");
#define FP8LAB_BF16X2_E4M3_UNBIAS (((u32)(254 - FP8LAB_E4M3_BIAS) << 7) * 0x10001u)  // bf16 2**120 in both halves
__device__ __forceinline__ void e4m3x4_to_bf16(u32 q, u32& p02, u32& p13) {
    const u32 hi = (q & 0x80008000u) | ((q >> 4) & 0x07F007F0u);
    const u32 lo = ((q << 8) & 0x80008000u) | ((q << 4) & 0x07F007F0u);
    p02 = bf16x2_mul(lo, FP8LAB_BF16X2_E4M3_UNBIAS);
    p13 = bf16x2_mul(hi, FP8LAB_BF16X2_E4M3_UNBIAS);
}

// ---- E4M3 -> f16x2 (the attention kernel) ----------------------------------------------------------------------
// The sm_89+ instruction: two codes (byte 0 -> low half, byte 1 -> high half) per cvt, exact, NaN stays NaN.
__device__ __forceinline__ u32 e4m3x2_to_f16x2(u32 w16) {
    u32 d;
    u16 h = (u16)w16;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(h));
    return d;
}
// Marlin / FlashInfer's bit move: the 7 value bits shifted into f16 (5 exponent bits, bias 15) give
// value * 2**-8 for every code; the caller folds the 2**8 into its scales. NaN codes give +-480 (* 2**-8).
// Bytes 1 and 3 of y (the high byte of each half) -> f16x2 (byte1 low, byte3 high):
__device__ __forceinline__ u32 e4m3x2_odd_to_f16x2_2m8(u32 y) { return (y & 0x80008000u) | ((y >> 1) & 0x3F803F80u); }
// Bytes 0 and 2 -> f16x2 (byte0 low, byte2 high):
__device__ __forceinline__ u32 e4m3x2_even_to_f16x2_2m8(u32 y) { return ((y << 8) & 0x80008000u) | ((y << 7) & 0x3F803F80u); }

// ---- E2M1 nibbles and E4M3 block scales -> bf16 (the NVFP4 GEMV) ------------------------------------------------
// A nibble's sign goes to bf16 bit 15, its 3 value bits to bits 8:6 (the low end of bf16's exponent and the top of
// its mantissa): the E2M1 value times 2**-126 (bf16 subnormal for 0.5).
static_assert(FP8LAB_E2M1_EXP_BITS == 2 && FP8LAB_E2M1_MAN_BITS == 1 && FP8LAB_E2M1_BIAS == 1,
              "the nibble moves below assume E2M1's layout");
// Version 1: the pair (nibble I, nibble I+4) of word q as one bf16x2, two shifted copies and two masks.
template <int I>
__device__ __forceinline__ u32 e2m1_pair(u32 q) {
    constexpr int sgn = 12 - 4 * I;  // sign bit 4i+3 -> 15
    constexpr int mag = 6 - 4 * I;   // value bits 4i+2..4i -> 8..6
    u32 s = (sgn >= 0 ? (q << sgn) : (q >> -sgn)) & 0x80008000u;
    u32 m = (mag >= 0 ? (q << mag) : (q >> -mag)) & 0x01C001C0u;
    return s | m;
}
// (a & 0x88008800) | (c & ~0x88008800) in ONE lop3 (LUT 0xE2 = a&b | c&~b). Written out in PTX:
// from plain C, ptxas masks the shifted operand first and spends two.
__device__ __forceinline__ u32 select_8800(u32 a, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, 0x88008800, %2, 0xE2;" : "=r"(d) : "r"(a), "r"(c));
    return d;
}
// Version 2: the eight nibbles of q as four bf16x2, p[i] = (nibble i, nibble i+4), 11 integer ops: a select
// builds a word in which each wanted nibble's sign sits exactly 7 bits above its value bits, two pairs at once;
// each pair then needs one shift (or none) and one AND with 0x81C081C0 (gemv_nvfp4.cu says more).
__device__ __forceinline__ void e2m1x8_to_bf16(u32 q, u32 (&p)[4]) {
    constexpr u32 M = 0x81C081C0u;
    const u32 pb = select_8800(q, q >> 6);
    const u32 pa = select_8800(q << 8, q << 2);
    p[0] = (pa << 4) & M;
    p[1] = pa & M;
    p[2] = (pb << 4) & M;
    p[3] = pb & M;
}
// The bf16 scale that turns (E2M1 value * 2**-126) into (E2M1 * E4M3 scale) * 2**-8, EXACTLY: 2**118 (2**(126 - 8))
// times the E4M3 value; e2m1 (2 significant bits) times e4m3 (4) has <= 5 significant bits and stays normal.
#define FP8LAB_E2M1_GEMV_SHIFT 8
// Version 1, in fp32 (ftz: the E4M3 subnormal scale codes 1..7 flush to 0 under CuPy's -ftz=true):
__device__ __forceinline__ u32 scale_bf16x2(u32 b) {
    float f = __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7Fu) << (23 - FP8LAB_E4M3_MAN_BITS)));  // e4m3 * 2**-120
    f = f * __uint_as_float(FP8LAB_POW2_BITS(127 - FP8LAB_E4M3_BIAS));                             // the e4m3 value
    f = f * __uint_as_float(FP8LAB_POW2_BITS(126 - FP8LAB_E2M1_GEMV_SHIFT));                        // <= 448 * 2**118
    if ((b & 0x7Fu) == FP8LAB_E4M3_NAN_CODE) f = __int_as_float(0x7FC00000);
    u32 h = f32_to_bf16(f);
    return h | (h << 16);
}
// Version 2: two codes (low byte = first block) by the hardware cvt.rn.f16x2.e4m3x2 (exact, subnormals and NaN
// kept), f16 -> f32 -> bf16x2, one bf16x2 multiply by 2**118: 2.5 ops per scale instead of ~9.
__device__ __forceinline__ u32 scale2_bf16x2(u32 two_codes) {
    u32 h2;
    asm("{ .reg .b16 s; cvt.u16.u32 s, %1; cvt.rn.f16x2.e4m3x2 %0, s; }" : "=r"(h2) : "r"(two_codes));
    float lo, hi;
    asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }" : "=f"(lo), "=f"(hi) : "r"(h2));
    return bf16x2_mul(bf16x2_rn(lo, hi), ((u32)(127 + 126 - FP8LAB_E2M1_GEMV_SHIFT) << 7) * 0x10001u);  // x 2**118
}
// Low / high bf16 of a pair, broadcast to both halves (ptxas folds this into HMUL2's .H0_H0 / .H1_H1).
__device__ __forceinline__ u32 bcast_lo(u32 x) {
    u32 d;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {l, l}; }" : "=r"(d) : "r"(x));
    return d;
}
__device__ __forceinline__ u32 bcast_hi(u32 x) {
    u32 d;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {h, h}; }" : "=r"(d) : "r"(x));
    return d;
}
