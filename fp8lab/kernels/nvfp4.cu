// NVFP4 quantize / dequantize: E2M1 elements in 16-element blocks along the last dim, an E4M3 scale per
// block, an fp32 global scale. Bit-exact against fp8lab.scaling.quantize(x, QuantSpec("e2m1", "nvfp4")).
//
// Offline check (the same compile, any listed arch, no GPU): python -m fp8lab.kernels.sass --source nvfp4.cu --arch sm_90 --ptxas-v
//
// The arithmetic and the non-finite policy: nvfp4_quant.cuh (shared with nvfp4_hw.cu, the variant that converts
// with the hardware E2M1 instruction of sm_100a / sm_120a / sm_121a).
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
#include "nvfp4_quant.cuh"

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
        nvfp4_quant_impl<T, E2Soft<EV>, SV>(x, gamax, packed, sc, gs, flags, R, K);                                        \
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
            if (variant == 0) nvfp4_quant_scalar_impl<T, E2Soft<0>, 1>(x, gamax, packed, sc, gs, flags, R, K);             \
            else if (variant == 1) nvfp4_quant_scalar_impl<T, E2Soft<1>, 1>(x, gamax, packed, sc, gs, flags, R, K);        \
            else nvfp4_quant_scalar_impl<T, E2Soft<2>, 1>(x, gamax, packed, sc, gs, flags, R, K);                          \
        } else {                                                                                                   \
            if (variant == 0) nvfp4_quant_scalar_impl<T, E2Soft<0>, 0>(x, gamax, packed, sc, gs, flags, R, K);             \
            else if (variant == 1) nvfp4_quant_scalar_impl<T, E2Soft<1>, 0>(x, gamax, packed, sc, gs, flags, R, K);        \
            else nvfp4_quant_scalar_impl<T, E2Soft<2>, 0>(x, gamax, packed, sc, gs, flags, R, K);                          \
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
