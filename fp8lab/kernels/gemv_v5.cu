// gemv_v5.cu -- decode GEMV / skinny GEMM, version 5: version 3's packed stream, with one shared-memory ring per
// CTA fed by the bulk copy engine, and the CTA's warps on neighbouring row groups at the same k, so that they share
// one slice of the activations.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W)^T,   M = 1..32 tokens, fp32 accumulation on mma.sync bf16
//   W: a gemv_v3.Packed matrix (the same packing: FP8 E4M3 per-channel or 128x128 blocks, or NVFP4).
//
// Why a version 5 (versions 3 and 4 stay beside it and are timed with it): version 4 moved the bytes in flight from
// registers into per-warp rings of 2-4 KB bulk copies and was no faster; at M = 16 every warp of versions 3 and 4
// reads its own slice of the activations (16 tokens x 2 bytes per k: twice its FP8 weight bytes) through L1. Here:
//  1. A band is WPC neighbouring row groups (WPC 16 R rows). A stage is unit kk of every group of one band: WPC bulk
//     copies of C R KiB (+ the NVFP4 scale codes), issued by a producer warp (the CTA's last, one lane) and counted
//     on the stage's "full" mbarrier. D stages are in flight per CTA.
//  2. Warp w multiplies the unit of group w of the band, reading its words from shared memory (512 contiguous bytes
//     per warp load). All warps of a stage use the same k slice of the activations: one warp brings it into L1, the
//     others hit (the ring takes most of the shared memory/L1 carve-out, so sharing in time is what keeps them there).
//  3. After its MMAs have consumed its words (version 4's lesson: only then may the copy engine overwrite the slot),
//     each MMA warp arrives on the slot's "empty" mbarrier; the producer waits for all WPC arrivals before refilling
//     it with the stage D ahead. No CTA-wide barrier in the loop: a warp may run up to D stages ahead of another.
//     (A form with a __syncthreads per stage and thread 0 refilling was slower: every stage waited for the slowest
//     warp.)
//  4. The work split is over CTAs: the NB KU stages (band-major) are cut into equal contiguous ranges (stream-K,
//     gran = 1) or whole bands (gran = KU). Where a band ends in the CTA's range, each warp stores its group or runs
//     version 3's fix-up for it (v3_finish_span: the owners are those of the band's stages).
//  5. L2 evict_first on the streamed weights; activations through L1; weights in flight before pdl_wait().
// Shared memory per CTA (gemv_v3.ring_bytes(version=5)): 128 bytes of barriers and D stages of WPC (C R 1024
// [+ C R 128]) bytes. No fused RMSNorm (NORM = 0 only).
//
// A first form of version 5 split each row group's K over the CTA's warps (a stage = WPC consecutive units of one
// group, one bulk copy) and reduced the slices in shared memory: slower than version 3 at M = 1 and much slower at
// M = 16 (tools/gpu/decode_notes.md); each warp read a different k slice of the activations.
//
// Launch: grid = nC CTAs (resident at once) of 32 (WPC + 1) threads. Kernel names: gemv5_{fmt}_r{R}_nt{NT}_c{C}_d{D}_e{EPI}_n0;
// the instantiation list comes from gemv_v3.py KERNELS5 as a -D define. Needs the bulk copy engine: sm_90+.
#include "gemv_v3_common.cuh"
#include "tma.cuh"  // bulk_load_1d, l2_evict_first, mbar_expect_tx

template <int FMT, int R, int NT, int C, int D, int EPI, int NORM>
__device__ __forceinline__ void gemv5_body(V3_PARAMS) {
    constexpr bool NV = FMT == V3_NVFP4;
    constexpr int NW = 2 * C * R;            // 16-byte weight words per lane per unit
    constexpr int NS = NV ? C * R : 1;       // NVFP4: 4-byte scale words per lane per unit
    constexpr int UB = C * R * 1024;         // weight bytes per unit
    constexpr int SB = NV ? C * R * 128 : 0; // NVFP4 scale-code bytes per unit
    constexpr int CK = NV ? 128 : 64;        // k per chunk
    static_assert(NORM == 0, "version 5 has no fused RMSNorm");
    static_assert(D <= 8, "2 D barriers in 128 bytes");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const int wpc = (blockDim.x >> 5) - 1;   // MMA warps; the last warp is the producer
    const int NG = U / KU;                   // row groups
    const int NB = (NG + wpc - 1) / wpc;     // bands
    const int NU = NB * KU;                  // stages of the whole matrix
    pdl_launch_dependents();
    long long c0, c1;
    v3_range(blockIdx.x, gridDim.x, NU, gran, c0, c1);
    if (c0 >= c1) return;  // an idle CTA (whole-band ranges leave a few): the whole CTA leaves

    // shared memory: [D full barriers][D empty barriers] (128 bytes), then the ring: D slots of wpc (UB + SB) bytes
    extern __shared__ __align__(128) uint4 v5_smem[];
    u8* const base = reinterpret_cast<u8*>(v5_smem);
    const u32 full0 = smem_addr(base), empty0 = full0 + 8 * D;
    const int slot_bytes = wpc * (UB + SB);
    u8* const ring = base + 128;
    if (threadIdx.x == 0) {
#pragma unroll
        for (int j = 0; j < D; ++j) {
            mbar_init(full0 + 8 * j, 1);       // the producer's expect_tx
            mbar_init(empty0 + 8 * j, wpc);    // one arrival per MMA warp
        }
        fence_proxy_async();  // the initialized barriers, visible to the copy engine
    }
    __syncthreads();

    if (warp == wpc) {  // ---- the producer: lane 0 issues every stage of the range, D ahead of the MMA warps
        if (lane == 0) {
            const u64 policy = l2_evict_first();
            for (long long s = c0; s < c1; ++s) {
                const long long i = s - c0;
                const int slot = (int)(i % D);
                if (i >= D) mbar_wait(empty0 + 8 * slot, (u32)(i / D - 1) & 1u);  // every MMA warp is done with it
                const int band = (int)(s / KU), kk = (int)(s - (long long)band * KU);
                const int n = min(wpc, NG - band * wpc);   // groups in this band
                const u32 dst = smem_addr(ring + slot * slot_bytes), bar = full0 + 8 * slot;
                mbar_expect_tx(bar, n * (UB + SB));
                for (int w = 0; w < n; ++w) {
                    const size_t u = (size_t)(band * wpc + w) * KU + kk;
                    bulk_load_1d(dst + w * UB, W + u * UB, UB, bar, policy);
                    if constexpr (NV)
                        bulk_load_1d(dst + wpc * UB + w * SB, reinterpret_cast<const u8*>(S) + u * SB, SB, bar, policy);
                }
            }
        }
        return;  // the copies complete on their own; nothing below waits for this warp
    }

    // ---- the MMA warps (weights are in flight already; activations only after the previous kernel)
    pdl_wait();
    const V3Out o{CS, RES, Y, M, nout};
    const u16* xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xrow[nt] = X + (size_t)(nt * 8 + g < M ? nt * 8 + g : 0) * Kp + 16 * t;
    const int KB = Kp >> 7;  // FP8 block scales: float2 [group][Kp / 128][R] (rows 0-7, rows 8-15 of the tile)

    float acc[R][NT][4];
    zero_tiles(acc);
    for (long long s = c0; s < c1; ++s) {
        const long long i = s - c0;
        const int band = (int)(s / KU), kk = (int)(s - (long long)band * KU);
        const int grp = band * wpc + warp;
        const int slot = (int)(i % D);
        // Every MMA warp waits for every stage, also one without a group (the last band's spare warps): a warp that
        // released slots without waiting could arrive twice in one phase of a slot's "empty" barrier (its release of
        // stage i + D counted for stage i) and let the producer overwrite words another warp still reads.
        mbar_wait(full0 + 8 * slot, (u32)(i / D) & 1u);
        if (grp < NG) {
            const u8* sl = ring + slot * slot_bytes;
            uint4 cur[NW];
            u32 scur[NS];
            const uint4* sw = reinterpret_cast<const uint4*>(sl + warp * UB) + lane;
#pragma unroll
            for (int j = 0; j < NW; ++j) cur[j] = sw[j * 32];
            if constexpr (NV) {
                const u32* ss = reinterpret_cast<const u32*>(sl + wpc * UB + warp * SB) + lane;
#pragma unroll
                for (int j = 0; j < NS; ++j) scur[j] = ss[j * 32];
            }
            v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);
        }
        // Every lane's MMAs have their words (an MMA issues only once its loaded registers are there): the slot may
        // be refilled. (Releasing right after the shared loads raced in version 4.)
        __syncwarp();
        if (lane == 0) mbar_arrive(empty0 + 8 * slot);
        if (kk == KU - 1 || s + 1 == c1) {  // the band ends in this range: this warp's group, stored or fixed up
            if (grp < NG) v3_finish_span<FMT, R, NT, EPI>(o, acc, grp, band, c0, c1, KU, NU, gridDim.x, blockIdx.x, lane, WS, CNT, smax, gran);
            zero_tiles(acc);
        }
    }
}

// 8 MMA warps + the producer: 288 threads at most
#define GEMV5(FMT, R, NT, C, D, EPI, NORM)                                                                         \
    extern "C" __global__ void __launch_bounds__(288)                                                             \
        V3_CAT(gemv5_, V3_CAT(V3_FMT_NAME_##FMT, _r##R##_nt##NT##_c##C##_d##D##_e##EPI##_n##NORM))(V3_PARAMS) {  \
        gemv5_body<FMT, R, NT, C, D, EPI, NORM>(V3_ARGS);                                                        \
    }

#ifndef FP8LAB_GEMV_V5
#error "the loader passes the instantiation list (gemv_v3.py KERNELS5) as a -D define"
#endif
FP8LAB_GEMV_V5
