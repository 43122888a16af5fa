// gemv_timeline.cuh -- a %globaltimer stamp per warp for the decode GEMV version 3 (gemv_v3.cu). Included only by
// the instrumented copy that fp8lab/kernels/gemv_timeline.py compiles from patched sources: the shipped kernel has
// none of this. Each warp's lane 0 writes four stamps (ns, the GPU-wide clock): entry, its first unit multiplied
// (the first bytes it asked for have arrived), its last unit multiplied (before the store or the stream-K fix-up),
// and its end; plus the SM it ran on. Warps that had no work write nothing (the Python side zeroes the arrays first).
#pragma once

#define V3_TL_MAX_WARPS 16384
__device__ unsigned long long v3_tl[V3_TL_MAX_WARPS * 4];
__device__ unsigned int v3_tl_sm[V3_TL_MAX_WARPS];

// The clock, read after `dep` exists: a stamp that closes a piece of work takes a value the work produced (an
// accumulator), so the read cannot move above the instructions that make it.
__device__ __forceinline__ unsigned long long tl_now(float dep) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "f"(dep) : "memory");
    return t;
}

__device__ __forceinline__ void tl_store(int wg, int lane, unsigned long long t0, unsigned long long t1,
                                         unsigned long long t2, unsigned long long t3) {
    if (lane != 0 || wg >= V3_TL_MAX_WARPS) return;
    unsigned int sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    v3_tl[wg * 4] = t0;
    v3_tl[wg * 4 + 1] = t1;
    v3_tl[wg * 4 + 2] = t2;
    v3_tl[wg * 4 + 3] = t3;
    v3_tl_sm[wg] = sm;
}
