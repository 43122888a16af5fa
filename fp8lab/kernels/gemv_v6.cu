// gemv_v6.cu -- decode GEMV / skinny GEMM, version 6: version 3's packed stream and register ring, with the work
// handed out while the kernel runs (each warp claims its next piece from a counter) instead of cut into one equal
// range per warp before it starts.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W)^T,   M = 1..32 tokens, fp32 accumulation on mma.sync bf16
//   W: a gemv_v3.Packed matrix (the same packing: FP8 E4M3 per-channel or 128x128 blocks, or NVFP4).
//
// Why a version 6 (versions 3-5 stay beside it and are timed with it): %globaltimer stamps per warp of version 3
// (gemm_decode.bench_decode_timeline) show every warp starting within ~0.2 us and then streaming its equal share of
// the bytes at rates that differ by up to ~1.5x between warps: equal bytes are not equal time. The fast warps finish
// and idle while the slow ones carry a tail in which fewer and fewer loads are in flight. Here:
//  1. The packed stream is cut into NI items (NI ~ IPW x warps, gemv_v3.py prepare(version=6)): item i is the
//     range v3_range(i, NI, U, gran) -- stream-K pieces (gran = 1) or whole row groups (gran = KU), each >= P units.
//  2. A warp claims an item with one atomicAdd on a counter (lane 0, broadcast), and claims the next one as soon as
//     it starts streaming the current one, so that its P units in flight run on from one item into the next (the
//     register ring of version 3, fed from the item after the current when the current runs out). A fast warp
//     simply claims more items; all warps end within about one item's time of each other.
//  3. A row group split between items is finished exactly as version 3 finishes a group split between warps, with
//     the item in the warp's place (v3_finish_span with wg = item, Wt = NI): each piece's partial sums go to the
//     piece's slot, the last piece to arrive sums the slots in slot order (deterministic: the same bits whichever
//     warps ran which items) and stores.
//  4. Every warp makes exactly one claim past the last item (its "no more work"), so a launch makes NI + Wt claims;
//     the warp that draws number NI + Wt - 1 knows every other claim is made and resets the counter for the next
//     call. No programmatic dependent launch (a dependent GEMV of the same launch could claim before the reset).
// Launch: as version 3 (grid = CTAs resident at once); kernel names gemv6_{fmt}_r{R}_nt{NT}_c{C}_p{P}_e{EPI}_n0, the
// instantiation list from gemv_v3.py KERNELS6 as a -D define.
#include "gemv_v3_common.cuh"  // widening, chunk MMAs, epilogues, the stream-K fix-up

template <int FMT, int R, int NT, int C, int P, int EPI, int NORM>
__device__ __forceinline__ void gemv6_body(V3_PARAMS, int* __restrict__ CLAIM, int NI) {
    static_assert(NORM == 0, "version 6 has no fused RMSNorm");
    constexpr bool NV = FMT == V3_NVFP4;
    constexpr int NW = 2 * C * R;            // 16-byte weight loads per lane per unit
    constexpr int NS = NV ? C * R : 1;       // NVFP4: 4-byte scale words per lane per unit
    constexpr int UB = C * R * 1024;         // weight bytes per unit
    constexpr int CK = NV ? 128 : 64;        // k per chunk
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int Wt = gridDim.x * (blockDim.x >> 5);
    // a claim is issued by lane 0 and read (broadcast) only where it is needed: the next item's claim flies while
    // the current item streams, so the atomic's round trip is never waited for in the loop
    auto issue = [&]() -> int { return lane == 0 ? atomicAdd(CLAIM, 1) : 0; };
    auto read = [&](int v) -> int {
        if (lane == 0 && v == NI + Wt - 1) atomicExch(CLAIM, 0);  // the launch's last claim: every other one is made
        return __shfl_sync(0xFFFFFFFFu, v, 0);
    };
    int ci = read(issue());  // the item being multiplied
    if (ci >= NI) return;
    long long c0, c1;
    v3_range(ci, NI, U, gran, c0, c1);
    int fi = ci, nx = issue();  // the item being fetched; the next item's claim, in flight (lane 0's register)
    long long fu = c0, f1 = c1;

    const u8* wbase = W + lane * 16;
    const u8* sbase = reinterpret_cast<const u8*>(S) + lane * 4;  // NVFP4 scale words
    // the next unit of the stream into (dst, sdst): the fetch item's next unit, or the first of the next item
    // (items hold >= P units: the fetch is never more than one item ahead of the multiply)
    auto fetch = [&](uint4 (&dst)[NW], u32 (&sdst)[NS]) {
        if (fu == f1) {
            if (fi == NI) return;  // no more work (the claim past the last item was read): the slot is never read
            const int next = read(nx);
            if (next >= NI) {
                fi = NI;
                return;
            }
            fi = next;
            v3_range(fi, NI, U, gran, fu, f1);
            nx = issue();
        }
        const u8* p = wbase + (size_t)fu * UB;
#pragma unroll
        for (int j = 0; j < NW; ++j) dst[j] = ld_stream16(p + j * 512);
        if constexpr (NV) {
            const u8* q = sbase + (size_t)fu * (C * R * 128);
#pragma unroll
            for (int j = 0; j < NS; ++j) sdst[j] = ld_stream_u32(q + j * 128);
        }
        ++fu;
    };
    uint4 ring[P][NW];
    u32 sring[P][NS];
#pragma unroll
    for (int j = 0; j < P; ++j) fetch(ring[j], sring[j]);

    const V3Out o{CS, RES, Y, M, nout};
    const u16* xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xrow[nt] = X + (size_t)(nt * 8 + g < M ? nt * 8 + g : 0) * Kp + t * (CK / 4);
    const int KB = Kp >> 7;  // FP8 block scales: float2 [group][Kp / 128][R]

    float acc[R][NT][4];
    zero_tiles(acc);
    long long cu = c0;
    int grp = (int)(cu / KU), kk = (int)(cu - (long long)grp * KU);
    bool live = true;
    while (live) {
#pragma unroll
        for (int j = 0; j < P; ++j) {
            if (!live) break;
            uint4 cur[NW];
            u32 scur[NS];
#pragma unroll
            for (int i = 0; i < NW; ++i) cur[i] = ring[j][i];
#pragma unroll
            for (int i = 0; i < NS; ++i) scur[i] = sring[j][i];
            fetch(ring[j], sring[j]);  // keep P units in flight, across items
            v3_unit<FMT, R, NT, C, 0>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);
            v3_after_unit<FMT, R, NT, EPI>(o, acc, grp, kk, cu, c0, c1, KU, U, NI, ci, lane, WS, CNT, smax);
            if (++cu == c1) {  // the item is done: the next one is the fetch's (if the fetch moved on)
                live = fi != ci && fi < NI;
                ci = fi;
                v3_range(ci, NI, U, gran, c0, c1);
                cu = c0;
                grp = (int)(cu / KU);
                kk = (int)(cu - (long long)grp * KU);
            }
        }
    }
}

#define GEMV6(FMT, R, NT, C, P, EPI, NORM)                                                                      \
    extern "C" __global__ void __launch_bounds__(256)                                                            \
        V3_CAT(gemv6_, V3_CAT(V3_FMT_NAME_##FMT, _r##R##_nt##NT##_c##C##_p##P##_e##EPI##_n##NORM))(               \
            V3_PARAMS, int* __restrict__ CLAIM, int NI) {                                                        \
        gemv6_body<FMT, R, NT, C, P, EPI, NORM>(V3_ARGS, CLAIM, NI);                                             \
    }

#ifndef FP8LAB_GEMV_V6
#error "the loader passes the instantiation list (gemv_v3.py KERNELS6) as a -D define"
#endif
FP8LAB_GEMV_V6
