// gemv_v5.cu -- decode GEMV / skinny GEMM, version 5: version 3's packed stream, with one shared-memory ring per
// CTA filled by large bulk copies, and the K of each row group split over the CTA's warps.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W)^T,   M = 1..32 tokens, fp32 accumulation on mma.sync bf16
//   W: a gemv_v3.Packed matrix (the same packing: FP8 E4M3 per-channel or 128x128 blocks, or NVFP4).
//
// Why a version 5 (versions 3 and 4 stay beside it and are timed with it): version 4 moved the bytes in flight from
// registers into per-warp rings of 2-4 KB bulk copies and was no faster. A pure-read probe (tools/gpu/stream_probe.py)
// then measured how fast a kernel can read at all: per-warp rings of 2 KB copies are at the edge (2.4-4.4 TB/s by
// stage count), block-wide rings of 16-64 KB copies read 64 MiB in 15-16.5 us, faster than cuBLAS's bf16 GEMV reads
// the same bytes. TensorRT-LLM's small-M Hopper kernels (tinygemm2) have the same shape: one ring per CTA, K split
// over the CTA's MMA warps, reduced through shared memory. So:
//  1. The work split is over CTAs, not warps: CTA b takes units [floor(b U / nC), floor((b + 1) U / nC)) (stream-K,
//     gran = 1) or whole row groups (gran = KU); a row group split between CTAs is finished by version 3's fix-up
//     (v3_finish with the CTA as the "warp": the same workspace, slot order, counter reset).
//  2. The CTA's range is walked in stages: a stage is up to WPC consecutive units of ONE row group (a group's last
//     stage may be shorter), WPC C R KiB of contiguous packed bytes: one cp.async.bulk (thread 0, mbarrier-counted),
//     plus one for the NVFP4 scale codes. D stages are in flight; the ring holds D * WPC units.
//  3. Warp w multiplies unit w of the stage (its words read from shared memory, 512 contiguous bytes per warp load),
//     into its own accumulators: each warp holds a K-slice of the group. After the stage, __syncthreads: every
//     warp's MMAs have consumed their words (version 4's lesson: only then may the copy engine overwrite the slot),
//     and thread 0 refills the slot with the stage D ahead.
//  4. Where a group ends in this CTA, each warp writes its partial sums into shared memory before that barrier; warp 0
//     then sums the WPC slices IN WARP ORDER (deterministic) and stores the tile or runs the fix-up, while the other
//     warps go on with the next stage. Two buffers of partial sums, used by alternate group ends: the next group end
//     that reuses one lies behind another barrier, which warp 0 reaches only after its sum.
//  5. L2 evict_first on the streamed weights; activations through L1; weights in flight before pdl_wait().
// Shared memory per CTA (gemv_v3.ring_bytes(version=5)): D barriers, 2 x WPC R NT 4 32 fp32 of partial sums, and
// D WPC (C R 1024 [+ C R 128]) bytes of ring. No fused RMSNorm (NORM = 0 only).
//
// Launch: grid = nC CTAs (resident at once) of 32 WPC threads. Kernel names: gemv5_{fmt}_r{R}_nt{NT}_c{C}_d{D}_e{EPI}_n0;
// the instantiation list comes from gemv_v3.py KERNELS5 as a -D define. Needs the bulk copy engine: sm_90+.
#include "gemv_v3_common.cuh"
#include "tma.cuh"  // bulk_load_1d, l2_evict_first, mbar_expect_tx

// The stage that starts at unit `pos` of the range ending at c1: its unit count (<= wpc, inside one row group).
__device__ __forceinline__ int v5_stage_units(long long pos, long long c1, int KU, int wpc) {
    const long long ge = (pos / KU + 1) * KU;
    const long long end = ge < c1 ? ge : c1;
    return (int)(end - pos < wpc ? end - pos : wpc);
}

template <int FMT, int R, int NT, int C, int D, int EPI, int NORM>
__device__ __forceinline__ void gemv5_body(V3_PARAMS) {
    constexpr bool NV = FMT == V3_NVFP4;
    constexpr int NW = 2 * C * R;            // 16-byte weight words per lane per unit
    constexpr int NS = NV ? C * R : 1;       // NVFP4: 4-byte scale words per lane per unit
    constexpr int UB = C * R * 1024;         // weight bytes per unit
    constexpr int SB = NV ? C * R * 128 : 0; // NVFP4 scale-code bytes per unit
    constexpr int CK = NV ? 128 : 64;        // k per chunk
    constexpr int NA = R * NT * 4;           // accumulators per lane
    static_assert(NORM == 0, "version 5 has no fused RMSNorm");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const int wpc = blockDim.x >> 5;
    pdl_launch_dependents();
    long long c0, c1;
    v3_range(blockIdx.x, gridDim.x, U, gran, c0, c1);
    if (c0 >= c1) return;  // an idle CTA (whole-group ranges leave a few): the whole CTA leaves, no barrier follows

    // shared memory: [D barriers][partial sums wpc x NA x 32 fp32][ring: D slots of wpc (UB + SB) bytes]
    extern __shared__ __align__(128) uint4 v5_smem[];
    u8* const base = reinterpret_cast<u8*>(v5_smem);
    const u32 bar0 = smem_addr(base);
    float* const red = reinterpret_cast<float*>(base + 128);
    const int slot_bytes = wpc * (UB + SB);
    const int red_floats = wpc * NA * 32;  // one buffer of partial sums; two, used by alternate group ends
    u8* const ring = base + 128 + ((2 * red_floats * 4 + 127) & ~127);
    const u64 policy = l2_evict_first();

    long long fpos = c0;  // thread 0: the next unit to fetch
    int fstage = 0;       // ... and its stage number
    auto fill = [&]() {   // thread 0: the stage at fpos -> slot fstage % D
        const int n = v5_stage_units(fpos, c1, KU, wpc);
        const int slot = fstage % D;
        const u32 dst = smem_addr(ring + slot * slot_bytes), bar = bar0 + 8 * slot;
        mbar_expect_tx(bar, n * (UB + SB));
        bulk_load_1d(dst, W + (size_t)fpos * UB, n * UB, bar, policy);
        if constexpr (NV) bulk_load_1d(dst + wpc * UB, reinterpret_cast<const u8*>(S) + (size_t)fpos * SB, n * SB, bar, policy);
        fpos += n;
        ++fstage;
    };
    // weights first: they do not depend on earlier kernels, so they fly during pdl_wait()
    if (threadIdx.x == 0) {
#pragma unroll
        for (int j = 0; j < D; ++j) mbar_init(bar0 + 8 * j, 1);
        fence_proxy_async();  // the initialized barriers, visible to the copy engine
        for (int j = 0; j < D && fpos < c1; ++j) fill();
    }
    __syncthreads();
    pdl_wait();

    const V3Out o{CS, RES, Y, M, nout};
    const u16* xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xrow[nt] = X + (size_t)(nt * 8 + g < M ? nt * 8 + g : 0) * Kp + t * (CK / 4);
    const int KB = Kp >> 7;  // FP8 block scales: float2 [group][Kp / 128][R] (rows 0-7, rows 8-15 of the tile)

    float acc[R][NT][4];
    zero_tiles(acc);
    int stage = 0, ends_seen = 0;
    for (long long pos = c0; pos < c1;) {
        const int n = v5_stage_units(pos, c1, KU, wpc);
        const int slot = stage % D;
        const int grp = (int)(pos / KU);
        const bool ends = pos + n == c1 || (pos + n) % KU == 0;  // this stage ends the group (in this CTA's range)
        if (warp < n) {
            mbar_wait(bar0 + 8 * slot, (u32)(stage / D) & 1u);
            const u8* sl = ring + slot * slot_bytes;
            uint4 cur[NW];
            u32 scur[NS];
            const uint4* sw = reinterpret_cast<const uint4*>(sl + warp * UB) + lane;
#pragma unroll
            for (int i = 0; i < NW; ++i) cur[i] = sw[i * 32];
            if constexpr (NV) {
                const u32* ss = reinterpret_cast<const u32*>(sl + wpc * UB + warp * SB) + lane;
#pragma unroll
                for (int i = 0; i < NS; ++i) scur[i] = ss[i * 32];
            }
            const long long u = pos + warp;
            const int kk = (int)(u - (long long)grp * KU);
            v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);
        }
        if (ends) {  // this warp's K-slice of the group into shared memory (zeros from warps that had none)
            float* mine = red + (ends_seen & 1) * red_floats + warp * NA * 32 + lane;
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) mine[((r * NT + nt) * 4 + i) * 32] = acc[r][nt][i];
            zero_tiles(acc);
        }
        __syncthreads();  // the slot is consumed (every MMA has its words); the slices are in shared memory
        if (threadIdx.x == 0 && fpos < c1) fill();
        if (ends && warp == 0) {  // the group's sum, in warp order, then store or fix-up (v3_finish, CTA = "warp")
            const float* rb = red + (ends_seen & 1) * red_floats;
            float v[R][NT][4];
            zero_tiles(v);
            for (int w = 0; w < wpc; ++w)
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int i = 0; i < 4; ++i) v[r][nt][i] += rb[(w * NA + (r * NT + nt) * 4 + i) * 32 + lane];
            v3_finish<FMT, R, NT, EPI>(o, v, grp, c0, c1, KU, U, gridDim.x, blockIdx.x, lane, WS, CNT, smax);
        }
        ends_seen += ends;
        pos += n;
        ++stage;
    }
}

#define GEMV5(FMT, R, NT, C, D, EPI, NORM)                                                                         \
    V3_DEFINE_KERNEL(V3_CAT(gemv5_, V3_CAT(V3_FMT_NAME_##FMT, _r##R##_nt##NT##_c##C##_d##D##_e##EPI##_n##NORM)), \
                     (gemv5_body<FMT, R, NT, C, D, EPI, NORM>))

#ifndef FP8LAB_GEMV_V5
#error "the loader passes the instantiation list (gemv_v3.py KERNELS5) as a -D define"
#endif
FP8LAB_GEMV_V5
