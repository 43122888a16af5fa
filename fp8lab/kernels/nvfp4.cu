// NVFP4 quantize / dequantize: E2M1 elements in 16-element blocks along the last dim, an E4M3 scale per
// block, an fp32 global scale. Bit-exact against fp8lab.scaling.quantize(x, QuantSpec("e2m1", "nvfp4")).
//
// Offline check (the same compile, any listed arch, no GPU): python -m fp8lab.kernels.sass --source nvfp4.cu --arch sm_90 --ptxas-v
//
// The arithmetic (fp32, IEEE division, in this order):
//     gs  = amax(x) / 2688  (448 * 6); 1.0 if not > 0           -- the global scale (amax: NaN/Inf ignored)
//     bs  = amax(block) / 6 / gs                                 -- two divisions, in this order
//     sc  = E4M3.encode(bs) (saturating) ; NaN in the block -> sc = 0x7F (the block decodes to NaN)
//     s   = decode(sc) * gs ;  code = E2M1.encode(x / s) if s > 0 else 0
// Storage: packed[r, i] = code[r, 2i] | code[r, 2i+1] << 4 (element 2i in the LOW nibble, as
// scaling.pack_nibbles; an odd K leaves the last high nibble 0); scale codes [R, ceil(K/16)]; gs a 0-d fp32.
//
// Kernels:
//   nvfp4_quant_<in>_<e2m1>_<scale cvt>   e2m1 in {branchless, branchy, bits} (quant_common.cuh), the E4M3
//                                        block-scale conversion in software (sw) or by cvt.rn.satfinite (hw)
//   nvfp4_quant_scalar_<in>             any K (K % 16 != 0 or unaligned input): one thread per block
//   nvfp4_dequant_<out>                 (decode(code) * decode(sc)) * gs, left to right like scaling.dequantize
//   e2m1_chain_<variant>                compute-bound microbenchmark of the conversion alone (see below)
//   check_e2m1_variants / e2m1_encode_elementwise   exhaustive and CPU-comparison checks
// The global amax comes from amax_<in> in quant.cu (a dynamic quantization is two launches), or from the
// caller (a calibrated global scale, vLLM's scaled_fp4_quant input_global_scale): then one pass over x.
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

template <int SCV>
__device__ __forceinline__ u32 e4m3_scale_code(float bs) {  // bs >= 0, never NaN; Inf only from a too-small given amax
    if (SCV == 1 && bs < __uint_as_float(F32_INF_BITS)) return e4m3x2_hw(0.0f, bs) & 0xFFu;
    return e4m3_encode_sw(bs);
}

__device__ __forceinline__ float global_scale(float gamax) {
    const float gs = f_div(gamax, FP8LAB_NVFP4_GLOBAL_DIV);  // E4M3 max * E2M1 max = 448 * 6; IEEE division, no ftz
    return f_pos(gs) ? gs : 1.0f;
}

// =====================================================================================================
// Vector path (K % 16 == 0, x 16-byte aligned): one thread per 16-element block (two 16-byte loads for bf16,
// four for fp32, all in flight at once). One block per thread keeps the per-block work (two divisions, the
// E4M3 rounding, a reciprocal) amortized over 16 elements, and needs no shuffles.
// Fast path (finite block, scale in range): bs = bamax / 6 / gs by two Markstein divisions (div_by_scale with
// RN(1/6) and RN(1/gs)), x / s by div_by_scale, the E2M1 magnitude by the variant, signs gathered by PRMT.
// FP8LAB_E2M1_RCP_MAX = RN(1/6) in fp32 (formats.cuh), the reciprocal div_by_scale needs for "/ 6"
template <int V>
__device__ __forceinline__ u32 place_mag(float q, int e) {  // the magnitude code of q at nibble e (bits 4e..4e+2)
    if (V == E2M1_BITS) {
        const u32 R = e2m1_mag_fpu22(q);  // mag << 22
        return (4 * e >= 22) ? (R << (4 * e - 22)) : (R >> (22 - 4 * e));
    }
    return e2m1_mag<V>(q) << (4 * e);
}

#define NVFP4_NU 2  // blocks per thread: both blocks' loads in flight at once, per-thread setup amortized
template <typename T, int E2V, int SCV>
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
        bool has_nan = false;
        if (!finite) {  // rare: NaN/Inf in this block
            float m = 0.0f;
            for (int e = 0; e < 16; ++e) { m = absmax_finite(m, v[u][e]); has_nan |= (v[u][e] != v[u][e]); }
            bamax = m;
            atomicOr(flags, 1);
        }
        float bs;  // bamax / 6 / gs, exactly: two Markstein divisions where nothing can underflow (bamax >= 2**-72)
        if (__float_as_uint(bamax) >= 0x1B800000u && gs_ok) bs = div_by_scale(div_by_scale(bamax, FP8LAB_E2M1_MAX, FP8LAB_E2M1_RCP_MAX), gs, ygs);
        else bs = f_div(f_div(bamax, FP8LAB_E2M1_MAX), gs);
        const u32 sc = has_nan ? FP8LAB_E4M3_NAN_CODE : e4m3_scale_code<SCV>(bs);
        const float s = f_mul(e4m3_decode(sc), gs);
        const u32 sb = __float_as_uint(s);  // 2**-60 <= s <= 2**120 on the bits (false for NaN)
        u32 lo = 0, hi = 0;
        if (finite && sb >= 0x21800000u && sb <= 0x7B800000u) {
            const float y = f_rcp(s);
            float q[16];
#pragma unroll
            for (int e = 0; e < 16; ++e) q[e] = div_by_scale(v[u][e], s, y);
#pragma unroll
            for (int e = 0; e < 8; ++e) { lo |= place_mag<E2V>(q[e], e); hi |= place_mag<E2V>(q[e + 8], e); }
            lo |= sign_nibbles8(q);
            hi |= sign_nibbles8(q + 8);
        } else if (f_pos(s)) {  // (false for NaN: a NaN block's codes are 0, as in the reference)
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                lo |= e2m1<E2V>(f_div(v[u][e], s)) << (4 * e);
                hi |= e2m1<E2V>(f_div(v[u][e + 8], s)) << (4 * e);
            }
        }
        *reinterpret_cast<uint2*>(packed + (unsigned long long)bidx[u] * 8) = make_uint2(lo, hi);
        sc_out[bidx[u]] = u8(sc);
    }
}

// Any K: one thread per 16-block, scalar loads, bytes written one at a time. Row r, block jb.
template <typename T, int E2V, int SCV>
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
    bool has_nan = false, nonfinite = false;
    for (int e = 0; e < 16; ++e) {
        const int k = jb * 16 + e;
        v[e] = k < K ? In<T>::one(x + r * K + k) : 0.0f;
        m = absmax_finite(m, v[e]);
        has_nan |= v[e] != v[e];
        nonfinite |= !(f_abs(v[e]) < __uint_as_float(F32_INF_BITS));
    }
    if (nonfinite) atomicOr(flags, 1);
    const float bs = f_div(f_div(m, FP8LAB_E2M1_MAX), gs);
    const u32 sc = has_nan ? FP8LAB_E4M3_NAN_CODE : e4m3_scale_code<SCV>(bs);
    const float s = f_mul(e4m3_decode(sc), gs);
    sc_out[r * nb + jb] = u8(sc);
    for (int i = 0; i < 8; ++i) {
        const int byte = jb * 8 + i;
        if (byte >= kb) break;
        u32 c0 = 0, c1 = 0;
        if (f_pos(s)) {
            c0 = e2m1<E2V>(f_div(v[2 * i], s));                    // beyond K: v = 0 -> code 0 (the padding)
            c1 = (2 * i + 1 + jb * 16 < K) ? e2m1<E2V>(f_div(v[2 * i + 1], s)) : 0u;
        }
        packed[r * kb + byte] = u8(c0 | (c1 << 4));
    }
}

// =====================================================================================================
// Dequantize: out = (E2M1 value * E4M3 value of the block scale) * gs, left to right. Vector path (K % 16 == 0):
// a chunk is 8 elements (one u32 of packed codes, inside one 16-block); each thread converts D4_NL chunks,
// chunk j of thread t in CTA b at index (b * D4_NL + j) * blockDim + t, all loads first. Else one element per thread.
#define D4_NL 4
template <int OUT>
__device__ void nvfp4_dequant_impl(const u8* __restrict__ packed, const u8* __restrict__ sc, const float* __restrict__ gs_p,
                                   void* __restrict__ out, int R, int K) {
    const float gs = *gs_p;
    const int nb = (K + 15) >> 4, kb = (K + 1) >> 1;
    if ((K & 15) == 0) {
        const long long nq = (long long)R * (K >> 3);
        u32 w[D4_NL], c[D4_NL];
        long long ch[D4_NL];
#pragma unroll
        for (int j = 0; j < D4_NL; ++j) {
            ch[j] = ((long long)blockIdx.x * D4_NL + j) * blockDim.x + threadIdx.x;
            if (ch[j] < nq) {
                w[j] = *reinterpret_cast<const u32*>(packed + ch[j] * 4);
                c[j] = sc[ch[j] >> 1];  // K % 16 == 0: rows hold whole blocks, chunk -> block index = chunk / 2
            }
        }
#pragma unroll
        for (int j = 0; j < D4_NL; ++j) {
            if (ch[j] >= nq) continue;
            const float bsv = e4m3_decode(c[j]);
            float o[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) o[e] = f_mul(f_mul(e2m1_decode((w[j] >> (4 * e)) & 0xFu), bsv), gs);
            store8<OUT>(out, ch[j] * 8, o);
        }
    } else {
        const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (t >= (long long)R * K) return;
        const long long r = t / K;
        const int k = int(t - r * K);
        const u32 code = (packed[r * kb + (k >> 1)] >> (4 * (k & 1))) & 0xFu;
        const float o = f_mul(f_mul(e2m1_decode(code), e4m3_decode(sc[r * nb + (k >> 4)])), gs);
        if (OUT == 0) static_cast<float*>(out)[t] = o;
        else static_cast<u16*>(out)[t] = u16(f32_to_bf16_bits(o));
    }
}

// =====================================================================================================
// Compute-bound microbenchmark of the E2M1 conversion alone. In the quantization kernel the conversion
// hides under memory traffic; here each thread runs a dependent chain: the next input is derived from the
// previous code through an LCG, so no two conversions can be merged or hoisted (loop-invariant inputs would
// let ptxas compute one conversion for all iterations). Inputs cover [0, 7) (every branch of the if/else
// chain), and the lanes of a warp take different branches, as they would on real activations.
// V = 3 is the baseline: the same loop with a trivial "conversion" (h & 7): time(V) - time(3) is the
// conversion's own cost.
template <int V>
__device__ void e2m1_chain_impl(u32* out, int iters) {
    u32 h = (blockIdx.x * blockDim.x + threadIdx.x) * 2654435761u + 12345u;
    u32 acc = 0;
    for (int i = 0; i < iters; ++i) {
        const float xv = (__uint_as_float(0x40800000u | (h >> 9)) - 4.0f) * 1.75f;  // [0, 7)
        // the forms the quantization kernel's fast path runs (finite inputs): magnitude code, sign OR-ed in
        const u32 sgn = (__float_as_uint(xv) >> 28) & 8u;
        const u32 c = V == 3 ? (__float_as_uint(xv) >> 20) & 7u
                    : V == E2M1_BITS ? ((e2m1_mag_fpu22(xv) >> 22) | sgn) : (e2m1_mag<V>(xv) | sgn);
        acc += c;
        h = h * 1664525u + 1013904223u + c;  // the next input depends on this code
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
extern "C" __global__ void e2m1_chain_branchless(u32* o, int n) { e2m1_chain_impl<E2M1_BRANCHLESS>(o, n); }
extern "C" __global__ void e2m1_chain_branchy(u32* o, int n) { e2m1_chain_impl<E2M1_BRANCHY>(o, n); }
extern "C" __global__ void e2m1_chain_bits(u32* o, int n) { e2m1_chain_impl<E2M1_BITS>(o, n); }
extern "C" __global__ void e2m1_chain_baseline(u32* o, int n) { e2m1_chain_impl<3>(o, n); }

// All 2**32 fp32 patterns through the three conversions: out[0] = #(branchless != bits),
// out[1] = #(branchless != branchy), out[2] = first disagreeing input, out[3] = disagreements of the
// fast-path forms (e2m1_mag_fpu22, e2m1_mag_branchless/branchy + sign) on finite inputs.
extern "C" __global__ void check_e2m1_variants(u32* out) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u32 d1 = 0, d2 = 0, d3 = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
        const float f = __uint_as_float(u32(i));
        const u32 a = e2m1_branchless(f), b = e2m1_bits(f), c = e2m1_branchy(f);
        if (a != b) { ++d1; atomicCAS(out + 2, 0u, u32(i)); }
        if (a != c) { ++d2; atomicCAS(out + 2, 0u, u32(i)); }
        if (f_abs(f) < __uint_as_float(F32_INF_BITS)) {  // the fast-path forms (finite inputs only)
            const u32 sgn = (u32(i) >> 28) & 8u;
            if (((e2m1_mag_fpu22(f) >> 22) | sgn) != a || (e2m1_mag_branchless(f) | sgn) != a ||
                (e2m1_mag_branchy(f) | sgn) != a) ++d3;
        }
    }
    if (d1) atomicAdd(out, d1);
    if (d2) atomicAdd(out + 1, d2);
    if (d3) atomicAdd(out + 3, d3);
}
extern "C" __global__ void e2m1_encode_elementwise(const float* x, u8* out, long long n, int variant) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float f = x[i];
    out[i] = u8(variant == 0 ? e2m1_branchless(f) : variant == 1 ? e2m1_branchy(f) : e2m1_bits(f));
}

// ---- extern "C" entry points ------------------------------------------------------------------------------
#define NVFP4_ENTRY(IN, T, EN, EV, SN, SV)                                                                         \
    extern "C" __global__ void nvfp4_quant_##IN##_##EN##_##SN(const T* x, const float* gamax, u8* packed,          \
                                                              u8* sc, float* gs, int* flags, int R, int K) {      \
        nvfp4_quant_impl<T, EV, SV>(x, gamax, packed, sc, gs, flags, R, K);                                        \
    }
#define NVFP4_ENTRIES(IN, T)                                                                                       \
    NVFP4_ENTRY(IN, T, branchless, E2M1_BRANCHLESS, sw, 0)                                                         \
    NVFP4_ENTRY(IN, T, branchless, E2M1_BRANCHLESS, hw, 1)                                                         \
    NVFP4_ENTRY(IN, T, branchy, E2M1_BRANCHY, sw, 0)                                                               \
    NVFP4_ENTRY(IN, T, branchy, E2M1_BRANCHY, hw, 1)                                                               \
    NVFP4_ENTRY(IN, T, bits, E2M1_BITS, sw, 0)                                                                     \
    NVFP4_ENTRY(IN, T, bits, E2M1_BITS, hw, 1)                                                                     \
    extern "C" __global__ void nvfp4_quant_scalar_##IN(const T* x, const float* gamax, u8* packed, u8* sc,         \
                                                       float* gs, int* flags, int R, int K, int variant, int scv) { \
        if (scv) {                                                                                                 \
            if (variant == 0) nvfp4_quant_scalar_impl<T, 0, 1>(x, gamax, packed, sc, gs, flags, R, K);             \
            else if (variant == 1) nvfp4_quant_scalar_impl<T, 1, 1>(x, gamax, packed, sc, gs, flags, R, K);        \
            else nvfp4_quant_scalar_impl<T, 2, 1>(x, gamax, packed, sc, gs, flags, R, K);                          \
        } else {                                                                                                   \
            if (variant == 0) nvfp4_quant_scalar_impl<T, 0, 0>(x, gamax, packed, sc, gs, flags, R, K);             \
            else if (variant == 1) nvfp4_quant_scalar_impl<T, 1, 0>(x, gamax, packed, sc, gs, flags, R, K);        \
            else nvfp4_quant_scalar_impl<T, 2, 0>(x, gamax, packed, sc, gs, flags, R, K);                          \
        }                                                                                                          \
    }
NVFP4_ENTRIES(bf16, u16)
NVFP4_ENTRIES(f32, float)

extern "C" __global__ void nvfp4_dequant_f32(const u8* p, const u8* sc, const float* gs, void* out, int R, int K) {
    nvfp4_dequant_impl<0>(p, sc, gs, out, R, K);
}
extern "C" __global__ void nvfp4_dequant_bf16(const u8* p, const u8* sc, const float* gs, void* out, int R, int K) {
    nvfp4_dequant_impl<1>(p, sc, gs, out, R, K);
}
