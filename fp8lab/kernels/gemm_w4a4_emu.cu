// gemm_w4a4_emu.cu -- the W4A4 NVFP4 GEMM on any arch: gemm_w4a4.cu's skeleton (gemm_w4a4_common.cuh) with the
// block-scaled MMA done in software on the ordinary tensor cores. It reads the very same fragment and scale
// registers the native kernel hands to OMMA (the m16n8k64 e2m1 layout of ptx_sm120a.cuh), so its H200 results check
// the loads, the swizzle, the fragment and scale layouts and the epilogue of the native kernel. It is also a usable
// W4A4 path where there is no FP4 tensor core (Hopper): dequantize at the fragment, FP32 promotion per 16-block.
//
// One m16n8k64 step, per 16-block b (four per step), exactly:
//   part = sum_{k in b} e2m1(a) * e2m1(w)            two mma.sync.m16n8k16 f16 (HMMA): the nibbles widened to exact
//                                                    f16 (bit moves give value * 2**-14, one f16x2 multiply by 2**14
//                                                    makes every nonzero value normal); every product is a multiple
//                                                    of 1/4 up to 36 and the sum below 576, so the tensor core adds
//                                                    them exactly, in any order
//   d    = fma(part, sa * sb, d)                     FP32 promotion: one rounding per block, blocks in k order
// which is fp8lab.kernels.mma_reference's "per_block" rounding, bit for bit. The hardware OMMA's internal rounding
// is not documented; mma_reference says what the lab assumes about it.
//
// In the OMMA layout lane t holds k 8t..8t+7 (and 32 + 8t..): block b lives in the lanes with t >> 1 == b & 1 only.
// An m16n8k16 MMA sums over all four lanes of a quad, so for block b the other two lanes contribute zeros: two
// HMMAs per block (nibbles 0-3, then 4-7 of each owning lane), eight per k-step instead of one OMMA.
// Scales: lane (g, t) holds row g + 8 (lane & 1)'s and col g's codes (the OMMA layout); its accumulators need rows
// g, g + 8 and cols 2t, 2t + 1: four shuffles from lanes 4g, 4g + 1, 8t, 8t + 4.
//
// Launch: as gemm_w4a4.cu. Offline check: python -m fp8lab.kernels.sass --source gemm_w4a4_emu.cu --arch sm_90
#include "gemm_w4a4_common.cuh"

// Nibbles i and i + 1 of q (i even) -> f16x2 of their E2M1 values, exact: the 3 value bits at f16 bits 9..11 and the
// sign at bit 15 are the value times 2**-14 (code 1, 0.5, an f16 subnormal), then one mul.rn.f16x2 by 2**14 (exact,
// a power of two; f16 arithmetic keeps subnormals) so the MMA sees only normal values. First nibble in the low half.
__device__ __forceinline__ u32 e2m1_pair_f16(u32 q, int i) {
    const u32 lo = (q >> (4 * i)) & 0xFu, hi = (q >> (4 * i + 4)) & 0xFu;
    const u32 v = ((lo & 7u) << 9) | ((lo & 8u) << 12) | ((hi & 7u) << 25) | ((hi & 8u) << 28);
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(v), "r"(0x74007400u));  // f16 2**14 = 0x7400 in both halves
    return d;
}

struct MmaNvf4Emu {
    __device__ static void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1, u32 sfa, u32 sfb) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const u32 sa0 = __shfl_sync(0xFFFFFFFFu, sfa, 4 * g), sa1 = __shfl_sync(0xFFFFFFFFu, sfa, 4 * g + 1);
        const u32 sb0 = __shfl_sync(0xFFFFFFFFu, sfb, 8 * t), sb1 = __shfl_sync(0xFFFFFFFFu, sfb, 8 * t + 4);
#pragma unroll
        for (int jb = 0; jb < 4; ++jb) {
            const bool own = (t >> 1) == (jb & 1);
            const u32 wa0 = own ? (jb < 2 ? a[0] : a[2]) : 0u;  // row g
            const u32 wa1 = own ? (jb < 2 ? a[1] : a[3]) : 0u;  // row g + 8
            const u32 wb = jb < 2 ? b0 : b1;                     // col g
            float p[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int h = 0; h < 2; ++h)
                mma_f16_16816(p, e2m1_pair_f16(wa0, 4 * h), e2m1_pair_f16(wa1, 4 * h), e2m1_pair_f16(wa0, 4 * h + 2),
                              e2m1_pair_f16(wa1, 4 * h + 2), e2m1_pair_f16(wb, 4 * h), e2m1_pair_f16(wb, 4 * h + 2));
            const float ra = e4m3_decode((sa0 >> (8 * jb)) & 0xFFu), rb = e4m3_decode((sa1 >> (8 * jb)) & 0xFFu);
            const float c0 = e4m3_decode((sb0 >> (8 * jb)) & 0xFFu), c1 = e4m3_decode((sb1 >> (8 * jb)) & 0xFFu);
            d[0] = f_fma(p[0], f_mul(ra, c0), d[0]);  // (row g, col 2t)
            d[1] = f_fma(p[1], f_mul(ra, c1), d[1]);  // (row g, col 2t + 1)
            d[2] = f_fma(p[2], f_mul(rb, c0), d[2]);  // (row g + 8, col 2t)
            d[3] = f_fma(p[3], f_mul(rb, c1), d[3]);  // (row g + 8, col 2t + 1)
        }
    }
};

W4A4_ENTRY(w4a4_emu, MmaNvf4Emu)
