// Shared device helpers for quant.cu and nvfp4.cu: bf16 unpacking, NaN-aware maxima, and the FP8 / E2M1
// conversions (software and hardware), each bit-exact against fp8lab.formats (RNE, saturating).
//
// Plain NVRTC code: no host code, no CUDA headers; bf16 and fp8 are handled as raw uint16 / uint8 bits.
// Built without fast math (fp8lab/kernels/_cuda.py), so `/` would be the IEEE division; but CuPy adds
// -ftz=true to every compile, which flushes subnormals. The bit-exact contract needs them, so every float
// operation whose inputs or result can be subnormal goes through the f_* helpers below (PTX without .ftz).
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned long long u64;

#define F32_INF_BITS 0x7F800000u

// ---- bf16 <-> fp32 -----------------------------------------------------------------------------------
// bf16 is the top half of an fp32: widening is exact (a shift), which is why bf16 inputs need no rounding.
__device__ __forceinline__ float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(u32 w) { return __uint_as_float(w & 0xFFFF0000u); }

// fp32 -> bf16 round-to-nearest-even (the same bit trick as formats.bf16_round; NaN stays a quiet NaN).
__device__ __forceinline__ u32 f32_to_bf16_bits(float f) {
    u32 b = __float_as_uint(f);
    if ((b & 0x7FFFFFFFu) > F32_INF_BITS) return (b | 0x00400000u) >> 16;
    return (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
}

// ---- fp32 arithmetic that never flushes subnormals -------------------------------------------------------
// CuPy appends -ftz=true to every NVRTC compile (cupy/cuda/compiler.py, _compile_with_cache_cuda), so plain
// C++ float arithmetic here would flush subnormal inputs and results to zero; the CPU reference does not.
// These are single PTX instructions without .ftz: IEEE semantics whatever the compile flags (and `.rn` on
// mul/add also forbids contraction into an FMA). Each compiles to the one SASS instruction one expects.
__device__ __forceinline__ float f_mul(float a, float b) { float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float f_add(float a, float b) { float r; asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float f_fma(float a, float b, float c) {
    float r; asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c)); return r;
}
__device__ __forceinline__ float f_sub(float a, float b) { float r; asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
// Unary minus in C++ becomes neg.ftz.f32 under -ftz=true: an extra FADD.FTZ that also flushes subnormals.
// neg.f32 without .ftz is exact, and ptxas folds it into the consuming FFMA as a free operand modifier.
__device__ __forceinline__ float f_neg(float a) { float r; asm("neg.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
__device__ __forceinline__ float f_div(float a, float b) { float r; asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float f_rcp(float a) { float r; asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
__device__ __forceinline__ float f_abs(float x) { return __uint_as_float(__float_as_uint(x) & 0x7FFFFFFFu); }
// s > 0 exactly (subnormals count as positive, NaN does not): the reference's `scale > 0` test.
__device__ __forceinline__ bool f_pos(float s) { return (__float_as_uint(s) - 1u) < F32_INF_BITS; }

// Two fp32 -> bf16 RNE in one instruction (F2FP.BF16.F32.PACK_AB): `lo` in the low half. Same bits as
// f32_to_bf16_bits for every non-NaN input (NaN becomes the canonical 0x7FFF).
__device__ __forceinline__ u32 bf16x2_rn(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// ---- maxima -------------------------------------------------------------------------------------------
// max(m, |x|) that PROPAGATES NaN (PTX max.NaN, sm_80+). The fast path uses it: one instruction per
// element, and a group whose max comes out NaN or Inf is then redone on the careful (slow) path.
__device__ __forceinline__ float absmax_nan(float m, float x) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(f_abs(x)));
    return r;
}
// The amax of the contract's "propagate" policy: NaN and Inf are ignored (count as 0). Integer max on the
// bits (non-negative floats order like their bit patterns), so subnormals are never flushed.
__device__ __forceinline__ float absmax_finite(float m, float x) {
    u32 a = __float_as_uint(x) & 0x7FFFFFFFu;
    a = a < F32_INF_BITS ? a : 0u;
    return __uint_as_float(max(__float_as_uint(m), a));
}
__device__ __forceinline__ float max_nonneg(float a, float b) { return __uint_as_float(max(__float_as_uint(a), __float_as_uint(b))); }

__device__ __forceinline__ float shfl_max_nan(float v, int width) {
    // xor-butterfly over `width` lanes (a power of two <= 32, groups aligned within the warp)
    for (int o = width >> 1; o > 0; o >>= 1) v = absmax_nan(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}
__device__ __forceinline__ float shfl_max_finite(float v, int width) {
    for (int o = width >> 1; o > 0; o >>= 1) v = max_nonneg(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

// ---- division by a per-group scale without a division per element -------------------------------------
// The contract divides every element by its group's scale (IEEE x / s). CUDA's `/` costs a MUFU.RCP, five
// FFMA, an FCHK and a branch PER ELEMENT. Here the reciprocal y = RN(1/s) is computed once per group
// (__frcp_rn, IEEE-exact) and each element takes five FFMA and no branch:
//     q0 = RN(x*y)                 within 1.5 ulp of x/s
//     q1 = RN(q0 - RN(s*q0 - x)*y)  faithful (within 1 ulp): the correction's own error is ~2**-23 ulp
//     q2 = RN(q1 - (s*q1 - x)*y)    = RN(x/s) by Markstein's theorem (y within 1/2 ulp of 1/s, q1 faithful,
//                                    the remainder s*q1 - x exact in an FMA)
// Valid while nothing under/overflows. The callers take this path only for finite x and 2**-69 <= s <= 2**120
// (a group amax >= 2**-60); there the remainder x - s*q can only be subnormal, hence inexact, for |x| < 2**-102,
// i.e. |x/s| < 2**-33: far below 2**-17, the smallest rounding boundary of any target format, so such a
// quotient becomes a signed zero code whichever neighbour the division returns (and its sign is always right).
// Other groups use the IEEE division (f_div).
// Signed zeros: the correction is written q - (s*q - x)*y, not q + (x - s*q)*y. For x = -0 (q = -0) the
// residual x - s*q is (-0) - (-0) = +0 and q + (+0)*y = +0 would lose the sign; s*q - x = (-0) + (+0) = +0,
// and q - (+0)*y = (-0) + (-0) = -0 keeps it. (The negations are free FFMA operand modifiers.)
__device__ __forceinline__ float div_by_scale(float x, float s, float y) {
    const float nx = f_neg(x);
    float q = f_mul(x, y);
    q = f_fma(f_neg(f_fma(s, q, nx)), y, q);
    return f_fma(f_neg(f_fma(s, q, nx)), y, q);
}

// n / d for 0 <= n < 2**31 by a multiply (the product stays below 2**64): m = ceil(2**(32+l) / d), l = ceil(log2 d) (host: quant.py fastdiv()).
__device__ __forceinline__ u32 fastdiv(u32 n, unsigned long long m, int l) {
    return u32(((unsigned long long)n * m) >> (32 + l));
}

// ---- FP8 encode: software --------------------------------------------------------------------------
// Format parameters: mantissa bits MB, bias B, the bit pattern of fmt.max (saturation), the NaN code.
//   E4M3: MB=3, B=7,  max 448   = 0x43E00000, NaN 0x7F, min normal 2**-6
//   E5M2: MB=2, B=15, max 57344 = 0x47600000, NaN 0x7E, min normal 2**-14
// Normal range: RNE on the fp32 bits (add 0x7FFFF..+lsb, drop the low bits), the exponent re-bias folded
// into the same add. Subnormal range: adding a power of two C whose ulp is the format's smallest step
// (2**-9 for E4M3 -> C = 2**14) makes the FPU's own RNE do the rounding; bits(a + C) - bits(C) is the code.
//   E4M3: 1.0 (0x3F800000) -> (0x3F800000 + 0x7FFFF + 0 - (120 << 23)) >> 20 = 0x38
//         3e-3 -> 3e-3 + 16384 rounds to 16384 + 2*2**-9 -> code 0x02 (value 2**-8 = 0.0039)
template <int MB, int B>
__device__ __forceinline__ u32 fp8_round_mag(u32 a) {
    const u32 lsb = (a >> (23 - MB)) & 1u;
    const u32 n = (a + ((1u << (22 - MB)) - 1u) + lsb - (u32(127 - B) << 23)) >> (23 - MB);
    const float C = __uint_as_float(u32(127 + 23 + 1 - B - MB) << 23);  // 2**(24 - B - MB)
    const u32 s = __float_as_uint(f_add(__uint_as_float(a), C)) - __float_as_uint(C);
    return a < (u32(127 + 1 - B) << 23) ? s : n;  // below the smallest normal: the subnormal result
}

// Full conversion (any fp32): NaN -> NaN code, +-Inf and overflow saturate to +-max (formats.encode(saturate=True)).
template <int MB, int B, u32 MAXBITS, u32 NANCODE>
__device__ __forceinline__ u32 fp8_encode_sw(float q) {
    const u32 b = __float_as_uint(q);
    const u32 a = b & 0x7FFFFFFFu;
    const u32 code = fp8_round_mag<MB, B>(min(a, MAXBITS)) | ((b >> 24) & 0x80u);
    return a > F32_INF_BITS ? NANCODE : code;
}
// Fast-path conversion: the caller guarantees q is finite and |q| <= max * (1 + 2**-22) (q = x / (amax/max)),
// which always rounds to <= max: no saturation and no NaN test needed.
template <int MB, int B>
__device__ __forceinline__ u32 fp8_encode_sw_fast(float q) {
    const u32 b = __float_as_uint(q);
    return fp8_round_mag<MB, B>(b & 0x7FFFFFFFu) | ((b >> 24) & 0x80u);
}

#define E4M3_MAXBITS 0x43E00000u
#define E5M2_MAXBITS 0x47600000u
__device__ __forceinline__ u32 e4m3_encode_sw(float q) { return fp8_encode_sw<3, 7, E4M3_MAXBITS, 0x7Fu>(q); }
__device__ __forceinline__ u32 e5m2_encode_sw(float q) { return fp8_encode_sw<2, 15, E5M2_MAXBITS, 0x7Eu>(q); }

// ---- fast-path conversions that let the FPU do the rounding (fewer integer-pipe instructions) -------------
// Adding M = 1.5 * 2**k to |q| makes the FPU round |q| to a multiple of ulp(M) = 2**(k-23) (RNE, exact), and
// subtracting M gives the rounded value r. Choosing k from |q|'s binade (2**E from the exponent bits, floored at
// the smallest normal) makes ulp(M) the format's step in that binade, subnormals included. Then r * 2**-(127-B)
// holds the code's bits exactly where fp32 keeps exponent and mantissa (fp32 subnormals = the format's
// subnormals), so a shift finishes the job. Integer-pipe work: one LOP3 and a shift; the rest is FMA pipe.
//   E4M3, q = 0.3: 2**E = 0.25, M = 0.25 * 1.5 * 2**20 = 393216 (ulp 2**-5), r = 0.3125 = 10 * 2**-5,
//   r * 2**-120 = 1.25 * 2**-122 -> bits 0x02A00000 -> >> 20 = 0x2A (E4M3 0.3125)
// Valid for finite |q| <= fmt.max * (1 + 2**-20) (the fast paths guarantee it; the GPU test checks every such
// fp32 input). Returns the code's 7 magnitude bits in bits 24..30 and q's sign in bit 31: the code is byte 3.
template <int MB, int B>
__device__ __forceinline__ u32 fp8_code_fpu_b3(float q) {
    const float a = f_abs(q);
    const float minn = __uint_as_float(u32(127 + 1 - B) << 23);
    const float e = __uint_as_float(__float_as_uint(fmaxf(a, minn)) & 0x7F800000u);  // 2**E, E >= 1 - B
    const float M = f_mul(e, __uint_as_float(u32(127 + 23 - MB) << 23 | 0x400000u)); // * 1.5 * 2**(23-MB)
    const float r = f_sub(f_add(a, M), M);
    const u32 R = __float_as_uint(f_mul(r, __uint_as_float(u32(B) << 23)));          // * 2**-(127-B)
    return (R << (MB + 1)) | (__float_as_uint(q) & 0x80000000u);
}
// byte 3 of four words -> one word (code i in byte i): three PRMTs
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) { u32 r; asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel)); return r; }
__device__ __forceinline__ u32 gather_b3(u32 c0, u32 c1, u32 c2, u32 c3) {
    return prmt(prmt(c0, c1, 0x0073u), prmt(c2, c3, 0x0073u), 0x5410u);
}

// E2M1, same idea: |q| clamped to 6 (saturation), E = exponent of max(|q|, 1) (step 0.5 below 2, 1 in [2, 4),
// 2 in [4, 8)), M = 2**E * 1.5 * 2**22, r = (|q| + M) - M, r * 2**-126 = magnitude code << 22. Any finite q.
__device__ __forceinline__ u32 e2m1_mag_fpu22(float q) {
    const float a = fminf(f_abs(q), 6.0f);
    const float e = __uint_as_float(__float_as_uint(fmaxf(a, 1.0f)) & 0x7F800000u);
    const float M = f_mul(e, 0x1.8p22f);
    const float r = f_sub(f_add(a, M), M);
    return __float_as_uint(f_mul(r, 0x1p-126f));
}
// The sign bits of eight values into nibble sign positions (bit 4e + 3 for value e), with PRMT's
// sign-replicating byte select (selector nibble 0xB / 0xF: byte 3 of a / b, msb replicated over the byte).
__device__ __forceinline__ u32 sign_nibbles8(const float* q) {
    const u32 even = prmt(prmt(__float_as_uint(q[0]), __float_as_uint(q[2]), 0x00FBu),
                          prmt(__float_as_uint(q[4]), __float_as_uint(q[6]), 0x00FBu), 0x5410u);
    const u32 odd = prmt(prmt(__float_as_uint(q[1]), __float_as_uint(q[3]), 0x00FBu),
                         prmt(__float_as_uint(q[5]), __float_as_uint(q[7]), 0x00FBu), 0x5410u);
    return (even & 0x08080808u) | (odd & 0x80808080u);
}

// ---- FP8 encode: hardware (sm_89+) ---------------------------------------------------------------------
// cvt.rn.satfinite.{e4m3,e5m2}x2.f32 d, a, b: converts two floats at once, `a` into the HIGH byte of d and
// `b` into the LOW byte; satfinite clamps overflow (and Inf) to +-max. NaN inputs are canonicalized to the
// contract's NaN code by the callers (the raw hardware NaN byte is recorded by the exhaustive check kernel).
__device__ __forceinline__ u32 e4m3x2_hw(float hi, float lo) {
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ u32 e5m2x2_hw(float hi, float lo) {
    u16 r;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// ---- FP8 decode (exact): put the code's bits where fp32 keeps them, then rescale by a power of two. ----
// E4M3 code c (sign s, 7 magnitude bits m): as fp32 bits (s << 31) | (m << 20) the value is m's E4M3 value
// times 2**-120, INCLUDING subnormals (fp32 subnormals have the same shape); one exact multiply by 2**120.
//   0x38 -> bits 0x03800000 = 2**-120 -> * 2**120 = 1.0 ;  0x01 -> bits 0x00100000 = 2**-129 -> 2**-9
__device__ __forceinline__ float e4m3_decode(u32 c) {
    const u32 m = c & 0x7Fu;
    const float v = f_mul(__uint_as_float(((c & 0x80u) << 24) | (m << 20)), 0x1p120f);
    return m == 0x7Fu ? __uint_as_float(0x7FC00000u) : v;
}
__device__ __forceinline__ float e5m2_decode(u32 c) {  // E5M2: bias 15 -> factor 2**112; exp 31 = Inf/NaN
    const u32 m = c & 0x7Fu;
    const float v = f_mul(__uint_as_float(((c & 0x80u) << 24) | (m << 21)), 0x1p112f);
    if (m > 0x7Cu) return __uint_as_float(0x7FC00000u);
    return m == 0x7Cu ? __uint_as_float(((c & 0x80u) << 24) | F32_INF_BITS) : v;
}
// E2M1 code (sign bit 3, 3 magnitude bits): bits (m << 22) are the value times 2**-126.
//   0x1 -> 2**-127 -> 0.5 ;  0x7 -> 1.5 * 2**-124 -> 6.0 ;  0xA -> -1.0
__device__ __forceinline__ float e2m1_decode(u32 c) {
    return f_mul(__uint_as_float(((c & 0x8u) << 28) | ((c & 0x7u) << 22)), 0x1p126f);
}

// ---- E2M1 encode: three software versions (sm_90 has no E2M1 conversion instruction) -----------------
// All three are bit-identical to formats.E2M1.encode(saturate=True): RNE, +-Inf and overflow -> +-6,
// NaN -> 0 (E2M1 has no NaN), -0.0 and small negatives -> 0x8.
//
// (1) branchless: seed 002's seven compares on the magnitude bits, with `>` at the four midpoints whose
//     LOWER neighbour has the even code (0.25, 1.25, 2.5, 5.0) and `>=` where the upper one is even (the seed's
//     all-`>=` version rounds those four ties away from zero). The seven predicates are summed.
__device__ __forceinline__ u32 e2m1_branchless(float x) {
    const u32 b = __float_as_uint(x), a = b & 0x7FFFFFFFu;
    u32 idx = (a > 0x3E800000u) + (a >= 0x3F400000u) + (a > 0x3FA00000u) + (a >= 0x3FE00000u)
            + (a > 0x40200000u) + (a >= 0x40600000u) + (a > 0x40A00000u);
    idx |= (b >> 28) & 0x8u;
    return a > F32_INF_BITS ? 0u : idx;
}
// (2) branchy: the naive if/else chain a first version would write (float compares, same tie rules).
__device__ __forceinline__ u32 e2m1_branchy(float x) {
    const float a = f_abs(x);
    u32 idx;
    if (a != a) return 0u;                 // NaN
    if (a <= 0.25f) idx = 0;
    else if (a < 0.75f) idx = 1;
    else if (a <= 1.25f) idx = 2;
    else if (a < 1.75f) idx = 3;
    else if (a <= 2.5f) idx = 4;
    else if (a < 3.5f) idx = 5;
    else if (a <= 5.0f) idx = 6;
    else idx = 7;
    return idx | ((__float_as_uint(x) >> 28) & 0x8u);
}
// (3) bits: the FP8 method above with one mantissa bit: RNE on the bits for |x| >= 1 (E2M1 normals),
//     the FPU's own RNE through a magic add (C = 2**22, ulp 0.5) for |x| < 1. Saturation first (min with 6).
//     2.5 -> (0x40200000 + 0x1FFFFF + 0) >> 22 = 0x100 -> minus 0xFC (126 << 1) = 4 (2.0, the even neighbour)
// Fast-path forms (the caller guarantees a finite x): magnitude code 0..7 only, sign handled by the caller.
__device__ __forceinline__ u32 e2m1_mag_branchless(float x) {
    const u32 a = __float_as_uint(x) & 0x7FFFFFFFu;
    return (a > 0x3E800000u) + (a >= 0x3F400000u) + (a > 0x3FA00000u) + (a >= 0x3FE00000u)
         + (a > 0x40200000u) + (a >= 0x40600000u) + (a > 0x40A00000u);
}
__device__ __forceinline__ u32 e2m1_mag_branchy(float x) {
    const float a = f_abs(x);
    if (a <= 0.25f) return 0;
    if (a < 0.75f) return 1;
    if (a <= 1.25f) return 2;
    if (a < 1.75f) return 3;
    if (a <= 2.5f) return 4;
    if (a < 3.5f) return 5;
    if (a <= 5.0f) return 6;
    return 7;
}
__device__ __forceinline__ u32 e2m1_mag_bits(float x) {
    const u32 a = min(__float_as_uint(x) & 0x7FFFFFFFu, 0x40C00000u);  // |x| clamped to 6.0 (saturation)
    const u32 n = (a + 0x1FFFFFu + ((a >> 22) & 1u) - (126u << 23)) >> 22;
    const u32 s = __float_as_uint(f_add(__uint_as_float(a), 0x1p22f)) - 0x4A800000u;
    return a < 0x3F800000u ? s : n;
}
__device__ __forceinline__ u32 e2m1_bits(float x) {
    const u32 b = __float_as_uint(x);
    const u32 a = min(b & 0x7FFFFFFFu, 0x40C00000u);  // |x| clamped to 6.0 (Inf too; NaN handled below)
    const u32 n = (a + 0x1FFFFFu + ((a >> 22) & 1u) - (126u << 23)) >> 22;
    const u32 s = __float_as_uint(f_add(__uint_as_float(a), 0x1p22f)) - 0x4A800000u;
    const u32 idx = (a < 0x3F800000u ? s : n) | ((b >> 28) & 0x8u);
    return (b & 0x7FFFFFFFu) > F32_INF_BITS ? 0u : idx;
}
