// gemm_w8a8_tma.cu -- W8A8 block-scaled GEMM, version C: the Hopper GEMM as DeepGEMM and CUTLASS build it.
//
//   C[M, N] (bf16) = sum over 128-wide k-blocks kb of  sa[m, kb] * sb[n / 128, kb] * (A[m, kb-block] . B[n, kb-block])
//   (the arithmetic of gemm_w8a8.cu and gemm_w8a8_wgmma.cu; FP32 promotion of every k-block's partial sums)
//
// What changes against w8a8_wgmma_ws (cp.async producer warpgroup, 128 x 128 tiles, one tile per CTA):
//   * TMA: one producer THREAD issues two bulk tensor copies per stage (A 128 x 128 bytes, B TBN x 128 bytes)
//     instead of 128 threads issuing 2048 16-byte cp.async; the copy engine swizzles (128B, the layout the wgmma
//     descriptors read: tma.cuh, wgmma.cuh), zero-fills rows and k past the matrix, and counts the bytes on the
//     stage's `full` mbarrier (expect_tx), so nothing in the main loop waits on a copy except the consumers.
//   * warp specialization: warpgroup NWG (the last) produces, warpgroups 0..NWG-1 consume (wgmma + promotion);
//     with two consumers, setmaxnreg moves registers from the producer (40) to them (232).
//   * a persistent grid (launch as many CTAs as fit, each walks tiles t = cta, cta + grid, ...) with a grouped
//     tile order (GROUP m-blocks x all n-blocks before the next group): tiles running at the same time share A
//     rows and B columns in L2. Launching one CTA per tile gives the non-persistent rungs with the same code.
//   * 2-CTA clusters (CL = 2): the two CTAs take m-blocks 2i and 2i + 1 of the same n-block; each loads HALF of
//     the B tile and multicasts it to both, so B crosses L2 -> SM once per pair. A stage is refilled only when
//     the consumers of BOTH CTAs released it (each consumer warp arrives on its own and on the peer's `empty`).
//   * TBN = 256: the block tile is 128 x 256 (two n128 halves per consumer warpgroup: 128 accumulators + 64
//     partial sums per thread); 171 instead of 128 FLOP per byte moved from L2.
//   * EPI = 1: the bf16 tile goes through shared memory (128B-swizzled boxes of 64 columns) and out by TMA
//     store, asynchronously, while the consumers start the next tile; EPI = 0 stores from registers.
//
//   * split last wave (F, S): T tiles on P CTAs (clusters) take ceil(T / P) waves; where the last one would leave
//     most of the grid idle, its tiles are cut along K into S pieces run by different CTAs at once. Work item i < F
//     is tile i whole; item F + j is piece j % S of tile F + j / S (k-blocks [p KB / S, (p + 1) KB / S)). Every
//     piece writes its fp32 partial sums to a workspace and counts itself in; the LAST piece to arrive adds the S
//     partials in piece order (the same bits whichever finishes last) and stores the tile. No piece ever waits for
//     another, so nothing depends on which CTAs are resident. F = T, S = 1: no split.
//
// Kernel configurations (template <TBN, NWG, ST, CL, EPI>) are instantiated from the list in gemm_w8a8.py
// (TMA_CONFIGS), passed by the loader as -DFP8LAB_W8A8_TMA=W8A8_TMA(128,2,6,1,0)...; names are
// w8a8_tma_n<TBN>_w<NWG>_s<ST>_c<CL>_e<EPI>.
//
// Shapes: any M; N % 8 == 0 and K % 16 == 0 (TMA needs 16-byte row strides; N % 8 keeps bf16 rows 16-byte
// aligned for the TMA store); the last k-block and the last n- and m-tiles may be partial (zero-filled on load,
// clipped or masked on store). sa [M, ceil(K/128)] any strides; sb [ceil(N/128), ceil(K/128)] row-major.
//
// Tensor maps (128-byte CUtensorMap, encoded on the host by fp8lab/kernels/tma.py) arrive as
// `const __grid_constant__` parameters; tma_param_probe and tma_copy_probe check the passing and the encoding
// on the device before any GEMM runs.

#include "tma.cuh"
#include "wgmma.cuh"

// threadIdx.x, read afresh (asm volatile: not kept in a register across a loop, so never spilled)
__device__ __forceinline__ u32 tid_x() {
    u32 t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// Grouped tile order: units of CL m-blocks; `group` units x every n-block, then the next group.
//   at(t) for mu = 5 units, nb = 3, group = 2:  t = 0..5 -> (0,0) (1,0) (0,1) (1,1) (0,2) (1,2), t = 6.. -> (2,0) ...
struct TileMap {
    int mu, nb, group;
    __device__ __forceinline__ void at(int t, int& mu_i, int& n_i) const {
        const int per_group = group * nb;
        const int grp = t / per_group, first = grp * group;
        const int gsize = min(group, mu - first);
        const int in = t - grp * per_group;
        mu_i = first + in % gsize;
        n_i = in / gsize;
    }
    // The first row and column of tile t on the CTA of cluster rank `rank` (CL m-blocks of 128 rows per unit).
    template <int CL, int TBN>
    __device__ __forceinline__ void origin(int t, int rank, int& m0, int& n0) const {
        int mu_i, n_i;
        at(t, mu_i, n_i);
        m0 = (mu_i * CL + rank) * 128;
        n0 = n_i * TBN;
    }
};

// Work item i of the split schedule (see the header): its tile, k-block range, piece, and np: how many pieces the tile
// is cut into (1: whole; 0: an empty stream-K segment, skipped). S < 0 (stream-K tail): the k-blocks of the last T - F
// tiles, laid end to end, are cut into P equal ranges, one per CTA (cluster) c = (i - F) % P; item F + l P + c is the
// l-th tile range c touches (segment l; empty where c touches fewer tiles), and a tile's pieces are its owners in
// order: piece = c - (the owner of its first k-block). -S slots per tile hold the partials (the most owners a tile has).
// (32-bit arithmetic: the host keeps (T - F) KB P < 2**31, gemm_w8a8.streamk_tail.)
__device__ __forceinline__ int streamk_owner(int g, int TK, int P) { return ((g + 1) * P - 1) / TK; }
__device__ __forceinline__ void work_item(int i, int F, int S, int KB, int T, int P, int& t, int& kb0, int& kb1,
                                          int& piece, int& np) {
    if (i < F) {
        t = i, kb0 = 0, kb1 = KB, piece = 0, np = 1;
        return;
    }
    if (S > 0) {
        const int j = i - F, q = j / S;
        t = F + q;
        piece = j - q * S;
        kb0 = piece * KB / S;
        kb1 = (piece + 1) * KB / S;
        np = S;
        return;
    }
    const int j = i - F, l = j / P, c = j - l * P;
    const int TK = (T - F) * KB, g0 = c * TK / P, g1 = (c + 1) * TK / P;
    const int tr = g0 / KB + l;  // the tail tile of segment l
    const int lo = max(g0, tr * KB), hi = min(g1, (tr + 1) * KB);
    t = F + tr;
    if (lo >= hi) {  // c touches fewer than l + 1 tiles
        kb0 = kb1 = 0, piece = 0, np = 0;
        return;
    }
    kb0 = lo - tr * KB;
    kb1 = hi - tr * KB;
    const int first = streamk_owner(tr * KB, TK, P);
    piece = c - first;
    np = streamk_owner(tr * KB + KB - 1, TK, P) - first + 1;
}

// Work items of the schedule: F whole tiles, then the last T - F tiles in S pieces each, or (S < 0) as many layers of
// P stream-K segments as a CTA's range can touch tiles: ceil(TK / P) k-blocks span at most (ceil(TK / P) - 1) / KB + 2.
__device__ __forceinline__ int work_items(int F, int S, int KB, int T, int P) {
    if (S > 0) return F + (T - F) * S;
    const int TK = (T - F) * KB;
    return F + ((TK + P - 1) / P - 1) / KB * P + 2 * P;
}

// A split tile's fix-up, per consumer warpgroup (128 threads, thread tw): write this piece's partial sums to its
// slot, count the piece in; the last to arrive sums the S slots in piece order into acc and returns true (it stores
// the tile). acc: the thread's R accumulators (any shape, flattened); ws: this (tile, CTA, warpgroup)'s S slots of
// R x 128 floats; cnt: its counter (reset by the last).
template <int R>
__device__ __forceinline__ bool split_fixup(float (&acc)[R], float* __restrict__ ws, unsigned* cnt, int S, int piece,
                                            int tw, u32 bar_id) {
    constexpr int SLOT = R * 128;
    float* mine = ws + (size_t)piece * SLOT + tw;
#pragma unroll
    for (int j = 0; j < R; ++j) __stcg(mine + j * 128, acc[j]);
    __threadfence();  // this thread's partials are visible at GPU scope before the piece is counted
    named_sync(bar_id, 128);
    bool last = false;
    if (tw == 0) {
        last = atomicAdd(cnt, 1u) == (unsigned)(S - 1);
        if (last) *cnt = 0u;  // the next launch finds it zero (launches on a stream do not overlap)
    }
    if (!named_sync_or(bar_id, 128, last)) return false;
    __threadfence();
#pragma unroll
    for (int j = 0; j < R; ++j) acc[j] = __ldcg(ws + tw + j * 128);
    for (int p = 1; p < S; ++p) {
#pragma unroll
        for (int j = 0; j < R; ++j) acc[j] += __ldcg(ws + (size_t)p * SLOT + tw + j * 128);
    }
    return true;
}

// Every k-block of this CTA's (cluster's) work items, in order, with the pipeline stage it goes through: the
// producer thread and the scale warp walk the same schedule. fn(kb, s, ph, m0, n0): k-block, stage, phase, origin.
template <int CL, int TBN, int ST, class Fn>
__device__ __forceinline__ void walk_kblocks(const TileMap& tiles, int cid, int P, int items, int F, int S, int KB,
                                             int rank, Fn&& fn) {
    const int T = tiles.mu * tiles.nb;
    int s = 0;
    u32 ph = 0;
    for (int i = cid; i < items; i += P) {
        int t, kb0, kb1, piece, np, m0, n0;
        work_item(i, F, S, KB, T, P, t, kb0, kb1, piece, np);
        if (np == 0) continue;  // an empty stream-K segment
        tiles.origin<CL, TBN>(t, rank, m0, n0);
        for (int kb = kb0; kb < kb1; ++kb) {
            fn(kb, s, ph, m0, n0);
            if (++s == ST) { s = 0; ph ^= 1; }
        }
    }
}

template <int TBN, int NWG, int ST, int CL, int EPI, int PIPE, int SS, int STG>
__device__ __forceinline__ void w8a8_tma_body(const TmaDesc* tmA, const TmaDesc* tmB, const TmaDesc* tmC,
                                              const float* __restrict__ sa, long long sa_sm, long long sa_sk,
                                              const float* __restrict__ sb, u16* __restrict__ C, int M, int N, int K,
                                              int group, int F, int S, float* __restrict__ ws, unsigned* __restrict__ cnt) {
    constexpr int MH = NWG == 1 ? 2 : 1;   // m64 sub-tiles per consumer warpgroup (the block tile has 128 rows)
    // ODD (TBN = 224): two sub-tiles per warpgroup as for 256, n128 then n96 (48 of the second's 64 registers used);
    // a tile starts at n0 = 224 i, so both sub-tiles may span two weight-scale blocks, at the same offset 128 - n0 % 128
    constexpr bool ODD = TBN == 224;
    constexpr int NH = (TBN + 127) / 128;  // n128 sub-tiles (ODD: the second one 96 wide)
    // WIDE (TBN = 192): one m64n192 sub-tile per consumer warpgroup, issued as ONE batch per k-block (one wait, as
    // DeepGEMM's BLOCK_N = 160 / 192 tiles) instead of two n128 halves; its columns span two weight-scale blocks
    constexpr bool WIDE = TBN == 192;
    constexpr int NS = WIDE ? 2 : ODD ? 3 : NH;  // weight-scale blocks (of 128 columns) a tile touches
    constexpr int A_BYTES = 128 * 128, B_BYTES = TBN * 128, STAGE = A_BYTES + B_BYTES;
    constexpr int CBOX = 64 * MH * 128;    // one 64-column box of a warpgroup's C tile (bf16, 128B rows)
    constexpr int CWG = EPI ? (TBN / 64) * CBOX : 0;
    constexpr int SLOT = 128 * 4 + 16;     // SS: one stage's scales, sa of the tile's 128 rows + sb of its n128 blocks
    static_assert(TBN == 128 || TBN == 192 || TBN == 224 || TBN == 256, "TBN is 128, 192, 224 or 256");
    static_assert(!ODD || (NWG == 2 && SS && !PIPE && !STG && !EPI), "224-wide tiles: two consumer warpgroups, staged "
                  "scales, register-stored output (a 64-column TMA box would cross the tile's edge)");
    static_assert(!WIDE || (NWG == 2 && SS && !PIPE && !STG), "192-wide tiles: two consumer warpgroups, staged scales");
    static_assert(MH * NH <= 2, "accumulators: at most two 64 x 128 sub-tiles per thread (128 + 64 registers)");
    static_assert(CL == 1 || CL == 2, "clusters of 1 or 2 CTAs");
    static_assert(!PIPE || (TBN == 128 && NWG == 2), "two partial-sum buffers: 64 + 2 x 64 registers, 128 x 128 tiles");
    static_assert(!STG || (NWG == 2 && !PIPE), "the stagger orders two consumer warpgroups of the one-buffer loop");

    extern __shared__ __align__(1024) u8 smem_tma[];
    __shared__ __align__(8) u64 bars[2 * ST];  // full[s], empty[s]
    const u32 base = (smem_addr(smem_tma) + 1023u) & ~1023u;  // the same offset in every CTA (multicast)
    const u32 full0 = smem_addr(&bars[0]), empty0 = smem_addr(&bars[ST]);
    const u32 sbase = base + ST * STAGE + NWG * CWG;  // SS: the scale slots, one per stage
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const int KB = (K + 127) >> 7, NBS = (N + 127) >> 7;
    const u32 rank = CL > 1 ? cluster_rank() : 0u;
    const TileMap tiles{((M + 127) / 128 + CL - 1) / CL, (N + TBN - 1) / TBN, group};
    const int T = tiles.mu * tiles.nb;
    const int cid = blockIdx.x / CL, P = gridDim.x / CL;
    const int items = work_items(F, S, KB, T, P);  // F whole tiles, then the last T - F in pieces or stream-K segments

    if (tid == NWG * 128) {
        tma_prefetch_desc(tmA);
        tma_prefetch_desc(tmB);
        if (EPI) tma_prefetch_desc(tmC);
        for (int s = 0; s < ST; ++s) {
            // the producer's arrive.expect_tx (the bytes do the rest) + SS: one arrival per lane of the scale warp
            mbar_init(full0 + 8 * s, 1 + (SS ? 32 : 0));
            mbar_init(empty0 + 8 * s, NWG * 4 * CL);     // one arrival per consumer warp, of every CTA of the cluster
        }
        fence_mbar_init();
    }
    if (CL > 1) cluster_sync(); else __syncthreads();

    if (wg == NWG) {  // ---------------- producer warpgroup: one thread issues every copy ----------------
        if (NWG == 2) setmaxnreg_dec<40>();
        if (warp == NWG * 4 && lane == 0) {
            walk_kblocks<CL, TBN, ST>(tiles, cid, P, items, F, S, KB, (int)rank, [&](int kb, int s, u32 ph, int m0, int n0) {
                // A box past the last row (a cluster's second m-block when the m-blocks are odd; the second half of
                // B when N % 256 == 128) reads rows 0.. instead: those rows get zero scales or are never stored, and
                // no box is ever wholly outside the tensor. Partial boxes are zero-filled by the copy engine.
                const int ma = m0 < M ? m0 : 0, nbr = n0 + (int)rank * (TBN / CL) < N ? n0 + (int)rank * (TBN / CL) : 0;
                mbar_wait(empty0 + 8 * s, ph ^ 1);  // consumers (of both CTAs) released this stage
                const u32 fb = full0 + 8 * s, sA = base + s * STAGE, sB = sA + A_BYTES;
                mbar_expect_tx(fb, STAGE);
                tma_load_2d(sA, tmA, fb, kb * 128, ma);
                if (CL == 1) tma_load_2d(sB, tmB, fb, kb * 128, nbr);
                else tma_load_2d_mc(sB + rank * (B_BYTES / 2), tmB, fb, kb * 128, nbr, (u16)3);
            });
        }
        if (SS && warp == NWG * 4 + 1) {
            // The scale warp: the stage's sa column (128 rows, one 4-byte cp.async per row, zero past M) and sb
            // entries (lanes < NS, zero past the last n-block) into the stage's slot; each lane's copies arrive on
            // the stage's `full` barrier when they land (cp.async.mbarrier.arrive.noinc), so the consumers find the
            // scales beside the tiles and no global load sits in their loop.
            walk_kblocks<CL, TBN, ST>(tiles, cid, P, items, F, S, KB, (int)rank, [&](int kb, int s, u32 ph, int m0, int n0) {
                mbar_wait(empty0 + 8 * s, ph ^ 1);
                const u32 slot = sbase + s * SLOT;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int row = m0 + lane + 32 * j;
                    cp_async4_zfill(slot + 4 * (lane + 32 * j), row < M ? sa + row * sa_sm + kb * sa_sk : sa, row < M);
                }
                const int nbk = n0 / 128 + lane;
                if (lane < NS) cp_async4_zfill(slot + 512 + 4 * lane, nbk < NBS ? sb + (size_t)nbk * KB + kb : sb, nbk < NBS);
                cp_async_mbar_arrive_noinc(full0 + 8 * s);
            });
        }
        __syncwarp();
    } else {  // ---------------- consumer warpgroups ----------------
        if (NWG == 2) setmaxnreg_inc<232>();
        const int wq = warp & 3, g = lane >> 2, t4 = lane & 3;
        const u32 cbuf = base + ST * STAGE + wg * CWG;
        // ---- epilogue: the finished 128 x TBN tile (this warpgroup's rows) to C. acc: the thread's accumulators in any
        // shape, read flat: of m64 sub-tile mh, column group j (8 columns: n128 sub-tiles follow each other, 16 groups
        // apiece) sits at acc[mh * RM + 4j .. + 3], rows g (+0, +1) and g + 8 (+2, +3) ----
        auto epilogue = [&](auto& acc_any, int m0, int n0) {
            constexpr int R = sizeof(acc_any) / sizeof(float), RM = R / MH;
            float (&acc)[R] = reinterpret_cast<float (&)[R]>(acc_any);
            if (EPI == 0) {
#pragma unroll
                for (int mh = 0; mh < MH; ++mh) {
                    const int row = m0 + 64 * (wg * MH + mh) + 16 * wq + g;
#pragma unroll
                    for (int j = 0; j < TBN / 8; ++j) {
                        const int col = n0 + 8 * j + 2 * t4;
                        if (col < N) {
                            store_bf16x2(C, N, M, row, col, acc[mh * RM + 4 * j + 0], acc[mh * RM + 4 * j + 1]);
                            store_bf16x2(C, N, M, row + 8, col, acc[mh * RM + 4 * j + 2], acc[mh * RM + 4 * j + 3]);
                        }
                    }
                }
            } else {
                if (wq == 0 && lane == 0) bulk_wait_read<0>();  // the previous tile's store has read the buffer
                named_sync(1 + wg, 128);
#pragma unroll
                for (int mh = 0; mh < MH; ++mh) {
                    const int rl = 64 * mh + 16 * wq + g;  // row in this warpgroup's C tile; rl & 7 == g
#pragma unroll
                    for (int j = 0; j < TBN / 8; ++j) {
                        const u32 a = cbuf + (j >> 3) * CBOX + rl * 128 + (((j & 7) ^ g) << 4) + 4 * t4;
                        st_shared_u32(a, bf16x2_rn(acc[mh * RM + 4 * j + 0], acc[mh * RM + 4 * j + 1]));
                        st_shared_u32(a + 8 * 128, bf16x2_rn(acc[mh * RM + 4 * j + 2], acc[mh * RM + 4 * j + 3]));
                    }
                }
                fence_proxy_async();  // generic-proxy stores -> visible to the copy engine
                named_sync(1 + wg, 128);
                if (wq == 0 && lane == 0) {  // boxes are clipped at the tensor's edge; wholly outside ones are skipped
                    const int r = m0 + 64 * MH * wg;
#pragma unroll
                    for (int b = 0; b < TBN / 64; ++b)
                        if (r < M && n0 + 64 * b < N) tma_store_2d(tmC, cbuf + b * CBOX, n0 + 64 * b, r);
                    bulk_commit();
                }
            }
        };
        // The dequantization scales of k-block kb for this thread's accumulator rows (g, g + 8 of each m64 sub-tile)
        // and the tile's n128 blocks; zero past the matrix.
        auto load_scales = [&](int m0, int n0, int kb, float (&b)[NH], float (&x0)[MH], float (&x1)[MH]) {
#pragma unroll
            for (int nh = 0; nh < NH; ++nh) {
                const int nbk = n0 / 128 + nh;
                b[nh] = nbk < NBS ? __ldg(sb + (size_t)nbk * KB + kb) : 0.f;
            }
#pragma unroll
            for (int mh = 0; mh < MH; ++mh) {
                const int r0 = m0 + 64 * (wg * MH + mh) + 16 * wq + g;
                x0[mh] = r0 < M ? __ldg(sa + r0 * sa_sm + kb * sa_sk) : 0.f;
                x1[mh] = r0 + 8 < M ? __ldg(sa + (r0 + 8) * sa_sm + kb * sa_sk) : 0.f;
            }
        };
        // SS: the same scales from stage s's slot (read before the stage is released: the scale warp refills it)
        auto slot_scales = [&](int s, float (&b)[NS], float (&x0)[MH], float (&x1)[MH]) {
            const u32 slot = sbase + s * SLOT;
#pragma unroll
            for (int nh = 0; nh < NS; ++nh) b[nh] = ld_shared_f32(slot + 512 + 4 * nh);
#pragma unroll
            for (int mh = 0; mh < MH; ++mh) {
                const int r0 = 64 * (wg * MH + mh) + 16 * wq + g;
                x0[mh] = ld_shared_f32(slot + 4 * r0);
                x1[mh] = ld_shared_f32(slot + 4 * (r0 + 8));
            }
        };
        // A split tile's pieces: true where this warpgroup stores the tile (whole, or the last piece to arrive).
        auto finish = [&](auto& acc, int t, int piece, int np) -> bool {
            if constexpr (NWG == 1) return true;  // one consumer warpgroup: every register is taken; never split
            if (t < F || np == 1) return true;
            constexpr int R = sizeof(acc) / sizeof(float);
            const size_t who = (size_t)((t - F) * CL + (int)rank) * NWG + wg;
            const int slots = S > 0 ? S : -S;  // per tile: S pieces, or (stream-K) the most owners a tile has
            return split_fixup<R>(reinterpret_cast<float (&)[R]>(acc), ws + who * slots * (R * 128), cnt + who, np,
                                  piece, tid & 127, 1 + wg);
        };
        if constexpr (WIDE) {
            // One 64 x 192 sub-tile per warpgroup: 96 accumulators + 96 partial sums per thread, one batch of four
            // m64n192k32 per k-block, one wait, one promotion. A tile starts at n0 = 192 i, so its first 128 - n0 % 128
            // columns (128 for even i, 64 for odd) take weight-scale block n0 / 128 and the rest the next one; the two
            // promotions (JB = 16 or 8 column groups of the first block) are both compiled out straight.
            constexpr int R = TBN / 2;
            float acc[R], part[R];
            int s = 0;
            u32 ph = 0;
            for (int i = cid; i < items; i += P) {
                int t, kb0, kb1, piece, np, m0, n0;
                work_item(i, F, S, KB, T, P, t, kb0, kb1, piece, np);
                if (np == 0) continue;  // an empty stream-K segment
                tiles.origin<CL, TBN>(t, (int)rank, m0, n0);
                zero<R>(acc);
                const bool aligned = (n0 & 127) == 0;  // 128 columns in the first scale block (else 64)
                for (int kb = kb0; kb < kb1; ++kb) {
                    mbar_wait(full0 + 8 * s, ph);
                    float b[NS], x0[1], x1[1];
                    slot_scales(s, b, x0, x1);
                    const u32 sA = base + s * STAGE;
                    wg_issue_n<192>(part, sA + (int)(tid_x() >> 7) * (64 * 128), sA + A_BYTES);
                    wgmma_wait<0>();
                    if (lane == 0) mbar_arrive(empty0 + 8 * s);
                    if (CL > 1 && lane == 1) mbar_arrive_cluster(empty0 + 8 * s, rank ^ 1u);
                    const float c0 = x0[0] * b[0], c8 = x1[0] * b[0], d0 = x0[0] * b[1], d8 = x1[0] * b[1];
                    if (aligned) promote_split<R, 16>(acc, part, c0, c8, d0, d8);
                    else promote_split<R, 8>(acc, part, c0, c8, d0, d8);
                    if (++s == ST) { s = 0; ph ^= 1; }
                }
                work_item(i, F, S, KB, T, P, t, kb0, kb1, piece, np);  // recomputed: not live across the k-loop
                tiles.origin<CL, TBN>(t, (int)rank, m0, n0);
                if (finish(acc, t, piece, np)) epilogue(acc, m0, n0);
            }
        } else if constexpr (PIPE) {
            // Two partial-sum buffers (pa, pb): k-block kb + 1 is issued into one BEFORE k-block kb's products are
            // promoted from the other (wgmma.wait_group 1 instead of 0), so this warpgroup's next batch is already on
            // the tensor cores while its FFMAs run. acc 64 + pa 64 + pb 64 registers per thread.
            // ptxas keeps the wgmma pipeline asynchronous only when no batch is in flight across a branch or a loop's
            // back edge (else it serializes every wgmma: C7514 / C7518 in its -v log), so the k-blocks go in groups of
            // four written out straight (3 of 4 promotions overlap a batch), a remainder one at a time.
            float acc[1][64], pa[64], pb[64];
            float ca = 0.f, ca8 = 0.f, cb = 0.f, cb8 = 0.f;  // SS: the scales of the k-block in pa, in pb
            int s = 0, r = 0;  // the stage to issue next, the stage to release next
            u32 ph = 0;
            auto issue = [&](float (&p)[64], float& c, float& c8) {
                mbar_wait(full0 + 8 * s, ph);
                const u32 sA = base + s * STAGE;
                wg_issue(p, sA + wg * (64 * 128), sA + A_BYTES);
                if constexpr (SS) {
                    float b[1], x0[1], x1[1];
                    slot_scales(s, b, x0, x1);
                    c = x0[0] * b[0];
                    c8 = x1[0] * b[0];
                }
                if (++s == ST) { s = 0; ph ^= 1; }
            };
            auto release = [&]() {  // the tensor cores are done with the oldest stage this warpgroup holds
                mbar_arrive_if(empty0 + 8 * r, lane == 0);
                if (CL > 1) mbar_arrive_cluster_if(empty0 + 8 * r, rank ^ 1u, lane == 1);
                if (++r == ST) r = 0;
            };
            for (int i = cid; i < items; i += P) {
                int t, kb0, kb1, piece, np, m0, n0;
                work_item(i, F, S, KB, T, P, t, kb0, kb1, piece, np);
                if (np == 0) continue;  // an empty stream-K segment
                tiles.origin<CL, TBN>(t, (int)rank, m0, n0);
                zero<64>(acc[0]);
                float cur = 0.f, cur8 = 0.f;  // !SS: scales of the k-block promoted next
                if constexpr (!SS) {
                    float sb0[1], s00[1], s10[1];
                    load_scales(m0, n0, kb0, sb0, s00, s10);
                    cur = s00[0] * sb0[0];
                    cur8 = s10[0] * sb0[0];
                }
                // promote `p` (k-block kb) with its scales: SS, those read at its issue (c, c8); else `cur`, loading
                // those of kb + 1 first
                auto promote_kb = [&](float (&p)[64], int kb, float c, float c8) {
                    if constexpr (SS) {
                        promote(acc[0], p, c, c8);
                    } else {
                        float b[1], x0[1], x1[1];
                        load_scales(m0, n0, kb + 1 < kb1 ? kb + 1 : kb, b, x0, x1);
                        promote(acc[0], p, cur, cur8);
                        cur = x0[0] * b[0];
                        cur8 = x1[0] * b[0];
                    }
                };
                int kb = kb0;
                for (; kb + 4 <= kb1; kb += 4) {
                    issue(pa, ca, ca8);
                    issue(pb, cb, cb8);
                    wgmma_wait<1>();
                    release();
                    promote_kb(pa, kb, ca, ca8);
                    issue(pa, ca, ca8);
                    wgmma_wait<1>();
                    release();
                    promote_kb(pb, kb + 1, cb, cb8);
                    issue(pb, cb, cb8);
                    wgmma_wait<1>();
                    release();
                    promote_kb(pa, kb + 2, ca, ca8);
                    wgmma_wait<0>();
                    release();
                    promote_kb(pb, kb + 3, cb, cb8);
                }
                for (; kb < kb1; ++kb) {
                    issue(pa, ca, ca8);
                    wgmma_wait<0>();
                    release();
                    promote_kb(pa, kb, ca, ca8);
                }
                if constexpr (SS) {  // recomputed: nothing of the tile's position stays live across the k-loop
                    work_item(i, F, S, KB, T, P, t, kb0, kb1, piece, np);
                    tiles.origin<CL, TBN>(t, (int)rank, m0, n0);
                }
                if (finish(acc, t, piece, np)) epilogue(acc, m0, n0);
            }
        } else {
            float acc[MH * NH][64], part[64];
            zero<64>(part);
            bool pending = STG == 1;  // STG 1: the CTA's first k-block is still to come
            int s = 0;
            u32 ph = 0;
            for (int i = cid; i < items; i += P) {
                int t, kb0, kb1, piece, np, m0, n0;
                work_item(i, F, S, KB, T, P, t, kb0, kb1, piece, np);
                if (np == 0) continue;  // an empty stream-K segment
                tiles.origin<CL, TBN>(t, (int)rank, m0, n0);
                zero<64 * MH * NH>(&acc[0][0]);
                // Scales of k-block kb + 1 are loaded while k-block kb multiplies (one iteration, 500+ cycles, hides an L2
                // round trip); those of the tile's first k-block before its first wait.
                float sbv[NS], s0[MH], s1[MH];
                // ODD: the column groups of each sub-tile in its first weight-scale block (4, 8, 12 or 16)
                const int jb = ODD ? (128 - (n0 & 127)) >> 3 : 16;
                if constexpr (!SS) load_scales(m0, n0, kb0, sbv, s0, s1);
                for (int kb = kb0; kb < kb1; ++kb) {
                    mbar_wait(full0 + 8 * s, ph);
                    float nsbv[NH], ns0[MH], ns1[MH];
                    if constexpr (SS) slot_scales(s, sbv, s0, s1);  // this k-block's, from its stage
                    else load_scales(m0, n0, kb + 1 < kb1 ? kb + 1 : kb, nsbv, ns0, ns1);
                    const u32 sA = base + s * STAGE, sB = sA + A_BYTES;
#pragma unroll
                    for (int mh = 0; mh < MH; ++mh)
#pragma unroll
                        for (int nh = 0; nh < NH; ++nh) {
                            // STG: the second consumer warpgroup issues its first k-block of the CTA (1) or of every
                            // work item (2) only once the first warpgroup's has finished. Both wait on named barrier 3
                            // (the second before its issue, the first after its MMAs): a bar.arrive by the first could
                            // run a whole short item ahead and complete the barrier on its own arrivals, after which
                            // the second would wait forever; a bar.sync on both sides pairs item i with item i.
                            const bool lead = STG && mh == 0 && nh == 0 && (STG == 2 ? kb == kb0 : pending);
                            if (STG == 1) pending = pending && !lead;
                            if (lead && (tid_x() >> 7) == 1) named_sync(3, 256);
                            // the warpgroup re-read from %tid.x: ptxas otherwise spills `wg` and reloads it per k-block
                            const u32 sA_wg = sA + ((SS ? (int)(tid_x() >> 7) : wg) * MH + mh) * (64 * 128);
                            if (ODD && nh == 1) wg_issue_n<96>(part, sA_wg, sB + 128 * 128);
                            else wg_issue(part, sA_wg, sB + nh * (128 * 128));
                            wgmma_wait<0>();
                            if (lead && (tid_x() >> 7) == 0) named_sync(3, 256);
                            if (mh == MH - 1 && nh == NH - 1) {  // the tensor cores are done with this stage
                                if (lane == 0) mbar_arrive(empty0 + 8 * s);
                                if (CL > 1 && lane == 1) mbar_arrive_cluster(empty0 + 8 * s, rank ^ 1u);
                            }
                            if constexpr (ODD) {  // sub-tile nh spans blocks nh and nh + 1 of the tile's three
                                const float b0 = sbv[nh], b1 = sbv[nh + 1];
                                if (nh == 0) promote_split_rt<64>(acc[mh * NH + nh], part, jb, s0[mh] * b0, s1[mh] * b0, s0[mh] * b1, s1[mh] * b1);
                                else promote_split_rt<48>(acc[mh * NH + nh], part, jb, s0[mh] * b0, s1[mh] * b0, s0[mh] * b1, s1[mh] * b1);
                            } else {
                                promote(acc[mh * NH + nh], part, s0[mh] * sbv[nh], s1[mh] * sbv[nh]);
                            }
                        }
                    if (++s == ST) { s = 0; ph ^= 1; }
                    if constexpr (!SS) {
#pragma unroll
                        for (int nh = 0; nh < NH; ++nh) sbv[nh] = nsbv[nh];
#pragma unroll
                        for (int mh = 0; mh < MH; ++mh) { s0[mh] = ns0[mh]; s1[mh] = ns1[mh]; }
                    }
                }
                if constexpr (SS) {  // recomputed: nothing of the tile's position stays live across the k-loop
                    work_item(i, F, S, KB, T, P, t, kb0, kb1, piece, np);
                    tiles.origin<CL, TBN>(t, (int)rank, m0, n0);
                }
                if (finish(acc, t, piece, np)) epilogue(acc, m0, n0);
            }
        }
        if (EPI && wq == 0 && lane == 0) bulk_wait<0>();
    }
    // A CTA may not leave while its peer can still arrive on its barriers or multicast into its shared memory.
    if (CL > 1) cluster_sync();
}

#define W8A8_TMA_CLUSTER_1
#define W8A8_TMA_CLUSTER_2 __cluster_dims__(2, 1, 1)
// grid = CTAs (a multiple of CL), block = 128 * (NWG + 1); F, S: the split schedule (F = T, S = 1: none), ws: fp32
// workspace of (T - F) x CL x NWG x S x (acc registers x 128) floats, cnt: (T - F) x CL x NWG zeroed counters;
// dynamic smem = ST * (128 + TBN) * 128 + NWG * CWG + (SS ? ST * SLOT : 0) + 1 KB
#define W8A8_TMA_KERNEL(NAME, TBN, NWG, ST, CL, EPI, PIPE, SS, STG)                                                      \
    extern "C" __global__ void __launch_bounds__(128 * (NWG + 1), 1) W8A8_TMA_CLUSTER_##CL NAME(                    \
        const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB, const __grid_constant__ TmaDesc tmC, \
        const float* __restrict__ sa, long long sa_sm, long long sa_sk, const float* __restrict__ sb,               \
        u16* __restrict__ C, int M, int N, int K, int group, int F, int S, float* __restrict__ ws,                   \
        unsigned* __restrict__ cnt) {                                                                                \
        w8a8_tma_body<TBN, NWG, ST, CL, EPI, PIPE, SS, STG>(&tmA, &tmB, &tmC, sa, sa_sm, sa_sk, sb, C, M, N, K, group, F, S, \
                                                       ws, cnt);                                                     \
    }
#define W8A8_TMA(TBN, NWG, ST, CL, EPI) \
    W8A8_TMA_KERNEL(w8a8_tma_n##TBN##_w##NWG##_s##ST##_c##CL##_e##EPI, TBN, NWG, ST, CL, EPI, 0, 0, 0)
// the pipelined consumers (two partial-sum buffers): names end in _p2
#define W8A8_TMA_P(TBN, NWG, ST, CL, EPI) \
    W8A8_TMA_KERNEL(w8a8_tma_n##TBN##_w##NWG##_s##ST##_c##CL##_e##EPI##_p2, TBN, NWG, ST, CL, EPI, 1, 0, 0)
// scales staged in shared memory by the scale warp: names end in _ss (_ss_p2 with the pipelined consumers)
#define W8A8_TMA_S(TBN, NWG, ST, CL, EPI) \
    W8A8_TMA_KERNEL(w8a8_tma_n##TBN##_w##NWG##_s##ST##_c##CL##_e##EPI##_ss, TBN, NWG, ST, CL, EPI, 0, 1, 0)
#define W8A8_TMA_PS(TBN, NWG, ST, CL, EPI) \
    W8A8_TMA_KERNEL(w8a8_tma_n##TBN##_w##NWG##_s##ST##_c##CL##_e##EPI##_ss_p2, TBN, NWG, ST, CL, EPI, 1, 1, 0)
// scales staged and the consumers staggered (the second warpgroup a k-block behind): names end in _ss_sg<STG>
#define W8A8_TMA_SG(TBN, NWG, ST, CL, EPI, STG) \
    W8A8_TMA_KERNEL(w8a8_tma_n##TBN##_w##NWG##_s##ST##_c##CL##_e##EPI##_ss_sg##STG, TBN, NWG, ST, CL, EPI, 0, 1, STG)

#if !defined(FP8LAB_W8A8_TMA) || !defined(FP8LAB_W8A8_TMA_P) || !defined(FP8LAB_W8A8_TMA_S) || !defined(FP8LAB_W8A8_TMA_PS) || !defined(FP8LAB_W8A8_TMA_SG)
#error "the loader passes the instantiation lists (gemm_w8a8.py TMA_CONFIGS) as -DFP8LAB_W8A8_TMA=W8A8_TMA(...)..."
#endif
FP8LAB_W8A8_TMA
FP8LAB_W8A8_TMA_P
FP8LAB_W8A8_TMA_S
FP8LAB_W8A8_TMA_PS
FP8LAB_W8A8_TMA_SG

// ---- device-side checks of the host's tensor maps (fp8lab/kernels/tma.py) --------------------------------------
// The parameter arrived byte for byte: copy its 128 bytes out.
extern "C" __global__ void tma_param_probe(const __grid_constant__ TmaDesc d, u64* __restrict__ out) {
    if (threadIdx.x < 16) out[threadIdx.x] = d.opaque[threadIdx.x];
}

// One TMA load of a ROWS x 128-byte box at (c0, c1) of a uint8 map with the 128B swizzle, undone on the way out:
// out[r * 128 + c] must equal the source tile (zeros past the tensor). 128 threads, dynamic smem = ROWS * 128 + 1 KB.
extern "C" __global__ void tma_copy_probe(const __grid_constant__ TmaDesc d, u8* __restrict__ out, int c0, int c1, int rows) {
    extern __shared__ __align__(1024) u8 smem_probe[];
    __shared__ __align__(8) u64 bar;
    const u32 base = (smem_addr(smem_probe) + 1023u) & ~1023u, b = smem_addr(&bar);
    if (threadIdx.x == 0) {
        mbar_init(b, 1);
        fence_mbar_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_expect_tx(b, rows * 128);
        tma_load_2d(base, &d, b, c0, c1);
    }
    mbar_wait(b, 0);
    for (int i = threadIdx.x; i < rows * 8; i += blockDim.x) {  // 16-byte chunk c of row r sits at c ^ (r & 7)
        const int r = i >> 3, c = i & 7;
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(base + r * 128 + ((c ^ (r & 7)) << 4)));
        *reinterpret_cast<uint4*>(out + r * 128 + c * 16) = v;
    }
}
