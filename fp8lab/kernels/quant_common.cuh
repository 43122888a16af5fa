// Shared device helpers for quant.cu and nvfp4.cu: NaN-aware maxima, division by a per-group scale, and the
// FP8 / E2M1 encoders (software and hardware), each bit-exact against fp8lab.formats (RNE, saturating).
//
// Plain NVRTC code: no host code, no CUDA headers; bf16 and fp8 are handled as raw uint16 / uint8 bits.
// Built without fast math (fp8lab/kernels/_cuda.py), so `/` would be the IEEE division; but CuPy adds
// -ftz=true to every compile, which flushes subnormals. The bit-exact contract needs them, so every float
// operation whose inputs or result can be subnormal goes through the f_* helpers (ptx.cuh: PTX without .ftz).
// Format constants (mantissa bits, bias, max, NaN codes, the E2M1 midpoints) come from formats.cuh.
#pragma once

#include "fp8_decode.cuh"

// ---- bf16 <-> fp32 -----------------------------------------------------------------------------------
// fp32 -> bf16 round-to-nearest-even (the same bit trick as formats.bf16_round; NaN stays a quiet NaN).
__device__ __forceinline__ u32 f32_to_bf16_bits(float f) {
    u32 b = __float_as_uint(f);
    if ((b & 0x7FFFFFFFu) > F32_INF_BITS) return (b | 0x00400000u) >> 16;
    return (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
}

// ---- input loaders: 16 bytes per load --------------------------------------------------------------------
template <typename T> struct In;
// `Raw` is the 16 loaded bytes kept as they are (bf16 stays packed: 4 registers for 8 values) until used.
template <> struct In<u16> {  // bf16 bits
    static constexpr int VEC = 8;
    typedef uint4 Raw;
    __device__ static Raw raw(const u16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
    __device__ static void unpack(const Raw& w, float* v) {
        v[0] = bf16_lo(w.x); v[1] = bf16_hi(w.x); v[2] = bf16_lo(w.y); v[3] = bf16_hi(w.y);
        v[4] = bf16_lo(w.z); v[5] = bf16_hi(w.z); v[6] = bf16_lo(w.w); v[7] = bf16_hi(w.w);
    }
    __device__ static void load(const u16* p, float* v) { unpack(raw(p), v); }
    __device__ static float one(const u16* p) { return __uint_as_float(u32(*p) << 16); }
};
template <> struct In<float> {
    static constexpr int VEC = 4;
    typedef float4 Raw;
    __device__ static Raw raw(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
    __device__ static void unpack(const Raw& w, float* v) { v[0] = w.x; v[1] = w.y; v[2] = w.z; v[3] = w.w; }
    __device__ static void load(const float* p, float* v) { unpack(raw(p), v); }
    __device__ static float one(const float* p) { return *p; }
};

// Eight dequantized values to out[e0 .. e0 + 8): OUT 0 float32, OUT 1 bf16 (RNE, two per cvt).
template <int OUT>
__device__ __forceinline__ void store8(void* out, long long e0, const float* o) {
    if (OUT == 0) {
        float4* d = reinterpret_cast<float4*>(static_cast<float*>(out) + e0);
        d[0] = make_float4(o[0], o[1], o[2], o[3]);
        d[1] = make_float4(o[4], o[5], o[6], o[7]);
    } else {
        *reinterpret_cast<uint4*>(static_cast<u16*>(out) + e0) =
            make_uint4(bf16x2_rn(o[0], o[1]), bf16x2_rn(o[2], o[3]), bf16x2_rn(o[4], o[5]), bf16x2_rn(o[6], o[7]));
    }
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

__device__ __forceinline__ u32 e4m3_encode_sw(float q) {
    return fp8_encode_sw<FP8LAB_E4M3_MAN_BITS, FP8LAB_E4M3_BIAS, FP8LAB_E4M3_MAX_BITS, FP8LAB_E4M3_NAN_CODE>(q);
}
__device__ __forceinline__ u32 e5m2_encode_sw(float q) {
    return fp8_encode_sw<FP8LAB_E5M2_MAN_BITS, FP8LAB_E5M2_BIAS, FP8LAB_E5M2_MAX_BITS, FP8LAB_E5M2_NAN_CODE>(q);
}

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
__device__ __forceinline__ u32 gather_b3(u32 c0, u32 c1, u32 c2, u32 c3) {
    return prmt(prmt(c0, c1, 0x0073u), prmt(c2, c3, 0x0073u), 0x5410u);
}

// E2M1, same idea: |q| clamped to 6 (saturation), E = exponent of max(|q|, 1) (step 0.5 below 2, 1 in [2, 4),
// 2 in [4, 8)), M = 2**E * 1.5 * 2**22, r = (|q| + M) - M, r * 2**-126 = magnitude code << 22. Any finite q.
__device__ __forceinline__ u32 e2m1_mag_fpu22(float q) {
    constexpr int MB = FP8LAB_E2M1_MAN_BITS, B = FP8LAB_E2M1_BIAS;
    const float a = fminf(f_abs(q), FP8LAB_E2M1_MAX);
    const float e = __uint_as_float(__float_as_uint(fmaxf(a, __uint_as_float(u32(127 + 1 - B) << 23))) & 0x7F800000u);
    const float M = f_mul(e, __uint_as_float(u32(127 + 23 - MB) << 23 | 0x400000u));  // 1.5 * 2**22
    const float r = f_sub(f_add(a, M), M);
    return __float_as_uint(f_mul(r, __uint_as_float(u32(B) << 23)));                 // * 2**-126
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
__device__ __forceinline__ u32 e4m3x2_hw(float hi, float lo) { return cvt2_rn<PACK_E4M3>(lo, hi); }
__device__ __forceinline__ u32 e5m2x2_hw(float hi, float lo) { return cvt2_rn<PACK_E5M2>(lo, hi); }

// ---- E2M1 encode: three software versions (sm_90 has no E2M1 conversion instruction) -----------------
// All three are bit-identical to formats.E2M1.encode(saturate=True): RNE, +-Inf and overflow -> +-6,
// NaN -> 0 (E2M1 has no NaN), -0.0 and small negatives -> 0x8.
//
// (1) branchless: seed 002's seven compares on the magnitude bits, with `>` at the four midpoints whose
//     LOWER neighbour has the even code (0.25, 1.25, 2.5, 5.0) and `>=` where the upper one is even (the seed's
//     all-`>=` version rounds those four ties away from zero). The seven predicates are summed. The midpoints
//     and the tie rule are formats.E2M1's (formats.cuh), not typed here.
__device__ __forceinline__ u32 e2m1_mag_compare(u32 a) {  // a: |x| as fp32 bits
    u32 idx = 0;
#pragma unroll
    for (int i = 0; i < 7; ++i) idx += e2m1_tie_down(i) ? (a > E2M1_MIDS[i]) : (a >= E2M1_MIDS[i]);
    return idx;
}
__device__ __forceinline__ u32 e2m1_branchless(float x) {
    const u32 b = __float_as_uint(x), a = b & 0x7FFFFFFFu;
    u32 idx = e2m1_mag_compare(a);
    idx |= (b >> 28) & 0x8u;
    return a > F32_INF_BITS ? 0u : idx;
}
// (2) branchy: the naive if/else chain a first version would write (float compares, same tie rules):
//     below(a, i) is `a <= mid_i` where a tie at mid_i rounds down, `a < mid_i` where it rounds up.
__device__ __forceinline__ bool e2m1_below(float a, int i) {
    const float m = __uint_as_float(E2M1_MIDS[i]);
    return e2m1_tie_down(i) ? a <= m : a < m;
}
__device__ __forceinline__ u32 e2m1_branchy(float x) {
    const float a = f_abs(x);
    u32 idx;
    if (a != a) return 0u;                 // NaN
    if (e2m1_below(a, 0)) idx = 0;
    else if (e2m1_below(a, 1)) idx = 1;
    else if (e2m1_below(a, 2)) idx = 2;
    else if (e2m1_below(a, 3)) idx = 3;
    else if (e2m1_below(a, 4)) idx = 4;
    else if (e2m1_below(a, 5)) idx = 5;
    else if (e2m1_below(a, 6)) idx = 6;
    else idx = 7;
    return idx | ((__float_as_uint(x) >> 28) & 0x8u);
}
__device__ __forceinline__ u32 e2m1_mag_branchy(float x) {
    const float a = f_abs(x);
    if (e2m1_below(a, 0)) return 0;
    if (e2m1_below(a, 1)) return 1;
    if (e2m1_below(a, 2)) return 2;
    if (e2m1_below(a, 3)) return 3;
    if (e2m1_below(a, 4)) return 4;
    if (e2m1_below(a, 5)) return 5;
    if (e2m1_below(a, 6)) return 6;
    return 7;
}
// (3) bits: the FP8 method above (fp8_round_mag) with E2M1's one mantissa bit and bias 1: RNE on the bits for
//     |x| >= 1 (E2M1 normals), the FPU's own RNE through a magic add (C = 2**22, ulp 0.5) for |x| < 1.
//     Saturation first (min with 6).
//     2.5 -> (0x40200000 + 0x1FFFFF + 0) >> 22 = 0x100 -> minus 0xFC (126 << 1) = 4 (2.0, the even neighbour)
// Fast-path forms (the caller guarantees a finite x): magnitude code 0..7 only, sign handled by the caller.
__device__ __forceinline__ u32 e2m1_mag_branchless(float x) { return e2m1_mag_compare(__float_as_uint(x) & 0x7FFFFFFFu); }
__device__ __forceinline__ u32 e2m1_mag_bits(float x) {  // |x| clamped to 6.0 (saturation)
    return fp8_round_mag<FP8LAB_E2M1_MAN_BITS, FP8LAB_E2M1_BIAS>(min(__float_as_uint(x) & 0x7FFFFFFFu, FP8LAB_E2M1_MAX_BITS));
}
__device__ __forceinline__ u32 e2m1_bits(float x) {
    const u32 b = __float_as_uint(x);
    const u32 idx = e2m1_mag_bits(x) | ((b >> 28) & 0x8u);  // Inf clamps to 6 too; NaN handled here:
    return (b & 0x7FFFFFFFu) > F32_INF_BITS ? 0u : idx;
}
