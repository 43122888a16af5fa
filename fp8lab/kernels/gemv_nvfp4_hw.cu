// gemv_nvfp4_hw.cu -- the W4A16 NVFP4 decode GEMV with the hardware E2M1 decode (sm_100a / sm_120a / sm_121a).
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W)^T,  M = 1..16, fp32 accumulation -- gemv_nvfp4.cu's contract
//
// The same skeleton as gemv_nvfp4.cu version 2 with direct loads (gemv_common.cuh: work split, split-K
// epilogue) and the same arithmetic: each weight becomes w * 2**-8 = e2m1 * e4m3(scale) * 2**-8, EXACT in bf16,
// mma.sync.m16n8k16 bf16 with fp32 accumulation, global scale * 2**8 on the fp32 result. What changes is how a
// nibble becomes a bf16:
//   * cvt.rn.f16x2.e2m1x2 (SASS F2FP.F16.E2M1.UNPACK_B) turns one byte -- elements 2i (low nibble) and 2i+1 --
//     into two exact f16 values. An E2M1 value in f16 has a zero low byte and only the top mantissa bit, so
//     moving f16's 5-bit exponent and mantissa down 3 places gives the bf16 of value * 2**-112 (f16 bias 15, bf16
//     bias 127), the sign staying at bit 15: (h >> 3) & 0x0FFF0FFF | h & 0x80008000, 0.5 included (normal in f16).
//   * the block scale becomes s' = e4m3 * 2**104 (hardware e4m3x2 -> f16x2, exact, then bf16x2 * 2**104), so one
//     bf16x2 multiply gives w * 2**-8 exactly, as in version 2.
//   * a byte holds two CONSECUTIVE elements, which is the pair order mma.sync's fragments want (a0 = k 2t, 2t+1):
//     the activations go in as loaded, with none of version 2's PRMT pair shuffles.
// Per 32-bit word (8 nibbles): 4 conversions, 8 LOP3 and 7 shifts written as mul.hi (IMAD.HI: the FMA pipe, not the
// logic pipe), against version 2's 11 logic ops plus 4 PRMTs per token tile. Read in SASS (`python -m
// fp8lab.kernels.sass --summary`, the "loop" of each kernel): fewer logic ops per MMA than version 2, but more
// instructions in total, because f16 -> bf16 has no instruction: the E2M1 -> f16 conversion helps an f16 or FP4
// datapath more than a bf16 one.
// Whether this is faster on a GB10 depends on its pipes' issue rates: not measured here (no GB10).
//
// Each iteration covers 128 C k per row: lane t reads 16 bytes (32 elements) at byte offsets c*64 + t*16 (c < C),
// as version 2 does; scales: two bytes per chunk (blocks (c*128 + t*32)/16 and +1).
// Launch: grid = ceil(N / (16 R)), block = 32 S, dynamic shared memory = S * R * NT * 512 (the split-K reduction).

#include "gemv_common.cuh"
#include "ptx_sm120a.cuh"

#define FP8LAB_E2M1_HW_SHIFT 112  // bf16 of (h >> 3) is the E2M1 value times 2**-112

// Byte (bits 0..7) of two nibbles -> bf16x2 of their E2M1 values times 2**-112, low nibble in the low half.
__device__ __forceinline__ u32 mulhi(u32 a, u32 b) {  // (a * b) >> 32: a right shift by a power of two on the FMA pipe
    u32 d;
    asm("mul.hi.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 e2m1x2_bf16_hw(u32 byte) {
    const u32 h = e2m1x2_to_f16x2(byte);
    return (mulhi(h, 1u << 29) & 0x0FFF0FFFu) | (h & 0x80008000u);
}

// Two E4M3 scale codes (low byte = first block) -> bf16x2 of e4m3 * 2**(112 - 8), both exact (fp8_decode.cuh's
// scale2_bf16x2 does the same for version 2's 2**-126 representation).
__device__ __forceinline__ u32 scale2_bf16x2_hw(u32 two_codes) {
    u32 h2;
    asm("{ .reg .b16 s; cvt.u16.u32 s, %1; cvt.rn.f16x2.e4m3x2 %0, s; }" : "=r"(h2) : "r"(two_codes));
    float lo, hi;
    asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }" : "=f"(lo), "=f"(hi) : "r"(h2));
    return bf16x2_mul(bf16x2_rn(lo, hi),
                      ((u32)(127 + FP8LAB_E2M1_HW_SHIFT - FP8LAB_E2M1_GEMV_SHIFT) << 7) * 0x10001u);  // x 2**104
}

// One 64-byte chunk (128 k, two 16-blocks): 4 words x R x NT x 2 MMAs into acc. wr[r][h]: 16 weight bytes of row tile
// r, row g (h = 0) / g + 8 (h = 1); xc[nt][w]: 8 activations per word w; sc[r][h][b]: bf16x2 scale of 16-block b.
template <int R, int NT>
__device__ __forceinline__ void nvfp4_hw_chunk_mma(float (&acc)[R][NT][4], const uint4 (&wr)[R][2],
                                                   const uint4 (&xc)[NT][4], const u32 (&sc)[R][2][2]) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const u32 q0 = word_of(wr[r][0], w), q1 = word_of(wr[r][1], w);
            const u32 sa = sc[r][0][w >> 1], sb = sc[r][1][w >> 1];  // words 0,1: the first 16-block; 2,3: the second
            u32 p0[4], p1[4];  // (element 2j, 2j+1) of the word, rows g / g+8
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                p0[j] = bf16x2_mul(e2m1x2_bf16_hw(j ? mulhi(q0, 1u << (32 - 8 * j)) : q0), sa);
                p1[j] = bf16x2_mul(e2m1x2_bf16_hw(j ? mulhi(q1, 1u << (32 - 8 * j)) : q1), sb);
            }
            // MMA 1: logical k (2t, 2t+1) <- elements 0,1 of the word, (2t+8, 2t+9) <- elements 2,3; MMA 2: 4..7.
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint4& x = xc[nt][w];
                mma_bf16_16816(acc[r][nt], p0[0], p1[0], p0[1], p1[1], x.x, x.y);
                mma_bf16_16816(acc[r][nt], p0[2], p1[2], p0[3], p1[3], x.z, x.w);
            }
        }
    }
}

template <int R, int NT, int C>
__device__ __forceinline__ void gemv_nvfp4_hw_body(const u8* __restrict__ W, const u8* __restrict__ SC,
                                                   const float* __restrict__ gscale, const u16* __restrict__ X,
                                                   u16* __restrict__ Y, int M, int N, int K) {
    static_assert(C == 2 || C == 4, "C 64-byte chunks (128 k) per row per iteration");
    extern __shared__ float red_hw[];
    const GemvLane<R> L;
    const int KB = K / (128 * C);
    Nvfp4Walk<R, NT, C> wk(L, W, SC, X, M, N, K);
    float acc[R][NT][4];
    zero_tiles(acc);

    for (int kb = L.warp; kb < KB; kb += L.S) {
        uint4 wv[R * 2 * C];
        u32 sv[R][2][C];
        nvfp4_load_direct<R, C>(wv, sv, wk.wp, wk.sp, wk.wstep, wk.sstep);
#pragma unroll
        for (int c = 0; c < C; ++c) {
            uint4 xv[NT][4];
            load_act_chunk(xv, wk.xp, c);
            uint4 wr[R][2];
            u32 sc[R][2][2];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) wr[r][h] = wv[(r * 2 + h) * C + c];
            chunk_scales(sc, sv, c, [](u32 codes) { return scale2_bf16x2_hw(codes); });
            nvfp4_hw_chunk_mma(acc, wr, xv, sc);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) wk.xp[nt] += wk.xstep;
    }
    splitk_store(acc, red_hw, L, M, N, Y, Nvfp4Out(gscale));
}

#define GEMV_NVFP4_HW(R, NT, C)                                                                                \
    extern "C" __global__ void __launch_bounds__(256) gemv_nvfp4_hw_r##R##_nt##NT##_c##C(GEMV_NVFP4_PARAMS) { \
        gemv_nvfp4_hw_body<R, NT, C>(GEMV_NVFP4_ARGS);                                                         \
    }

// The compiled configurations, from gemv_nvfp4_hw.py (KERNELS_HW: (R, NT, C)).
#if !defined(FP8LAB_GEMV_NVFP4_HW)
#error "the loader passes the instantiation list (gemv_nvfp4_hw.py KERNELS_HW) as a -D define"
#endif
FP8LAB_GEMV_NVFP4_HW
