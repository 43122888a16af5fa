// gemm_w8a8_common.cuh -- what the W8A8 block-scaled GEMM kernels share (gemm_w8a8.cu: mma.sync; gemm_w8a8_wgmma.cu:
// wgmma): the 128 x 128 x 128 tiling, the cp.async stage loader into 128-byte-swizzled shared memory, the FP32
// promotion of a k-block's partial sums, and the bf16 epilogue.
//
// Shared memory layout: a tile row is 128 bytes of K; 16-byte chunk c of row r is stored at chunk position
// c ^ (r & 7) -- the 128B swizzle that wgmma descriptors expect (SWIZZLE_128B, 8-row atoms of 1024 bytes), and
// which also makes the 8 rows an ldmatrix reads land in 8 different bank groups.
#pragma once

#include "ptx.cuh"

#define BM 128
#define BN 128
#define BK 128
#define TILE_BYTES (BM * BK)              // 16 KB, A and B tiles alike
#define STAGE_BYTES (2 * TILE_BYTES)      // 32 KB per pipeline stage

__device__ __forceinline__ u32 swz(int r, int c) { return (u32)(r * 128 + ((c ^ (r & 7)) << 4)); }

// The shared address of the dynamic shared memory, rounded up to 1024 bytes (the swizzle atoms' alignment).
__device__ __forceinline__ u32 dyn_smem_1024() {
    extern __shared__ __align__(1024) u8 smem_raw[];
    return (smem_addr(smem_raw) + 1023u) & ~1023u;
}

// The mma.sync fragments of k-step ks (32 bytes of k) of warp (wm, wn)'s 64 x 32 tile, by ldmatrix from the
// swizzled stage tiles sA / sB: a[i] = A rows wm*64 + 16i .. +15 (m-tile i), b[j] = B rows wn*32 + 8j .. +7 (n-tile j).
__device__ __forceinline__ void ldmatrix_frags_64x32(u32 (&a)[4][4], u32 (&b)[4][2], u32 sA, u32 sB, int wm, int wn, int lane,
                                                     int ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = wm * 64 + 16 * i + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(a[i], sA + swz(r, 2 * ks + (lane >> 4)));
    }
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
        const int r = wn * 32 + 16 * jj + (lane & 7) + (lane >> 4) * 8;
        u32 q[4];
        ldmatrix_x4(q, sB + swz(r, 2 * ks + ((lane >> 3) & 1)));
        b[2 * jj][0] = q[0]; b[2 * jj][1] = q[1];
        b[2 * jj + 1][0] = q[2]; b[2 * jj + 1][1] = q[3];
    }
}

// One ROWS_A x 128-byte tile of A (rows m0..) and a 128 x 128-byte tile of B (rows n0..) at k0,
// by NTHR threads starting at tid.
template <int NTHR, int ROWS_A = BM>
__device__ __forceinline__ void load_stage(u32 sA, u32 sB, const u8* __restrict__ A, const u8* __restrict__ B,
                                           int M, int K, int m0, int n0, int k0, int tid) {
#pragma unroll
    for (int i = 0; i < (ROWS_A * 8) / NTHR; ++i) {
        const int idx = tid + i * NTHR, r = idx >> 3, c = idx & 7;
        const bool ok = m0 + r < M;
        cp_async16_zfill(sA + swz(r, c), A + (size_t)(ok ? m0 + r : 0) * K + k0 + c * 16, ok);
    }
#pragma unroll
    for (int i = 0; i < (BN * 8) / NTHR; ++i) {
        const int idx = tid + i * NTHR, r = idx >> 3, c = idx & 7;
        cp_async16_zfill(sB + swz(r, c), B + (size_t)(n0 + r) * K + k0 + c * 16, true);
    }
}

__device__ __forceinline__ void store_bf16x2(u16* C, int N, int M, int row, int col, float v0, float v1) {
    if (row < M) *reinterpret_cast<u32*>(C + (size_t)row * N + col) = bf16x2_rn(v0, v1);
}

// FP32 promotion (DeepGEMM): acc += part * s for one m16 x n8 fragment, rows g (s0) and g + 8 (s1).
__device__ __forceinline__ void promote4(float* acc, const float* part, float s0, float s1) {
    acc[0] = fmaf(part[0], s0, acc[0]);
    acc[1] = fmaf(part[1], s0, acc[1]);
    acc[2] = fmaf(part[2], s1, acc[2]);
    acc[3] = fmaf(part[3], s1, acc[3]);
}
// Zero N accumulators (an array of any shape: pass its first element).
template <int N>
__device__ __forceinline__ void zero(float* a) {
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = 0.f;
}
