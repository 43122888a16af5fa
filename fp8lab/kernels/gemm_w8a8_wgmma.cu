// gemm_w8a8_wgmma.cu -- W8A8 block-scaled GEMM, version B: Hopper's FP8 tensor cores through wgmma.
//
// Same arithmetic, tile (128 x 128, BK = 128 = one scale block), shared-memory layout (128-byte swizzle)
// and FP32 promotion as gemm_w8a8.cu (the common part is gemm_w8a8_common.cuh; the wgmma helpers, wgmma.cuh).
// Compiled for sm_90a only (declared in sources.py): wgmma and setmaxnreg exist only there.
//
//   wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3: a warpgroup (4 warps, 128 threads) multiplies a
//   64x32 A tile by a 128x32 B tile straight from shared memory. Operands are described by 64-bit
//   descriptors: start address >> 4 (bits 0-13), leading-dimension offset (bits 16-29; unused for
//   K-major swizzled layouts), stride offset >> 4 (bits 32-45) = 1024 bytes between 8-row atoms,
//   swizzle mode (bits 62-63) = 1 for 128B. Stepping K by 32 bytes inside the 128-byte row is a +2 on
//   the start-address field (the swizzle is applied to absolute address bits, so tiles are 1024-aligned).
//   Each warpgroup issues 4 of these per k-block (k = 0, 32, 64, 96) into `part`, waits, and promotes.
//
// Four kernels:
//   w8a8_wgmma        256 threads = 2 math warpgroups (64 rows each); all threads load with cp.async,
//                     a 4-stage pipeline kept in step by __syncthreads; wgmma -> wait -> promote in
//                     series (simple, the correctness anchor).
//   w8a8_wgmma_pipe   the same with 6 stages (loads 5 k-blocks ahead).
//   w8a8_wgmma_256    the same with a 256x128 block tile: each math warpgroup owns 128 rows (two m64 halves),
//                     171 instead of 128 FLOP per byte of L2 traffic.
//   w8a8_wgmma_ws     384 threads, warp-specialized like DeepGEMM (producer warpgroup + 2 math
//                     warpgroups, mbarrier full/empty pipeline, setmaxnreg), 6 stages.
// cp.async writes through the generic proxy and wgmma reads through the async proxy, so a
// fence.proxy.async.shared::cta separates them (see each kernel for who executes it).

#include "wgmma.cuh"

// One math warpgroup's k-block: 4 wgmma k-steps into part, wait for them, then acc += part * (sa_row * sb).
__device__ __forceinline__ void math_kblock(float (&acc)[64], float (&part)[64], u32 sA_wg, u32 sB,
                                            float s0, float s1) {
    wg_issue(part, sA_wg, sB);
    wgmma_wait<0>();
    promote(acc, part, s0, s1);
}

// Accumulator layout of m64nN: warp w of the warpgroup owns rows 16w..16w+15; d[4j..4j+3] are
// (row g, cols 8j+2t, 8j+2t+1) and (row g+8, the same cols), g = lane/4, t = lane%4.
__device__ __forceinline__ void store_tile(u16* C, int M, int N, int row0, int col0, const float (&acc)[64], int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int col = col0 + 8 * j + 2 * t;
        store_bf16x2(C, N, M, row0 + g, col, acc[4 * j + 0], acc[4 * j + 1]);
        store_bf16x2(C, N, M, row0 + g + 8, col, acc[4 * j + 2], acc[4 * j + 3]);
    }
}

// grid = (ceil(M/(128 MH)), N/128), block = 256, dynamic smem = STAGES_B * (128 MH + 128) * 128 B + 1 KB
// MH = 64-row halves per math warpgroup: MH = 1 is a 128x128 block tile, MH = 2 a 256x128 one.
// Why MH = 2: a 128x128 FP8 tile does 2*128*128 FLOP per 256 bytes it pulls from L2 per k (128 FLOP/B),
// so ~700 TFLOP/s already asks for ~5.5 TB/s of L2 -> shared-memory traffic, about what the L2 gives.
// 256x128 does 171 FLOP/B. Each warpgroup then runs its two 64-row halves one after the other
// (acc 2 x 64 + part 64 registers), while the other warpgroup's wgmmas keep the tensor cores busy.
template <int STAGES_B, int MH>
__device__ __forceinline__ void wgmma_simple_body(const u8* __restrict__ A, const float* __restrict__ sa, long long sa_sm,
                                                  long long sa_sk, const u8* __restrict__ B, const float* __restrict__ sb,
                                                  u16* __restrict__ C, int M, int N, int K) {
    constexpr int BMT = 128 * MH, A_BYTES = BMT * BK, STG = A_BYTES + BN * BK;
    extern __shared__ __align__(1024) u8 smem_raw[];
    const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, wq = (tid >> 5) & 3;
    const int g = lane >> 2;
    const int m0 = blockIdx.x * BMT, n0 = blockIdx.y * BN;
    const int KB = K / BK;

    float acc[MH][64], part[64];
    zero<64>(part);
    zero<64 * MH>(&acc[0][0]);
#pragma unroll
    for (int s = 0; s < STAGES_B - 1; ++s) {
        if (s < KB) load_stage<256, BMT>(base + s * STG, base + s * STG + A_BYTES, A, B, M, K, m0, n0, s * BK, tid);
        cp_async_commit();
    }
    for (int kb = 0; kb < KB; ++kb) {
        cp_async_wait<STAGES_B - 2>();
        fence_proxy_async();  // my landed copies -> visible to the async proxy (wgmma)
        __syncthreads();
        {
            const int nk = kb + STAGES_B - 1, s = nk % STAGES_B;
            if (nk < KB) load_stage<256, BMT>(base + s * STG, base + s * STG + A_BYTES, A, B, M, K, m0, n0, nk * BK, tid);
            cp_async_commit();
        }
        const float sbv = __ldg(sb + (size_t)(n0 / BN) * KB + kb);
        const u32 sA = base + (kb % STAGES_B) * STG;
#pragma unroll
        for (int h = 0; h < MH; ++h) {
            const int r0 = m0 + 64 * (wg * MH + h) + 16 * wq + g;  // this thread's rows: r0, r0 + 8
            const float s0 = (r0 < M ? __ldg(sa + r0 * sa_sm + kb * sa_sk) : 0.f) * sbv;
            const float s1 = (r0 + 8 < M ? __ldg(sa + (r0 + 8) * sa_sm + kb * sa_sk) : 0.f) * sbv;
            math_kblock(acc[h], part, sA + (wg * MH + h) * (64 * 128), sA + A_BYTES, s0, s1);
        }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int h = 0; h < MH; ++h) store_tile(C, M, N, m0 + 64 * (wg * MH + h) + 16 * wq, n0, acc[h], lane);
}

extern "C" __global__ void __launch_bounds__(256, 1)
w8a8_wgmma(const u8* __restrict__ A, const float* __restrict__ sa, long long sa_sm, long long sa_sk,
           const u8* __restrict__ B, const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K) {
    wgmma_simple_body<4, 1>(A, sa, sa_sm, sa_sk, B, sb, C, M, N, K);
}

// the same with 6 stages (192 KB): loads run 5 k-blocks ahead instead of 3
extern "C" __global__ void __launch_bounds__(256, 1)
w8a8_wgmma_pipe(const u8* __restrict__ A, const float* __restrict__ sa, long long sa_sm, long long sa_sk,
                const u8* __restrict__ B, const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K) {
    wgmma_simple_body<6, 1>(A, sa, sa_sm, sa_sk, B, sb, C, M, N, K);
}

// 256x128 block tile, 4 stages of 48 KB
extern "C" __global__ void __launch_bounds__(256, 1)
w8a8_wgmma_256(const u8* __restrict__ A, const float* __restrict__ sa, long long sa_sm, long long sa_sk,
               const u8* __restrict__ B, const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K) {
    wgmma_simple_body<4, 2>(A, sa, sa_sm, sa_sk, B, sb, C, M, N, K);
}

#define STAGES_WS 6

// w8a8_wgmma_ws: warp-specialized like DeepGEMM, with cp.async instead of TMA.
//   warpgroup 0 (producer): fills 6 stages with cp.async; each thread's copies of a stage signal the
//     stage's `full` mbarrier by themselves (cp.async.mbarrier.arrive.noinc), so the producer never
//     blocks on its own copies, only on a stage being `empty` again.
//   warpgroups 1, 2 (math): wait `full`, fence.proxy.async (the generic-proxy cp.async writes, now
//     visible to this thread, ordered before its async-proxy wgmma reads), issue the k-block's wgmmas,
//     wait for them, release the stage (`empty`) and promote. No block-wide barrier in the main loop,
//     so one math warpgroup promotes while the other's wgmmas run (DeepGEMM's overlap).
//   (A double-buffered promotion -- issue kb, wait_group 1, promote kb-1 -- was tried: ptxas warns
//   C7514 and serializes the wgmmas, since it cannot tell which group's accumulators wait_group 1
//   retired. Every FP8-promotion GEMM we know of waits with wait_group 0 for this reason.)
// setmaxnreg moves registers from the producer (40) to the math warpgroups (232).
// grid = (ceil(M/128), N/128), block = 384, dynamic smem = STAGES_WS * 32 KB + 1 KB
extern "C" __global__ void __launch_bounds__(384, 1)
w8a8_wgmma_ws(const u8* __restrict__ A, const float* __restrict__ sa, long long sa_sm, long long sa_sk,
              const u8* __restrict__ B, const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(1024) u8 smem_ws[];
    __shared__ __align__(8) u64 bars[2 * STAGES_WS];  // full[s], empty[s]
    const u32 base = (smem_addr(smem_ws) + 1023u) & ~1023u;
    const u32 full0 = smem_addr(&bars[0]), empty0 = smem_addr(&bars[STAGES_WS]);
    const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int KB = K / BK;

    if (tid == 0) {
        for (int s = 0; s < STAGES_WS; ++s) {
            mbar_init(full0 + 8 * s, 128);   // one (asynchronous) arrival per producer thread
            mbar_init(empty0 + 8 * s, 256);  // one arrival per math thread
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // ---------------- producer warpgroup ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        for (int kb = 0; kb < KB; ++kb) {
            const int s = kb % STAGES_WS;
            if (kb >= STAGES_WS) mbar_wait(empty0 + 8 * s, ((kb / STAGES_WS) + 1) & 1);
            load_stage<128>(base + s * STAGE_BYTES, base + s * STAGE_BYTES + TILE_BYTES, A, B, M, K, m0, n0, kb * BK, tid);
            cp_async_mbar_arrive_noinc(full0 + 8 * s);
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        return;
    }
    // ---------------- math warpgroups 1, 2 ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int cw = wg - 1, wq = (tid >> 5) & 3, g = lane >> 2;
    const int r0 = m0 + 64 * cw + 16 * wq + g;
    float acc[64], part[64];
    zero<64>(acc);
    zero<64>(part);
    for (int kb = 0; kb < KB; ++kb) {
        const int s = kb % STAGES_WS;
        const float sbv = __ldg(sb + (size_t)(n0 / BN) * KB + kb);
        const float s0 = (r0 < M ? __ldg(sa + r0 * sa_sm + kb * sa_sk) : 0.f) * sbv;
        const float s1 = (r0 + 8 < M ? __ldg(sa + (r0 + 8) * sa_sm + kb * sa_sk) : 0.f) * sbv;
        mbar_wait(full0 + 8 * s, (kb / STAGES_WS) & 1);
        fence_proxy_async();
        const u32 sA = base + s * STAGE_BYTES;
        wg_issue(part, sA + cw * (64 * 128), sA + TILE_BYTES);
        wgmma_wait<0>();
        mbar_arrive(empty0 + 8 * s);  // the tensor cores are done with this stage
        promote(acc, part, s0, s1);   // meanwhile the other math warpgroup's wgmmas run
    }
    store_tile(C, M, N, m0 + 64 * cw + 16 * wq, n0, acc, lane);
}
