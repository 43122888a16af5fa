// nvfp4_quant.cuh -- the NVFP4 quantizer body that nvfp4.cu (software E2M1 conversions, every arch) and
// nvfp4_hw.cu (the hardware cvt.rn.satfinite.e2m1x2.f32, sm_100a / sm_120a / sm_121a) share. The E2M1 conversion is
// a policy type E2 with two members:
//     E2::pack8(q)  eight finite quotients q[0..7] -> eight codes, code e in bits 4e..4e+3 (the fast path)
//     E2::one(x)    any fp32 -> one code, formats.E2M1.encode(x, saturate=True): RNE, +-Inf and overflow -> +-6,
//                   NaN -> 0, -0.0 and small negatives -> 0x8 (the slow path, the scalar path)
// Everything else -- amax, the two divisions, the E4M3 block scale, the non-finite policy -- is written once, here.
//
// The arithmetic (fp32, IEEE division, in this order), fp8lab.scaling's "lab" rule with nonfinite="propagate":
//     gs  = amax(x) / 2688  (448 * 6); 1.0 if not > 0           -- the global scale (amax: NaN/Inf ignored)
//     bs  = amax(block) / 6 / gs                                 -- two divisions, in this order
//           1 / gs  for a block holding +-Inf and no finite nonzero value (scale ~1: its Inf saturate to +-6 x s)
//     sc  = E4M3.encode(bs) (saturating) ; NaN in the block -> sc = 0x7F (the block decodes to NaN)
//     s   = decode(sc) * gs ;  code = E2M1.encode(x / s) if s > 0 else 0
#pragma once

#include "quant_common.cuh"

#define E2M1_BRANCHLESS 0
#define E2M1_BRANCHY 1
#define E2M1_BITS 2

template <int V>
__device__ __forceinline__ u32 e2m1(float x) {
    if (V == E2M1_BRANCHLESS) return e2m1_branchless(x);
    if (V == E2M1_BRANCHY) return e2m1_branchy(x);
    return e2m1_bits(x);
}

template <int V>
__device__ __forceinline__ u32 e2m1_mag(float x) {  // finite x only (the fast path)
    if (V == E2M1_BRANCHLESS) return e2m1_mag_branchless(x);
    if (V == E2M1_BRANCHY) return e2m1_mag_branchy(x);
    return e2m1_mag_bits(x);
}

// FP8LAB_E2M1_RCP_MAX = RN(1/6) in fp32 (formats.cuh), the reciprocal div_by_scale needs for "/ 6"
template <int V>
__device__ __forceinline__ u32 place_mag(float q, int e) {  // the magnitude code of q at nibble e (bits 4e..4e+2)
    if (V == E2M1_BITS) {
        const u32 R = e2m1_mag_fpu22(q);  // mag << 22
        return (4 * e >= 22) ? (R << (4 * e - 22)) : (R >> (22 - 4 * e));
    }
    return e2m1_mag<V>(q) << (4 * e);
}

// The three software conversions as E2 policies: magnitudes placed one by one, the eight signs gathered by PRMT.
template <int V>
struct E2Soft {
    __device__ static u32 one(float x) { return e2m1<V>(x); }
    __device__ static u32 pack8(const float* q) {
        u32 w = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) w |= place_mag<V>(q[e], e);
        return w | sign_nibbles8(q);
    }
};

template <int SCV>
__device__ __forceinline__ u32 e4m3_scale_code(float bs) {  // bs >= 0, never NaN; Inf only from a too-small given amax
    if (SCV == 1 && bs < __uint_as_float(F32_INF_BITS)) return e4m3x2_hw(0.0f, bs) & 0xFFu;
    return e4m3_encode_sw(bs);
}

__device__ __forceinline__ float global_scale(float gamax) {
    const float gs = f_div(gamax, FP8LAB_NVFP4_GLOBAL_DIV);  // E4M3 max * E2M1 max = 448 * 6; IEEE division, no ftz
    return f_pos(gs) ? gs : 1.0f;
}

// bs of a block whose finite amax is `bamax`: the two divisions, or 1 / gs for a block of +-Inf and zeros only.
__device__ __forceinline__ float block_scale_slow(float bamax, bool has_inf, float gs) {
    if (has_inf && bamax == 0.0f) return f_div(1.0f, gs);  // scaling: torch.ones_like(gs) / gs, an IEEE division
    return f_div(f_div(bamax, FP8LAB_E2M1_MAX), gs);
}

// =====================================================================================================
// Vector path (K % 16 == 0, x 16-byte aligned): one thread per 16-element block (two 16-byte loads for bf16,
// four for fp32, all in flight at once). One block per thread keeps the per-block work (two divisions, the
// E4M3 rounding, a reciprocal) amortized over 16 elements, and needs no shuffles.
// Fast path (finite block, scale in range): bs = bamax / 6 / gs by two Markstein divisions (div_by_scale with
// RN(1/6) and RN(1/gs)), x / s by div_by_scale, eight codes at a time by E2::pack8.
#define NVFP4_NU 2  // blocks per thread: both blocks' loads in flight at once, per-thread setup amortized
template <typename T, class E2, int SCV>
__device__ void nvfp4_quant_impl(const T* __restrict__ x, const float* __restrict__ gamax_p, u8* __restrict__ packed,
                                 u8* __restrict__ sc_out, float* __restrict__ gs_out, int* flags, int R, int K) {
    constexpr int VEC = In<T>::VEC;
    const float gs = global_scale(*gamax_p);
    if (blockIdx.x == 0 && threadIdx.x == 0) *gs_out = gs;
    const u32 gb = __float_as_uint(gs);
    const bool gs_ok = gb >= 0x0D800000u && gb <= 0x71800000u;  // 2**-100 <= gs <= 2**100
    const float ygs = f_rcp(gs);
    const u32 nblocks = u32(R) * u32(K >> 4);
    float v[NVFP4_NU][16];
    u32 bidx[NVFP4_NU];
#pragma unroll
    for (int u = 0; u < NVFP4_NU; ++u) {  // block u of this thread; consecutive threads, consecutive blocks
        bidx[u] = (blockIdx.x * NVFP4_NU + u) * blockDim.x + threadIdx.x;
        if (bidx[u] < nblocks) {
#pragma unroll
            for (int j = 0; j < 16 / VEC; ++j) In<T>::load(x + (unsigned long long)bidx[u] * 16 + j * VEC, v[u] + j * VEC);
        }
    }
#pragma unroll
    for (int u = 0; u < NVFP4_NU; ++u) {
        if (bidx[u] >= nblocks) break;
        float mn = 0.0f;
#pragma unroll
        for (int e = 0; e < 16; ++e) mn = absmax_nan(mn, v[u][e]);
        const bool finite = mn < __uint_as_float(F32_INF_BITS);
        float bamax = mn;
        bool has_nan = false, has_inf = false;
        if (!finite) {  // rare: NaN/Inf in this block
            float m = 0.0f;
            for (int e = 0; e < 16; ++e) {
                m = absmax_finite(m, v[u][e]);
                has_nan |= (v[u][e] != v[u][e]);
                has_inf |= (f_abs(v[u][e]) == __uint_as_float(F32_INF_BITS));
            }
            bamax = m;
            atomicOr(flags, 1);
        }
        float bs;  // bamax / 6 / gs, exactly: two Markstein divisions where nothing can underflow (bamax >= 2**-72)
        if (__float_as_uint(bamax) >= 0x1B800000u && gs_ok) bs = div_by_scale(div_by_scale(bamax, FP8LAB_E2M1_MAX, FP8LAB_E2M1_RCP_MAX), gs, ygs);
        else bs = block_scale_slow(bamax, has_inf, gs);
        const u32 sc = has_nan ? FP8LAB_E4M3_NAN_CODE : e4m3_scale_code<SCV>(bs);
        const float s = f_mul(e4m3_decode(sc), gs);
        const u32 sb = __float_as_uint(s);  // 2**-60 <= s <= 2**120 on the bits (false for NaN)
        u32 lo = 0, hi = 0;
        if (finite && sb >= 0x21800000u && sb <= 0x7B800000u) {
            const float y = f_rcp(s);
            float q[16];
#pragma unroll
            for (int e = 0; e < 16; ++e) q[e] = div_by_scale(v[u][e], s, y);
            lo = E2::pack8(q);
            hi = E2::pack8(q + 8);
        } else if (f_pos(s)) {  // (false for NaN: a NaN block's codes are 0, as in the reference)
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                lo |= E2::one(f_div(v[u][e], s)) << (4 * e);
                hi |= E2::one(f_div(v[u][e + 8], s)) << (4 * e);
            }
        }
        *reinterpret_cast<uint2*>(packed + (unsigned long long)bidx[u] * 8) = make_uint2(lo, hi);
        sc_out[bidx[u]] = u8(sc);
    }
}

// Any K: one thread per 16-block, scalar loads, bytes written one at a time. Row r, block jb.
template <typename T, class E2, int SCV>
__device__ void nvfp4_quant_scalar_impl(const T* __restrict__ x, const float* __restrict__ gamax_p,
                                        u8* __restrict__ packed, u8* __restrict__ sc_out, float* __restrict__ gs_out,
                                        int* flags, int R, int K) {
    const int nb = (K + 15) >> 4, kb = (K + 1) >> 1;
    const float gs = global_scale(*gamax_p);
    if (blockIdx.x == 0 && threadIdx.x == 0) *gs_out = gs;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)R * nb) return;
    const long long r = t / nb;
    const int jb = int(t - r * nb);
    float v[16];
    float m = 0.0f;
    bool has_nan = false, has_inf = false;
    for (int e = 0; e < 16; ++e) {
        const int k = jb * 16 + e;
        v[e] = k < K ? In<T>::one(x + r * K + k) : 0.0f;
        m = absmax_finite(m, v[e]);
        has_nan |= v[e] != v[e];
        has_inf |= f_abs(v[e]) == __uint_as_float(F32_INF_BITS);
    }
    if (has_nan || has_inf) atomicOr(flags, 1);
    const float bs = block_scale_slow(m, has_inf, gs);
    const u32 sc = has_nan ? FP8LAB_E4M3_NAN_CODE : e4m3_scale_code<SCV>(bs);
    const float s = f_mul(e4m3_decode(sc), gs);
    sc_out[r * nb + jb] = u8(sc);
    for (int i = 0; i < 8; ++i) {
        const int byte = jb * 8 + i;
        if (byte >= kb) break;
        u32 c0 = 0, c1 = 0;
        if (f_pos(s)) {
            c0 = E2::one(f_div(v[2 * i], s));                    // beyond K: v = 0 -> code 0 (the padding)
            c1 = (2 * i + 1 + jb * 16 < K) ? E2::one(f_div(v[2 * i + 1], s)) : 0u;
        }
        packed[r * kb + byte] = u8(c0 | (c1 << 4));
    }
}
