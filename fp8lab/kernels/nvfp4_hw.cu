// nvfp4_hw.cu -- NVFP4 quantization with the hardware E2M1 conversion: cvt.rn.satfinite.e2m1x2.f32, two fp32 in,
// one byte of two codes out (SASS F2FP.SATFINITE.E2M1.F32.PACK_AB_MERGE_C). Built for sm_120a / sm_121a (the GB10)
// and sm_100a only (sources.py); everywhere else nvfp4.cu's software conversions run. Same arithmetic, same
// non-finite policy, same storage as nvfp4.cu (nvfp4_quant.cuh): the result is bit-identical to
// fp8lab.scaling.quantize(x, QuantSpec("e2m1", "nvfp4")) -- provided the instruction behaves as CUDA's own
// cuda_fp4.hpp documents it (ptx_sm120a.cuh): round to nearest even, +-Inf and |x| > 6 -> +-6. That is checked on a
// GB10 by tests/test_kernels_gb10.py (exhaustively over all 2**32 fp32, check_e2m1_cvt below); no GB10 ran it here.
//
// Where the hardware and the lab's policy differ: a NaN input gives +6 (code 0x7) from the instruction, 0 from
// formats.E2M1.encode. The quantizer never converts a NaN (a block holding one gets the NaN scale code 0x7F and
// codes 0, before any conversion), and E2Cvt::one canonicalizes NaN to 0 anyway, so every kernel here follows the
// lab's policy; check_e2m1_cvt reports the raw hardware byte for NaN separately.
//
// Kernels (the names say e2m1 "cvt"):
//   nvfp4_quant_<in>_cvt_hw      vector path, E4M3 block scales by cvt.rn.satfinite.e4m3x2 (hw)
//   nvfp4_quant_scalar_<in>_cvt  any K, one thread per block
//   e2m1_encode_cvt_elementwise  formats.E2M1.encode(x, saturate=True) through the instruction (NaN -> 0)
//   check_e2m1_cvt               all 2**32 fp32 through the instruction vs the software e2m1_bits
//   e2m1_chain_cvt               nvfp4.cu's dependent-chain microbenchmark with the instruction
#include "nvfp4_quant.cuh"
#include "ptx_sm120a.cuh"

// Eight finite quotients -> eight codes: four instructions, each writing one byte (two nibbles, element 2i low).
struct E2Cvt {
    __device__ static u32 one(float x) {
        const u32 c = e2m1x2_cvt(x, 0.0f) & 0xFu;
        return (__float_as_uint(x) & 0x7FFFFFFFu) > F32_INF_BITS ? 0u : c;  // NaN -> 0 (the hardware gives 0x7)
    }
    __device__ static u32 pack8(const float* q) {
        return e2m1x2_cvt(q[0], q[1]) | (e2m1x2_cvt(q[2], q[3]) << 8) | (e2m1x2_cvt(q[4], q[5]) << 16) |
               (e2m1x2_cvt(q[6], q[7]) << 24);
    }
};

#define NVFP4_CVT_ENTRIES(IN, T)                                                                                   \
    extern "C" __global__ void nvfp4_quant_##IN##_cvt_hw(const T* x, const float* gamax, u8* packed, u8* sc,        \
                                                         float* gs, int* flags, int R, int K) {                     \
        nvfp4_quant_impl<T, E2Cvt, 1>(x, gamax, packed, sc, gs, flags, R, K);                                      \
    }                                                                                                              \
    extern "C" __global__ void nvfp4_quant_scalar_##IN##_cvt(const T* x, const float* gamax, u8* packed, u8* sc,    \
                                                             float* gs, int* flags, int R, int K) {                 \
        nvfp4_quant_scalar_impl<T, E2Cvt, 1>(x, gamax, packed, sc, gs, flags, R, K);                               \
    }
NVFP4_CVT_ENTRIES(bf16, u16)
NVFP4_CVT_ENTRIES(f32, float)

extern "C" __global__ void e2m1_encode_cvt_elementwise(const float* x, u8* out, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = u8(E2Cvt::one(x[i]));
}

// All 2**32 fp32 patterns: out[0] = #(instruction != e2m1_bits) over non-NaN inputs, out[1] = #(the high nibble of
// the x2 result != its low nibble, same input in both), out[2] = first disagreeing input, out[3] = the raw byte the
// instruction gives for +NaN (two nibbles), out[4] = the same for -NaN.
extern "C" __global__ void check_e2m1_cvt(u32* out) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u32 d = 0, hl = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
        const float f = __uint_as_float(u32(i));
        const u32 r = e2m1x2_cvt(f, f);
        if ((r & 0xFu) != (r >> 4)) ++hl;
        if ((u32(i) & 0x7FFFFFFFu) > F32_INF_BITS) continue;
        if ((r & 0xFu) != e2m1_bits(f)) { ++d; atomicCAS(out + 2, 0u, u32(i)); }
    }
    if (d) atomicAdd(out, d);
    if (hl) atomicAdd(out + 1, hl);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[3] = e2m1x2_cvt(__uint_as_float(0x7FC00000u), __uint_as_float(0x7FC00000u));
        out[4] = e2m1x2_cvt(__uint_as_float(0xFFC00000u), __uint_as_float(0xFFC00000u));
    }
}

// nvfp4.cu's e2m1_chain_* with the instruction (one code per iteration, the sign included).
extern "C" __global__ void e2m1_chain_cvt(u32* out, int iters) {
    u32 h = (blockIdx.x * blockDim.x + threadIdx.x) * 2654435761u + 12345u;
    u32 acc = 0;
    for (int i = 0; i < iters; ++i) {
        const float xv = (__uint_as_float(0x40800000u | (h >> 9)) - 4.0f) * 1.75f;  // [0, 7)
        const u32 c = e2m1x2_cvt(xv, 0.0f) & 0xFu;
        acc += c;
        h = h * 1664525u + 1013904223u + c;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
