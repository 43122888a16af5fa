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

__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], u64 da, u64 db, int scale_d) {
    // D[64x128] (+)= A[64x32] . B[128x32]^T, both e4m3 K-major from shared memory, fp32 accumulate.
    // scale_d = 0 overwrites D (the first k-step of a k-block), 1 accumulates.
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n192k32_e4m3(float (&d)[96], u64 da, u64 db, int scale_d) {
    // D[64x192] (+)= A[64x32] . B[192x32]^T: the instruction above, 192 columns wide (96 accumulators per thread).
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
        "}, %96, %97, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n96k32_e4m3(float (&d)[64], u64 da, u64 db, int scale_d) {
    // D[64x96] (+)= A[64x32] . B[96x32]^T into d[0 .. 47] (d[48 ..] untouched): the narrow half of a 224-wide tile.
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
        "}, %48, %49, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(da), "l"(db), "r"(scale_d));
}

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
