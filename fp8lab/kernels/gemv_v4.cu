// gemv_v4.cu -- decode GEMV / skinny GEMM, version 4: version 3's packed stream and stream-K split, with the bytes
// in flight held in a shared-memory ring that the bulk copy engine fills, instead of in registers.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W)^T,   M = 1..32 tokens, fp32 accumulation on mma.sync bf16
//   W: a gemv_v3.Packed matrix (the same packing: FP8 E4M3 per-channel or 128x128 blocks, or NVFP4).
//
// Why a version 4 (version 3, gemv_v3.cu, stays beside it and is timed with it): an Nsight Compute reading of
// version 3 at the 68 MB shapes (tools/gpu/decode_notes.md) found its warps capped by registers (141 per thread:
// P = 3 units of 2 KB in flight per warp live in registers -> 12 warps per SM) and 54 % of their stalls waiting on
// global loads. Here the bytes in flight cost shared memory, not registers:
//  1. Each warp owns a ring of D slots of one unit each (C R KiB of weights, + C R 128 bytes of NVFP4 scale codes)
//     and one mbarrier per slot. A warp's stream-K range is contiguous in the packed stream, so one
//     cp.async.bulk (1-D, no tensor map) per unit brings its bytes in: lane 0 announces the bytes
//     (mbarrier.arrive.expect_tx) and issues the copy; the copy engine counts them in (complete_tx). D units are in
//     flight per warp from the first instruction on.
//  2. The warp waits on the slot's barrier (phase parity i / D), reads its 2 C R 16-byte words from the slot (512
//     contiguous bytes per warp load: no bank conflicts) and multiplies them; then (__syncwarp) lane 0 refills the
//     slot with the unit D ahead. D - 1 units are in flight while a warp multiplies.
//  3. The multiply, epilogues and fix-up are version 3's (gemv_v3_common.cuh): same arithmetic, same bits.
//  4. L2 policy evict_first on the streamed weights; activations through L1 as in version 3.
// Shared memory per CTA: WPC D (C R 1024 [+ C R 128]) bytes of ring + 8 WPC D bytes of barriers. Registers: one
// unit (2 C R uint4) instead of P + 1. No fused RMSNorm (NORM = 0 only): the decode layer's fused kernels are
// version 3's.
//
// Launch: as version 3 (grid = ceil(Wt / WPC) CTAs of 32 WPC threads, resident at once), dynamic shared memory
// from gemv_v3.py prepare(version=4). Kernel names: gemv4_{fp8c|fp8b|nvfp4}_r{R}_nt{NT}_c{C}_d{D}_e{EPI}_n{NORM};
// the instantiation list comes from gemv_v3.py KERNELS4 as a -D define. Needs the bulk copy engine: sm_90+.
#include "gemv_v3_common.cuh"
#include "tma.cuh"  // bulk_load_1d, l2_evict_first, mbar_expect_tx

template <int FMT, int R, int NT, int C, int D, int EPI, int NORM>
__device__ __forceinline__ void gemv4_body(V3_PARAMS) {
    constexpr bool NV = FMT == V3_NVFP4;
    constexpr int NW = 2 * C * R;            // 16-byte weight words per lane per unit
    constexpr int NS = NV ? C * R : 1;       // NVFP4: 4-byte scale words per lane per unit
    constexpr int UB = C * R * 1024;         // weight bytes per unit
    constexpr int SB = NV ? C * R * 128 : 0; // NVFP4 scale-code bytes per unit
    constexpr int SLOT = UB + SB;            // one ring slot (a multiple of 128 bytes)
    constexpr int CK = NV ? 128 : 64;        // k per chunk
    static_assert(NORM == 0, "version 4 has no fused RMSNorm");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const int wpc = blockDim.x >> 5;
    const int wg = blockIdx.x * wpc + warp;
    const int Wt = gridDim.x * wpc;
    pdl_launch_dependents();
    long long u0, u1;
    v3_range(wg, Wt, U, gran, u0, u1);
    if (u0 >= u1) return;  // an idle warp (whole-group ranges leave a few): no CTA-wide barrier follows

    extern __shared__ __align__(128) uint4 v4_smem[];
    u8* const ring = reinterpret_cast<u8*>(v4_smem) + warp * (D * SLOT);
    const u32 ring_s = smem_addr(ring);
    const u32 bar0 = smem_addr(reinterpret_cast<u8*>(v4_smem) + wpc * (D * SLOT)) + warp * (D * 8);
    const u64 policy = l2_evict_first();
    auto fill = [&](int slot, long long u) {  // lane 0: unit u -> slot, counted on the slot's barrier
        mbar_expect_tx(bar0 + 8 * slot, SLOT);
        bulk_load_1d(ring_s + slot * SLOT, W + (size_t)u * UB, UB, bar0 + 8 * slot, policy);
        if constexpr (NV) bulk_load_1d(ring_s + slot * SLOT + UB, reinterpret_cast<const u8*>(S) + (size_t)u * SB, SB,
                                       bar0 + 8 * slot, policy);
    };
    // weights first: they do not depend on earlier kernels, so they fly during pdl_wait()
    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < D; ++j) mbar_init(bar0 + 8 * j, 1);
        fence_proxy_async();  // the initialized barriers, visible to the copy engine
#pragma unroll
        for (int j = 0; j < D; ++j)
            if (u0 + j < u1) fill(j, u0 + j);
    }
    __syncwarp();
    pdl_wait();

    const V3Out o{CS, RES, Y, M, nout};
    const u16* xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xrow[nt] = X + (size_t)(nt * 8 + g < M ? nt * 8 + g : 0) * Kp + 16 * t;
    const int KB = Kp >> 7;  // FP8 block scales: float2 [group][Kp / 128][R] (rows 0-7, rows 8-15 of the tile)

    float acc[R][NT][4];
    zero_tiles(acc);
    int grp = (int)(u0 / KU), kk = (int)(u0 - (long long)grp * KU);

    int slot = 0;
    u32 phase = 0;
    for (long long u = u0; u < u1; ++u) {
        mbar_wait(bar0 + 8 * slot, phase);
        uint4 cur[NW];
        u32 scur[NS];
        const uint4* sw = reinterpret_cast<const uint4*>(ring + slot * SLOT) + lane;
#pragma unroll
        for (int i = 0; i < NW; ++i) cur[i] = sw[i * 32];
        if constexpr (NV) {
            const u32* ss = reinterpret_cast<const u32*>(ring + slot * SLOT + UB) + lane;
#pragma unroll
            for (int i = 0; i < NS; ++i) scur[i] = ss[i * 32];
        }
        v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);
        // Every lane's MMAs have consumed its words, so no read of the slot is outstanding: only now may the copy
        // engine overwrite it. (Refilling right after the reads, behind a __syncwarp alone, raced: the shared loads
        // of a busy SM could still be queued when the bulk copy landed -- wrong sums on the H200 at 4-warp CTAs.)
        __syncwarp();
        if (lane == 0 && u + D < u1) fill(slot, u + D);
        if (++slot == D) {
            slot = 0;
            phase ^= 1u;
        }
        v3_after_unit<FMT, R, NT, EPI>(o, acc, grp, kk, u, u0, u1, KU, U, Wt, wg, lane, WS, CNT, smax, gran);
    }
}

#define GEMV4(FMT, R, NT, C, D, EPI, NORM)                                                                         \
    V3_DEFINE_KERNEL(V3_CAT(gemv4_, V3_CAT(V3_FMT_NAME_##FMT, _r##R##_nt##NT##_c##C##_d##D##_e##EPI##_n##NORM)), \
                     (gemv4_body<FMT, R, NT, C, D, EPI, NORM>))

#ifndef FP8LAB_GEMV_V4
#error "the loader passes the instantiation list (gemv_v3.py KERNELS4) as a -D define"
#endif
FP8LAB_GEMV_V4
