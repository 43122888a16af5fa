// attention_decode_v3.cu -- decode attention VERSION 3 over a bf16, FP8 E4M3 or NVFP4 KV cache, contiguous or paged,
// GQA.
//
//   out[b, h*G+g, :] = softmax(q[b, h*G+g] . K[b, h]^T * sm_scale) . V[b, h]     (bf16 out, fp32 softmax)
//
// What the profile of versions 1 and 2 said (Nsight Compute on the H200, 32k tokens, D = 128, tools/gpu/ncu_attn.py):
// version 2's per-lane cp.async ring moved its bytes with the L2 busier than the DRAM (L2 80 % of its peak, DRAM
// 57 %), and version 1 (registers) was latency-bound at two warps per scheduler. Version 3 keeps version 2's
// shared-memory ring and arithmetic and changes how the bytes arrive: the BULK COPY ENGINE moves whole rows.
//
//   * A 16-token tile is 16 K rows and 16 V rows. COPY = 0: every lane copies one row (lanes 0-15 K, 16-31 V) with one
//     cp.async.bulk each into a row slot of ROWB + 16 bytes -- one instruction in the source, but the copy takes
//     uniform operands, so ptxas issues it in a loop over the lanes' distinct addresses (32 passes). COPY = 1:
//     lanes 0 and 16 copy the tile's K and V rows as two runs of 16 ROWB bytes (a page holds whole tiles, so a tile's
//     rows are contiguous) into unpadded rows. Each stage of the per-warp ring has one mbarrier; lane 0 announces the
//     stage's bytes (expect_tx) and the copy engine counts them in. L2 policy evict_first: the cache is read once.
//     COPY = 2: a stage holds two tiles, and lanes 0 / 16 copy the stage's K / V rows that lie in the current page,
//     lanes 1 / 17 the rest from the next page (a stage spans at most two pages): one copy of 32 rows of a contiguous
//     cache instead of two of 16 (4 KB of FP8 rows at D = 128). The step's loop runs the two tiles one after the other.
//   * Rows 16 bytes apart in the banks (COPY = 0) make the shared loads conflict-free: a phase of 8 lanes reads rows
//     r, r+1 (K, with the "pairs" piece map kpiece<KMAP = 1> in attention_decode.cuh) or 4 rows at two offsets (V)
//     and every lane lands in its own 16-byte bank group. COPY = 1 saves the padding and the copy loop and pays 2-way
//     (K) and 4-way (V) conflicts: both are compiled, the bench's sweep measures them side by side.
//   * A tile that ends inside a sequence: only its valid rows are copied; the lanes of V rows past the end write
//     zeros instead (a stale V row could hold a NaN code, and NaN * 0 is NaN), then fence.proxy.async so that the
//     later bulk copy into the same slot is ordered after those stores. K rows past the end are masked by the softmax.
//   * A stage is refilled only after every lane's MMAs consumed its shared loads and a __syncwarp (gemv_v4.cu found
//     that a refill right behind the loads races).
//   * The split merge (decode_reduce) is launched with programmatic dependent launch: its launch overlaps this kernel.
//     This kernel may itself be launched so (Launch.pdl_main, the decode layer): it waits (pdl_wait) before its first
//     read, so its launch and block set-up overlap the kernel before it.
//   * NVFP4 (version 2's layouts and arithmetic, attention_decode.cuh): a tile adds its 16 rows of K and of V
//     block-scale codes, two more copies (or, for a partial tile, the lanes' own 4-byte loads with zeros past the end).
// Q fragments, Q.K^T, the online softmax, P.V and the output are version 2's (attention_decode.cuh), with K's piece
// map KMAP = 1 for FP8 / bf16. One softmax update per tile (NSUB = 1: a two-tile stage, COPY = 2, runs its tiles one
// after the other), no rotation: version 2's sweep chose NSUB = 1, and the rotation bought nothing measurable on the
// contiguous cache.
//
// Needs the bulk copy engine (cp.async.bulk, mbarrier transaction counts): sm_90 and later. No host code.
#include "attention_decode.cuh"
#include "tma.cuh"  // bulk_load_1d, l2_evict_first, mbar_expect_tx

DECODE_REDUCE_KERNEL

namespace attn {

// Shared-memory geometry of version 3: a stage is TPS tiles (2 for COPY = 2, else 1), [16 TPS K rows][16 TPS V rows],
// each row RS bytes apart, then for NVFP4 (TPS = 1) the tile's 16 rows of K block-scale codes and 16 of V's (SROW bytes
// each, contiguous: version 2's layout).
template <int D, int FMT, int COPY>
struct Geo3 {
    using G_ = Geo<D, FMT>;
    static constexpr int TPS = COPY == 2 ? 2 : 1;  // tiles per stage: COPY = 2 moves two tiles' rows per copy
    static constexpr int RS = G_::ROWB + (COPY == 0 ? 16 : 0);
    static constexpr int V_OFF = 16 * TPS * RS;
    static constexpr int SCB = G_::NV ? 16 * G_::SROW : 0;  // scale-code bytes of a tile, for K and again for V
    static constexpr int KS_OFF = 32 * TPS * RS, VS_OFF = KS_OFF + SCB;
    static constexpr int STAGE = 32 * TPS * RS + 2 * SCB;
    // the in-kernel merge's area (after the loop, over the rings): 4 warps x GM rows x (D dims + (m, l)) floats
    static constexpr int GMAX = 16;
    static constexpr int MERGE = 4 * GMAX * (D + 2) * 4;
    static_assert(!G_::NV || COPY == 1, "NVFP4 rows are copied per tile (COPY = 1)");
    static_assert(COPY >= 0 && COPY <= 2, "COPY: 0 a copy per row, 1 a copy per tile, 2 a copy per two tiles");
    static_assert(STAGE % 16 == 0 && G_::ROWB % 16 == 0 && SCB % 16 == 0,
                  "bulk copies move multiples of 16 bytes to 16-byte slots");
};

// Byte offset of the mbarriers in dynamic shared memory: after the 4 warps' rings, or after the merge's area when
// that is larger (attention_fp8kv.v3_smem computes the same).
template <int D, int FMT, int COPY>
__host__ __device__ constexpr int bars_offset(int ns) {
    return 4 * ns * Geo3<D, FMT, COPY>::STAGE > Geo3<D, FMT, COPY>::MERGE ? 4 * ns * Geo3<D, FMT, COPY>::STAGE
                                                                          : Geo3<D, FMT, COPY>::MERGE;
}

// ---- the split merge inside the kernel (merge_cnt != nullptr) --------------------------------------------------------
// The reduce kernel's job done by the main kernel, without a second launch: (1) the block's 4 warps (4 consecutive
// splits of one (sequence, kv head)) leave their unnormalized O, max and sum in shared memory, and the block merges
// them into one partial; (2) a block alone on its pair (gridDim.x == 1) writes the output; otherwise it writes the
// partial, and the last of the pair's gridDim.x blocks to arrive (a counter per pair: a barrier, then thread 0's
// release add; the last one's thread 0 then acquires, ptx.cuh) merges the gridDim.x partials, writes the output
// and sets the counter back to 0 for the next call. An empty split (past its sequence's end) has m = -inf, l = 0,
// O = 0 and weighs nothing.
template <int D, int FMT, int NR, int NT>
__device__ __forceinline__ void merge_in_kernel(const float (&o)[NT][Geo<D, FMT>::OT][4], const float (&m)[2],
                                                const float (&l)[2], float vs, int G, int Hq, int Hk, int b, int h,
                                                int warp, int r, int c, u16* __restrict__ out, float* __restrict__ part_o,
                                                float* __restrict__ part_ml, int* __restrict__ merge_cnt) {
    using G_ = Geo<D, FMT>;
    constexpr int GM = 16, D4 = D / 4;
    extern __shared__ __align__(128) uint4 dyn_smem[];
    float* const so = reinterpret_cast<float*>(dyn_smem);  // [4 warps][GM rows][D]
    float* const sml = so + 4 * GM * D;                    // [4 warps][GM rows][2]
    __syncthreads();  // every warp's ring reads (and copies, all waited for) are done: the area is free
    // lane (r, c) holds heads 2c + eh (+ 8 nt); element e = k*RL + i of a run is o[nt][e / 2][2 (e % 2) + eh], at
    // dim k*8*RL + r*RL + i (ATTN_VA_FINISH's layout)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int eh = 0; eh < 2; ++eh) {
            const int row = 2 * c + eh + 8 * nt;
            if (row >= G) continue;
#pragma unroll
            for (int k = 0; k < G_::NRUN; ++k) {
                const int d0 = k * 8 * G_::RL + r * G_::RL;
                float4* dst = reinterpret_cast<float4*>(so + (warp * GM + row) * D + d0);
#pragma unroll
                for (int i = 0; i < G_::RL / 4; ++i) {
                    float val[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const int e = k * G_::RL + 4 * i + j;
                        val[j] = o[nt][e >> 1][((e & 1) << 1) + eh] * vs;
                    }
                    dst[i] = make_float4(val[0], val[1], val[2], val[3]);
                }
            }
        }
#pragma unroll
    for (int ri = 0; ri < NR; ++ri) {
        const int row = r + 8 * ri;
        if (c == 0 && row < G) {
            sml[(warp * GM + row) * 2 + 0] = m[ri];
            sml[(warp * GM + row) * 2 + 1] = l[ri];
        }
    }
    __syncthreads();
    const int nblk = gridDim.x, blk = blockIdx.x;
    const size_t hq0 = (size_t)b * Hq + (size_t)h * G;
    for (int it = threadIdx.x; it < G * D4; it += blockDim.x) {
        const int row = it / D4, d = (it - row * D4) * 4;
        float M = neg_inf();
#pragma unroll
        for (int w = 0; w < 4; ++w) M = fmaxf(M, sml[(w * GM + row) * 2]);
        // A block of empty splits: weights 2**(-inf - 0) = 0 (no inf - inf), and its partial keeps m = -inf, so that
        // it weighs nothing in the pair's merge (a stored 0 would outweigh a pair whose true max is below -126 and
        // leave the sum 0 / 0 -- seen with one token of a very negative score)
        const float Mw = M == neg_inf() ? 0.f : M;
        float4 acc;
        float den;
        merge_sum<false>(sml + row * 2, 2 * GM, so + row * D + d, (size_t)GM * D, 4, Mw, acc, den);
        if (nblk == 1) {
            const float inv = 1.0f / den;
            *reinterpret_cast<uint2*>(out + (hq0 + row) * D + d) =
                make_uint2(bf16x2_rn(acc.x * inv, acc.y * inv), bf16x2_rn(acc.z * inv, acc.w * inv));
        } else {
            const size_t pr = (hq0 + row) * nblk + blk;
            *reinterpret_cast<float4*>(part_o + pr * D + d) = acc;
            if (d == 0) *reinterpret_cast<float2*>(part_ml + pr * 2) = make_float2(M, den);
        }
    }
    if (nblk == 1) return;
    __shared__ int last;
    // every thread's partial stores ordered before thread 0's arrival (the barrier), which releases them at GPU scope
    // (ptx.cuh arrive_release: no __threadfence, whose CCTL.IVALL drops the SM's L1 at each block's end; only the last
    // block pays the acquire's)
    __syncthreads();
    if (threadIdx.x == 0) {
        const int old = arrive_release(merge_cnt + (size_t)b * Hk + h);
        last = old == nblk - 1;
        if (last) {
            acquire_after_arrival();  // every other block's partial is visible to this thread, and (barrier) its block
            merge_cnt[(size_t)b * Hk + h] = 0;  // every block of the pair has arrived: ready for the next call
        }
    }
    __syncthreads();
    if (!last) return;
    // the last block reads the partials through L2 (__ldcg, merge_sum<true>): they were never in this SM's L1
    for (int it = threadIdx.x; it < G * D4; it += blockDim.x) {
        const int row = it / D4, d = (it - row * D4) * 4;
        const size_t pr = (hq0 + row) * nblk;
        float M = neg_inf();
        for (int s = 0; s < nblk; ++s) M = fmaxf(M, __ldcg(part_ml + (pr + s) * 2));
        float4 acc;
        float den;
        merge_sum<true>(part_ml + pr * 2, 2, part_o + pr * D + d, D, nblk, M, acc, den);
        const float inv = 1.0f / den;
        *reinterpret_cast<uint2*>(out + (hq0 + row) * D + d) =
            make_uint2(bf16x2_rn(acc.x * inv, acc.y * inv), bf16x2_rn(acc.z * inv, acc.w * inv));
    }
}

template <int D, int FMT, bool TWO, int NS, int COPY>
__device__ __forceinline__ void decode_v3_body(
    const u16* __restrict__ q, const u8* __restrict__ kpool, const u8* __restrict__ vpool,
    const u8* __restrict__ ksc, const u8* __restrict__ vsc,  // NVFP4 block-scale code pools (unused otherwise)
    const int* __restrict__ block_table, const int* __restrict__ seq_lens, const float* __restrict__ k_scale,
    const float* __restrict__ v_scale, int scale_stride, float sm_scale, int max_blocks, int page, int Hk, int G, int S,
    int split_len, u16* __restrict__ out, float* __restrict__ part_o, float* __restrict__ part_ml,
    int* __restrict__ merge_cnt) {
    using G_ = Geo<D, FMT>;
    using G3 = Geo3<D, FMT, COPY>;
    constexpr int NR = TWO ? 2 : 1;
    constexpr int NT = TWO ? 2 : 1;
    constexpr int OT = G_::OT;
    constexpr float UNIT = (FMT == FMT_FP8BIT || FMT == FMT_NVFP4) ? 256.0f : 1.0f;  // the conversions' 2**-8
    static_assert(NS >= 2, "the lanes' zero-fill and scale stores into a stage reach the other lanes' reads of it through "
                           "the __syncwarp of a step in between (with NS = 1 only the mbarrier wait, which orders the "
                           "copy engine's writes, not the lanes')");
    extern __shared__ __align__(128) uint4 dyn_smem[];

    const int lane = threadIdx.x & 31, r = lane >> 2, c = lane & 3;
    const int warp = threadIdx.x >> 5;
    const int split = blockIdx.x * (blockDim.x >> 5) + warp;
    const int h = blockIdx.y, b = blockIdx.z;
    const int Hq = Hk * G;
    pdl_launch_dependents();  // the merge kernel (decode_reduce) may become resident now; it waits for this grid's end
    pdl_wait();  // launched with PDL (the decode layer): q, the lengths and the cache's new token are written past here
    int t0, t1;
    const bool active = split_range(seq_lens, b, split, S, split_len, t0, t1);
    if (!active && merge_cnt == nullptr) return;  // the reduce kernel never reads an empty split (no barrier follows)
    if (!active) t1 = t0;                         // the in-kernel merge: an empty split still joins the block's barriers
    constexpr int TPS = G3::TPS, TT = 16 * TPS;  // a step (one stage) covers TT tokens
    const int nsteps = (t1 - t0 + TT - 1) / TT;

    u8* const ring = reinterpret_cast<u8*>(dyn_smem) + (size_t)warp * NS * G3::STAGE;
    const u32 ring_s = smem_addr(ring);
    const u32 bar0 = smem_addr(reinterpret_cast<u8*>(dyn_smem) + bars_offset<D, FMT, COPY>(NS)) + warp * NS * 8;
    const u64 policy = l2_evict_first();
    const int* bt = block_table + (size_t)b * max_blocks;

    // The tile cursor: page-table entry and offset of the next stage to copy (TT tokens a step, pages hold whole
    // tiles, so a two-tile stage spans at most two pages; a contiguous cache is one page of L tokens).
    int cblk = t0 / page, coff = t0 - (t0 / page) * page;
    const int row_lane = lane & 15;                      // the row this lane copies (COPY = 0) or zero-fills
    const u8* const pool_lane = lane < 16 ? kpool : vpool;
    const u32 slot_base = lane < 16 ? 0 : G3::V_OFF;
    const u32 slot_lane = slot_base + row_lane * G3::RS;
    const u8* const scale_lane = lane < 16 ? ksc : vsc;                        // NVFP4: lanes 8 / 24 copy the scales
    const u32 scale_slot = lane < 16 ? G3::KS_OFF : G3::VS_OFF;
    auto issue = [&](int i) {  // step i -> stage i % NS (i < nsteps); advances the cursor
        const int st = i % NS;
        const int nvalid = min(TT, t1 - (t0 + TT * i));
        const size_t row0 = ((size_t)bt[cblk] * Hk + h) * page + coff;
        const u32 dst = ring_s + st * G3::STAGE;
        const u32 bar = bar0 + 8 * st;
        // NVFP4 scale rows by the copy engine only for a whole tile whose scale rows start on a 16-byte boundary in
        // both pools (a contiguous cache whose length is not a multiple of 16 / SROW starts some tiles' scale rows
        // 4, 8 or 12 bytes off one; so does a pool view with a storage offset)
        const bool bulk_sc = G_::NV && nvalid == 16 &&
                             (((unsigned long long)(ksc + row0 * G_::SROW) | (unsigned long long)(vsc + row0 * G_::SROW)) & 15) == 0;
        if (lane == 0) mbar_expect_tx(bar, 2 * nvalid * G_::ROWB + (bulk_sc ? 2 * G3::SCB : 0));
        __syncwarp();
        if constexpr (COPY == 0) {
            if (row_lane < nvalid)
                bulk_load_1d(dst + slot_lane, pool_lane + (row0 + row_lane) * G_::ROWB, G_::ROWB, bar, policy);
        } else if constexpr (COPY == 1) {
            if (row_lane == 0)  // lanes 0 (K) and 16 (V)
                bulk_load_1d(dst + slot_lane, pool_lane + row0 * G_::ROWB, nvalid * G_::ROWB, bar, policy);
        } else {  // COPY = 2: the stage's rows in this page (lanes 0 / 16), the rest from the next page (lanes 1 / 17)
            const int n0 = min(nvalid, page - coff);
            if (row_lane == 0)
                bulk_load_1d(dst + slot_base, pool_lane + row0 * G_::ROWB, n0 * G_::ROWB, bar, policy);
            if (row_lane == 1 && n0 < nvalid)
                bulk_load_1d(dst + slot_base + n0 * G3::RS, pool_lane + ((size_t)bt[cblk + 1] * Hk + h) * page * G_::ROWB,
                             (nvalid - n0) * G_::ROWB, bar, policy);
        }
        if constexpr (TPS == 1) {
            if (nvalid < 16 && lane >= 16 && row_lane >= nvalid) {  // a V row past the end: zeros, not stale codes
                u8* z = ring + st * G3::STAGE + slot_lane;
#pragma unroll
                for (int k = 0; k < G_::ROWB / 16; ++k) reinterpret_cast<uint4*>(z)[k] = make_uint4(0u, 0u, 0u, 0u);
                fence_proxy_async();  // defensive: a partial tile is its split's last, so no later copy refills the slot
            }
        } else {
#pragma unroll
            for (int rr = row_lane; rr < TT; rr += 16) {  // two rows per lane
                if (nvalid < TT && lane >= 16 && rr >= nvalid) {
                    u8* z = ring + st * G3::STAGE + slot_base + rr * G3::RS;
#pragma unroll
                    for (int k = 0; k < G_::ROWB / 16; ++k) reinterpret_cast<uint4*>(z)[k] = make_uint4(0u, 0u, 0u, 0u);
                    fence_proxy_async();
                }
            }
        }
        if constexpr (G_::NV) {
            if (bulk_sc) {  // the tile's scale rows: 16 SROW bytes each for K and V, contiguous
                if (row_lane == 8) bulk_load_1d(dst + scale_slot, scale_lane + row0 * G_::SROW, G3::SCB, bar, policy);
            } else {
                // Otherwise the lanes move them (16 for K, 16 for V), 4 bytes at a time, zeros for rows past the end
                // (a V block scale there must not be a NaN code: its zero V row times NaN would be NaN).
#pragma unroll
                for (int off = 4 * (lane & 15); off < G3::SCB; off += 64) {
                    const bool ok = off / G_::SROW < nvalid;
                    const u32 w = ok ? *reinterpret_cast<const u32*>(scale_lane + row0 * G_::SROW + off) : 0u;
                    *reinterpret_cast<u32*>(ring + st * G3::STAGE + scale_slot + off) = w;
                }
                fence_proxy_async();  // generic stores, ordered before any later bulk copy into this slot
            }
        }
        coff += TT;
        if constexpr (TPS == 1) {
            if (coff >= page) { coff -= page; ++cblk; }
        } else {
            while (coff >= page) { coff -= page; ++cblk; }
        }
    };

    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < NS; ++j) mbar_init(bar0 + 8 * j, 1);
        fence_proxy_async();  // the initialized barriers, visible to the copy engine
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < NS; ++j)
        if (j < nsteps) issue(j);

    u32 qa[G_::NCH][4];
    float sc[2];
    q_fragments<D, FMT, TWO, 1>(q, (size_t)b * Hq + (size_t)h * G, G, r, c, sm_scale * k_scale[h * scale_stride] * LOG2E * UNIT,
                                qa, sc);
    float o[NT][OT][4];
    zero_o(o);
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};
    __syncwarp();  // the zero-fill stores of the first stages, before any lane reads them

    int st = 0;
    u32 phase = 0;
    for (int i = 0; i < nsteps; ++i) {
        mbar_wait(bar0 + 8 * st, phase);
#pragma unroll
        for (int u = 0; u < TPS; ++u) {  // the stage's tiles (a two-tile stage's second may lie past the end)
            const int nv = t1 - (t0 + TT * i + 16 * u);
            if (TPS > 1 && nv <= 0) break;
            const u8* cur = ring + st * G3::STAGE + u * 16 * G3::RS;  // tile u's K rows (V rows: + V_OFF)
            Tile<D, FMT> t;
            // K: lane (r, c) reads rows r and r + 8: its piece slots pp = pieces kpiece<.., 1>(c, pp) (FP8 / bf16), or its
            // KPB bytes c (NVFP4: version 2's K layout, here read from the row as it lies in the cache)
#pragma unroll
            for (int nb = 0; nb < 2; ++nb) {
                if constexpr (G_::NV) {
                    ld_words<G_::KPB>(&t.k[nb][0], cur + (nb * 8 + r) * G3::RS + c * G_::KPB);
                } else {
#pragma unroll
                    for (int pp = 0; pp < G_::KP; ++pp)
                        ld_words<16>(&t.k[nb][pp * 4], cur + (nb * 8 + r) * G3::RS + kpiece<D, FMT, 1>(c, pp) * 16);
                }
            }
            if constexpr (G_::NV) read_kscales<D, FMT>(t, cur + G3::KS_OFF, r, c);
            float s[1][2][4];
            qk_tile<D, FMT>(t, qa, s[0]);
            u32 pa[1][4];
            float al[2];
            softmax_step<1, NR, G_::F16>(s, sc, nv, c, m, l, pa, al);
            const bool moved = (al[0] != 1.f) || (NR > 1 && al[1] != 1.f);
            if (__any_sync(0xFFFFFFFFu, moved)) rescale_o(o, al, c);
            // V: lane (r, c) reads tokens 2c, 2c+1, 2c+8, 2c+9, pieces k * 8 + r (version 2's geometry)
#pragma unroll
            for (int sl = 0; sl < 4; ++sl) {
                const int row = 2 * c + (sl & 1) + (sl >> 1) * 8;
#pragma unroll
                for (int k = 0; k < G_::NVP; ++k)
                    ld_words<G_::VPB>(&t.v[sl][k * (G_::VPB / 4)], cur + G3::V_OFF + row * G3::RS + (k * 8 + r) * G_::VPB);
            }
            if constexpr (G_::NV) read_vscales<D, FMT>(t, cur + G3::VS_OFF, r, c);
            pv_tile<D, FMT, NT>(t, pa[0], o);
        }
        // Every lane's MMAs consumed its shared loads: only now may the copy engine overwrite the stage.
        __syncwarp();
        if (i + NS < nsteps) issue(i + NS);
        if (++st == NS) { st = 0; phase ^= 1u; }
    }

    // ---- finish: row sums over the quad, then write --------------------------------------------------------
    const float vs = v_scale[h * scale_stride] * UNIT;
    quad_sum_rows<NR>(l);
    if (merge_cnt == nullptr) {
        ATTN_VA_FINISH();
        return;
    }
    merge_in_kernel<D, FMT, NR, NT>(o, m, l, vs, G, Hq, Hk, b, h, warp, r, c, out, part_o, part_ml, merge_cnt);
}

}  // namespace attn

// Kernel name: decode_v3_<bf16|fp8cvt|fp8bit>_d<D>_<g8|g16>_s<NS>_c<COPY>_b<MINB>; 4 warps per block, MINB blocks per
// SM asked of the register allocator. Dynamic shared memory: max(4 x NS x Geo3::STAGE bytes of rings, the merge's
// Geo3::MERGE), then 4 x NS mbarriers (bars_offset; attention_fp8kv.v3_smem); plus the 4-byte static flag of the
// in-kernel merge. The parameters are version 2's (one launch for both; ksc / vsc: NVFP4 only).
#define DECODE_V3(FMT, D, GG, NS, COPY, MINB)                                                                          \
    extern "C" __global__ void __launch_bounds__(128, MINB) decode_v3_##FMT##_d##D##_##GG##_s##NS##_c##COPY##_b##MINB( \
        const u16* q, const u8* kpool, const u8* vpool, const u8* ksc, const u8* vsc, const int* block_table,           \
        const int* seq_lens, const float* k_scale, const float* v_scale, int scale_stride, float sm_scale, int max_blocks, int page, int Hk,  \
        int G, int S, int split_len, u16* out, float* part_o, float* part_ml, int* merge_cnt) {                          \
        attn::decode_v3_body<D, ATTN_FMT_##FMT, ATTN_G_##GG, NS, COPY>(q, kpool, vpool, ksc, vsc, block_table, seq_lens, \
                                                                        k_scale, v_scale, scale_stride, sm_scale, max_blocks, \
                                                                        page, Hk, G, S, split_len, out, part_o, part_ml, \
                                                                        merge_cnt);                                      \
    }

#ifndef FP8LAB_ATTN_V3
#error "compile attention_decode_v3.cu through fp8lab.kernels._cuda (it passes the instantiation list)"
#endif
FP8LAB_ATTN_V3
