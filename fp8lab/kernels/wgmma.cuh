// wgmma.cuh -- Hopper's warpgroup matrix multiply (wgmma, sm_90a) as the W8A8 kernels use it: shared-memory
// descriptors for 128-byte-swizzled K-major tiles, the fences around the asynchronous window, the
// m64n128k32, m64n192k32 and m64n96k32 e4m3 instructions, one k-block's issue (4 k-steps) and the FP32 promotion of its
// partial sums (promote_split where a sub-tile spans two weight-scale blocks).
// Included by gemm_w8a8_wgmma.cu (cp.async kernels) and gemm_w8a8_tma.cu (TMA kernels); sm_90a only.
//
// Descriptor (64 bits): start address >> 4 (bits 0-13), leading-dimension offset (bits 16-29; unused for
// K-major swizzled layouts), stride offset >> 4 (bits 32-45) = 1024 bytes between 8-row atoms, swizzle mode
// (bits 62-63) = 1 for 128B. Stepping K by 32 bytes inside the 128-byte row is +2 on the start-address field
// (the swizzle is applied to absolute address bits, so tiles must be 1024-byte aligned).
#pragma once

#include "gemm_w8a8_common.cuh"

__device__ __forceinline__ u64 make_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// Keep the compiler from moving accumulator reads/writes across the asynchronous wgmma window.
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The m64nNk32 e4m3 instructions: D[64xN] (+)= A[64x32] . B[Nx32]^T, both e4m3 K-major from shared memory, fp32
// accumulate into d (N / 2 registers per thread); scale_d = 0 overwrites D (the first k-step of a k-block), 1
// accumulates. One macro writes each width: its register list, its operands, the indices of da / db / scale_d.
#define FP8LAB_R00 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FP8LAB_R16 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FP8LAB_R32 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define FP8LAB_R48 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FP8LAB_R64 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define FP8LAB_R80 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FP8LAB_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FP8LAB_D16(i) FP8LAB_D4(i), FP8LAB_D4(i + 4), FP8LAB_D4(i + 8), FP8LAB_D4(i + 12)
#define FP8LAB_WGMMA_E4M3(N, R, REGS, A, B, P, ...)                                                                  \
    __device__ __forceinline__ void wgmma_m64n##N##k32_e4m3(float (&d)[R], u64 da, u64 db, int scale_d) {          \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                                  \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, %" #A ", %" #B ", p, 1, 1;\n}\n" \
                     : __VA_ARGS__                                                                                  \
                     : "l"(da), "l"(db), "r"(scale_d));                                                             \
    }
FP8LAB_WGMMA_E4M3(128, 64, FP8LAB_R00 ", " FP8LAB_R16 ", " FP8LAB_R32 ", " FP8LAB_R48, 64, 65, 66,
                  FP8LAB_D16(0), FP8LAB_D16(16), FP8LAB_D16(32), FP8LAB_D16(48))
// 192 columns: 96 accumulators per thread (the one sub-tile of a 128 x 192 tile)
FP8LAB_WGMMA_E4M3(192, 96, FP8LAB_R00 ", " FP8LAB_R16 ", " FP8LAB_R32 ", " FP8LAB_R48 ", " FP8LAB_R64 ", " FP8LAB_R80, 96, 97,
                  98, FP8LAB_D16(0), FP8LAB_D16(16), FP8LAB_D16(32), FP8LAB_D16(48), FP8LAB_D16(64), FP8LAB_D16(80))
// 96 columns into d[0 .. 47] of 64 (d[48 ..] untouched): the narrow half of a 224-wide tile
FP8LAB_WGMMA_E4M3(96, 64, FP8LAB_R00 ", " FP8LAB_R16 ", " FP8LAB_R32, 48, 49, 50,
                  FP8LAB_D16(0), FP8LAB_D16(16), FP8LAB_D16(32))

// One warpgroup issues a 128-deep k-block of a 64 x N sub-tile: 4 wgmma k-steps (k = 0, 32, 64, 96) into p,
// committed as one group. N = 128 (p: 64 registers), 96 (the first 48 of 64) or 192 (96 registers).
template <int N, int R>
__device__ __forceinline__ void wg_issue_n(float (&p)[R], u32 sA_wg, u32 sB) {
    static_assert((N == 128 && R == 64) || (N == 96 && R == 64) || (N == 192 && R == 96), "m64n128, m64n96, m64n192");
    const u64 da = make_desc(sA_wg), db = make_desc(sB);
    fence_regs(p);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if constexpr (N == 128) wgmma_m64n128k32_e4m3(p, da + 2 * k, db + 2 * k, k > 0);
        else if constexpr (N == 96) wgmma_m64n96k32_e4m3(p, da + 2 * k, db + 2 * k, k > 0);
        else wgmma_m64n192k32_e4m3(p, da + 2 * k, db + 2 * k, k > 0);
    }
    wgmma_commit();
}
__device__ __forceinline__ void wg_issue(float (&p)[64], u32 sA_wg, u32 sB) { wg_issue_n<128>(p, sA_wg, sB); }

__device__ __forceinline__ void promote(float (&acc)[64], float (&p)[64], float s0, float s1) {
    fence_regs(p);  // after wgmma.wait_group: the compiler may not read p any earlier
#pragma unroll
    for (int j = 0; j < 16; ++j) promote4(acc + 4 * j, p + 4 * j, s0, s1);
}

// The promotion of a sub-tile whose columns span two 128-wide weight-scale blocks: column groups j < JB (8 columns
// each, the thread's accumulators 4j .. 4j + 3) take the first block's scales (s0, s1 for rows g, g + 8), the rest
// the second's (t0, t1). JB is a template argument: the choice costs no instruction per FFMA.
template <int R, int JB, int USED = R>
__device__ __forceinline__ void promote_split(float (&acc)[R], float (&p)[R], float s0, float s1, float t0, float t1) {
    fence_regs(p);
#pragma unroll
    for (int j = 0; j < USED / 4; ++j) promote4(acc + 4 * j, p + 4 * j, j < JB ? s0 : t0, j < JB ? s1 : t1);
}
// The same with the boundary known only at run time (jb = 4, 8, 12 or 16 column groups in the first block): a switch
// over straight-compiled promotions, one branch per call, none per FFMA. USED: the accumulators the sub-tile has.
template <int USED>
__device__ __forceinline__ void promote_split_rt(float (&acc)[64], float (&p)[64], int jb, float s0, float s1, float t0,
                                                float t1) {
    switch (jb) {
        case 4: promote_split<64, 4, USED>(acc, p, s0, s1, t0, t1); break;
        case 8: promote_split<64, 8, USED>(acc, p, s0, s1, t0, t1); break;
        case 12: promote_split<64, 12, USED>(acc, p, s0, s1, t0, t1); break;
        default: promote_split<64, 16, USED>(acc, p, s0, s1, t0, t1); break;
    }
}
