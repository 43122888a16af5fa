// gemm_w8a8.cu -- W8A8 block-scaled GEMM for prefill (seed 001's arithmetic), version A: mma.sync.
//
//   C[M, N] (bf16) = sum over 128-wide k-blocks kb of  sa[m, kb] * sb[n/128, kb] * (A[m, kb-block] . B[n, kb-block])
//   A: E4M3 activations [M, K] with 1x128 fp32 scales sa [M, K/128] (any strides: row- or column-major)
//   B: E4M3 weights     [N, K] with 128x128 fp32 scales sb [N/128, K/128] (row-major)
//
// FP32 promotion (DeepGEMM): each k-block's partial product is accumulated in its own fp32 registers
// (`part`), then acc += part * (sa * sb). The tile's k-step is exactly one scale block (BK = 128).
//
// Two kernels with the SAME structure (128x128 block tile, 8 warps of 64x32, 4-stage cp.async
// pipeline into 128-byte-swizzled shared memory, ldmatrix fragments, the same promotion and epilogue):
//   w8a8_mma_fp8   mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 -- the FP8 instruction. It is
//                  native on sm_89 / sm_120 / sm_121; on sm_90 ptxas EMULATES it (the SASS shows
//                  conversions and HMMA, no FP8 tensor-core instruction): the label says FP8, the chip
//                  does not. Hopper's FP8 tensor-core path is wgmma (gemm_w8a8_wgmma.cu).
//   w8a8_mma_bf16  the same fragments widened to bf16 in registers (exact: every e4m3 value is a bf16)
//                  and fed to mma.sync.m16n8k16 bf16 -- the "dequant to BF16" path written by hand.
//
// Tiling, loader, swizzle, promotion and epilogue are shared with the wgmma kernels (gemm_w8a8_common.cuh).
//
//   w8a8_mma_fp8_s3  w8a8_mma_fp8 with 3 pipeline stages instead of 4: 97 KB of shared memory, inside the 99 KB a
//                    block may use on sm_89 and sm_120 / sm_121 (the GB10), where the 4-stage kernel's 129 KB does
//                    not fit. The same promotion (1 x 128 activation x 128 x 128 weight scales, FP32), so the
//                    QMMA path of the GB10 is this kernel (fp8lab.kernels.native picks it by the device's limit).
//
// Requirements (checked by the Python wrapper): N % 128 == 0, K % 128 == 0; any M (rows past M are
// zero-filled by cp.async and not stored).

#include "fp8_decode.cuh"
#include "gemm_w8a8_common.cuh"

#define STAGES_A 4

template <bool FP8, int STAGES = STAGES_A>
__device__ __forceinline__ void w8a8_mma_body(const u8* __restrict__ A, const float* __restrict__ sa,
                                              long long sa_sm, long long sa_sk, const u8* __restrict__ B,
                                              const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K) {
    const u32 base = dyn_smem_1024();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps, 64 x 32 each
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int KB = K / BK;

    float acc[4][4][4];
    zero<64>(&acc[0][0][0]);

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KB) load_stage<256>(base + s * STAGE_BYTES, base + s * STAGE_BYTES + TILE_BYTES, A, B, M, K, m0, n0, s * BK, tid);
        cp_async_commit();
    }

    for (int kb = 0; kb < KB; ++kb) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kb landed for everyone; everyone is done reading stage kb-1
        {
            const int nk = kb + STAGES - 1;
            const int s = nk % STAGES;
            if (nk < KB) load_stage<256>(base + s * STAGE_BYTES, base + s * STAGE_BYTES + TILE_BYTES, A, B, M, K, m0, n0, nk * BK, tid);
            cp_async_commit();
        }
        // this k-block's scales (latency hidden behind the MMAs)
        float sc[4][2];
        const float sbv = __ldg(sb + (size_t)(n0 / BN) * KB + kb);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm * 64 + 16 * i + g + 8 * h;
                sc[i][h] = row < M ? __ldg(sa + row * sa_sm + kb * sa_sk) : 0.f;
            }

        const u32 sA = base + (kb % STAGES) * STAGE_BYTES, sB = sA + TILE_BYTES;
        float part[4][4][4];
        zero<64>(&part[0][0][0]);

#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks) {
            u32 a[4][4], b[4][2];
            ldmatrix_frags_64x32(a, b, sA, sB, wm, wn, lane, ks);
            if (FP8) {
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) mma_e4m3_16832(part[i][j], a[i], b[j][0], b[j][1]);
            } else {
                // widen: fp8 word (k 4t..4t+3) -> (4t, 4t+2) as logical k (2t, 2t+1), (4t+1, 4t+3) as (2t+8, 2t+9)
                u32 ab[4][2][4], bb[4][2][2];
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int hk = 0; hk < 2; ++hk) {  // hk: fp8 k 0..15 / 16..31 of this k32 step
                        e4m3x4_to_bf16(a[i][2 * hk + 0], ab[i][hk][0], ab[i][hk][2]);  // row g
                        e4m3x4_to_bf16(a[i][2 * hk + 1], ab[i][hk][1], ab[i][hk][3]);  // row g+8
                    }
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int hk = 0; hk < 2; ++hk) e4m3x4_to_bf16(b[j][hk], bb[j][hk][0], bb[j][hk][1]);
#pragma unroll
                for (int hk = 0; hk < 2; ++hk)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            mma_bf16_16816(part[i][j], ab[i][hk][0], ab[i][hk][1], ab[i][hk][2], ab[i][hk][3],
                                           bb[j][hk][0], bb[j][hk][1]);
            }
        }
        // FP32 promotion: acc += part * (sa * sb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float s0 = sc[i][0] * sbv, s1 = sc[i][1] * sbv;
#pragma unroll
            for (int j = 0; j < 4; ++j) promote4(acc[i][j], part[i][j], s0, s1);
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int row = m0 + wm * 64 + 16 * i + g, col = n0 + wn * 32 + 8 * j + 2 * t;
            store_bf16x2(C, N, M, row, col, acc[i][j][0], acc[i][j][1]);
            store_bf16x2(C, N, M, row + 8, col, acc[i][j][2], acc[i][j][3]);
        }
}

// grid = (ceil(M/128), N/128), block = 256, dynamic smem = STAGES_A * 32 KB + 1 KB (alignment slack)
extern "C" __global__ void __launch_bounds__(256, 1)
w8a8_mma_fp8(const u8* __restrict__ A, const float* __restrict__ sa, long long sa_sm, long long sa_sk,
             const u8* __restrict__ B, const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K) {
    w8a8_mma_body<true>(A, sa, sa_sm, sa_sk, B, sb, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(256, 1)
w8a8_mma_bf16(const u8* __restrict__ A, const float* __restrict__ sa, long long sa_sm, long long sa_sk,
              const u8* __restrict__ B, const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K) {
    w8a8_mma_body<false>(A, sa, sa_sm, sa_sk, B, sb, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(256, 1)
w8a8_mma_fp8_s3(const u8* __restrict__ A, const float* __restrict__ sa, long long sa_sm, long long sa_sk,
                const u8* __restrict__ B, const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K) {
    w8a8_mma_body<true, 3>(A, sa, sa_sm, sa_sk, B, sb, C, M, N, K);
}
