// gemm_w4a4_common.cuh -- the W4A4 NVFP4 GEMM skeleton shared by the native kernel (gemm_w4a4.cu: the block-scaled
// mma.sync of sm_120a / sm_121a, SASS OMMA.SF) and its portable emulation (gemm_w4a4_emu.cu: any arch, checked on the
// H200). Both run EXACTLY this code -- tiles, loads, fragment registers, scale registers, epilogue -- and differ
// only in the MMA functor they pass, so the H200 run of the emulation checks everything but the instruction itself.
//
//   C[M, N] (bf16) = (gsa * gsb) * sum over 16-blocks b of  sum_{k in b} (a[m, k] * sa[m, b]) * (w[n, k] * sb[n, b])
//   A: NVFP4 activations [M, K/2] packed (element 2i in the LOW nibble), sa [M, K/16] E4M3 codes, gsa fp32
//   W: NVFP4 weights     [N, K/2] packed,                                  sb [N, K/16] E4M3 codes, gsb fp32
// FP32 accumulation; the per-tensor global scales are applied once, in the epilogue (alpha = gsa * gsb, fp32).
//
// Tiling (gemm_w8a8_common.cuh's, reused byte for byte): a 128 x 128 block tile, 8 warps of 64 x 32, a k-step of 128
// BYTES per row = 256 NVFP4 elements = 16 scale blocks; 128-byte-swizzled shared memory, filled by cp.async. A
// packed NVFP4 row is laid out like an FP8 row with two elements per byte, and the m16n8k64 e2m1 fragment is the
// m16n8k32 e4m3 fragment byte for byte (ptx_sm120a.cuh lists it), so the W8A8 kernel's ldmatrix addressing delivers
// the FP4 fragments unchanged: 32 bytes of a row = 64 elements = one MMA k-step.
// Scales: a stage also holds the 16 scale codes of each of its 128 A rows and 128 W rows (2 KB each). Lane (g, t)
// reads, per 16-row m tile, the 16 codes of row g + 8 (lane & 1) and, per 8-col n tile, those of col g (one 16-byte
// LDS each): word ks of them is the scale register of k-step ks (byte j = k-block j), the layout the MMA wants.
// Shared memory per stage: 32 KB of packed data + 4 KB of scale codes; 2 stages (73 KB with alignment slack) fit
// the 99 KB a block may use on sm_120 / sm_121 (NVIDIA's Blackwell tuning guide, compute capability 12.0).
// Requirements (checked by gemm_w4a4.py): N % 128 == 0, K % 256 == 0; any M (rows past M are zero-filled, scale
// code 0, and not stored).
#pragma once

#include "fp8_decode.cuh"
#include "gemm_w8a8_common.cuh"

#define W4_SCALE_BYTES (BM * 16)                           // 128 rows x 16 scale codes (256 k)
#define W4_STAGE_BYTES (STAGE_BYTES + 2 * W4_SCALE_BYTES)  // 36 KB
#define W4_STAGES 2

__device__ __forceinline__ uint4 lds128(u32 addr) {
    uint4 r;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(addr));
    return r;
}

// The 16 scale codes of k-step kb (256 k) of the A rows m0.. and the W rows n0..: one 16-byte cp.async per row,
// thread tid < 128 an A row, the others a W row. KS = K / 16 codes per row.
__device__ __forceinline__ void load_scales(u32 sSA, u32 sSB, const u8* __restrict__ SA, const u8* __restrict__ SB,
                                            int M, int KS, int m0, int n0, int kb, int tid) {
    if (tid < BM) {
        const bool ok = m0 + tid < M;
        cp_async16_zfill(sSA + tid * 16, SA + (size_t)(ok ? m0 + tid : 0) * KS + kb * 16, ok);
    } else {
        const int r = tid - BM;
        cp_async16_zfill(sSB + r * 16, SB + (size_t)(n0 + r) * KS + kb * 16, true);
    }
}

// The body. MMA::mma(d, a[4], b0, b1, sfa, sfb) accumulates one m16n8k64 block-scaled product into d.
template <class MMA>
__device__ __forceinline__ void w4a4_body(const u8* __restrict__ A, const u8* __restrict__ SA, const float* __restrict__ gsa,
                                          const u8* __restrict__ B, const u8* __restrict__ SB, const float* __restrict__ gsb,
                                          u16* __restrict__ C, int M, int N, int K) {
    const u32 base = dyn_smem_1024();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps, 64 x 32 each
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int KB = K / 256, Kb = K / 2, KS = K / 16;

    float acc[4][4][4];
    zero<64>(&acc[0][0][0]);
    auto issue = [&](int s, int kb) {
        const u32 st = base + s * W4_STAGE_BYTES;
        load_stage<256>(st, st + TILE_BYTES, A, B, M, Kb, m0, n0, kb * BK, tid);
        load_scales(st + STAGE_BYTES, st + STAGE_BYTES + W4_SCALE_BYTES, SA, SB, M, KS, m0, n0, kb, tid);
    };
#pragma unroll
    for (int s = 0; s < W4_STAGES - 1; ++s) {
        if (s < KB) issue(s, s);
        cp_async_commit();
    }
    for (int kb = 0; kb < KB; ++kb) {
        cp_async_wait<W4_STAGES - 2>();
        __syncthreads();  // stage kb landed for everyone; everyone is done reading stage kb-1
        {
            const int nk = kb + W4_STAGES - 1;
            if (nk < KB) issue(nk % W4_STAGES, nk);
            cp_async_commit();
        }
        const u32 sA = base + (kb % W4_STAGES) * W4_STAGE_BYTES, sB = sA + TILE_BYTES;
        const u32 sSA = sA + STAGE_BYTES, sSB = sSA + W4_SCALE_BYTES;
        uint4 sfa[4], sfb[4];  // word ks: the scale register of k-step ks
#pragma unroll
        for (int i = 0; i < 4; ++i) sfa[i] = lds128(sSA + (wm * 64 + 16 * i + g + 8 * (lane & 1)) * 16);
#pragma unroll
        for (int j = 0; j < 4; ++j) sfb[j] = lds128(sSB + (wn * 32 + 8 * j + g) * 16);
#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks) {  // 32 bytes = 64 elements per MMA k-step
            u32 a[4][4], b[4][2];
            ldmatrix_frags_64x32(a, b, sA, sB, wm, wn, lane, ks);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) MMA::mma(acc[i][j], a[i], b[j][0], b[j][1], word_of(sfa[i], ks), word_of(sfb[j], ks));
        }
    }
    cp_async_wait<0>();

    const float alpha = f_mul(__ldg(gsa), __ldg(gsb));  // the global scales, once (fp32, IEEE, no flush)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int row = m0 + wm * 64 + 16 * i + g, col = n0 + wn * 32 + 8 * j + 2 * t;
            store_bf16x2(C, N, M, row, col, f_mul(acc[i][j][0], alpha), f_mul(acc[i][j][1], alpha));
            store_bf16x2(C, N, M, row + 8, col, f_mul(acc[i][j][2], alpha), f_mul(acc[i][j][3], alpha));
        }
}

#define W4A4_ENTRY(NAME, MMA)                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                           \
    NAME(const u8* __restrict__ A, const u8* __restrict__ SA, const float* __restrict__ gsa, const u8* __restrict__ B, \
         const u8* __restrict__ SB, const float* __restrict__ gsb, u16* __restrict__ C, int M, int N, int K) {      \
        w4a4_body<MMA>(A, SA, gsa, B, SB, gsb, C, M, N, K);                                                        \
    }
