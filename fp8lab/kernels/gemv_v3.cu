// gemv_v3.cu -- decode GEMV / skinny GEMM, version 3: a Marlin-style packed weight stream, split evenly over a
// persistent grid (stream-K), many loads in flight per warp, and fused epilogues for the decode layer.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W)^T,   M = 1..32 tokens, fp32 accumulation on mma.sync bf16
//   W: FP8 E4M3 with per-channel or 128x128 block scales, or NVFP4 (E2M1 + E4M3 scale per 16 + fp32 global).
//
// Why a version 3 (versions 1 and 2, gemv_fp8.cu / gemv_nvfp4.cu, stay beside it and are timed with it):
//  1. Packed weights (gemv_v3.py pack_fp8 / pack_nvfp4, once at load time, as Marlin / Machete / TensorRT-LLM
//     repack theirs). 16 rows x 64 k (FP8) or x 128 k (NVFP4) form a 1 KiB chunk in exactly the order the
//     lanes consume it, so every warp load instruction reads 512 contiguous bytes and a whole matrix is one
//     linear stream: unit u (C chunks of R row tiles) lives at byte u * C * R * 1024.
//  2. The k order inside a chunk is chosen so that lane (g, t) multiplies runs of 16 CONSECUTIVE activations
//     (FP8: x[m][16t ..]; NVFP4: x[m][16t ..] and x[m][64 + 16t ..], its two 16-blocks) of its 4-lane group's
//     token: the activations enter the MMA as plain bf16 pairs straight from a 16-byte load -- no prmt per word
//     (versions 1 and 2 spend one or two per word) -- and the four lanes of a group read one 128-byte line per
//     load instruction (an NVFP4 order with 32 consecutive per lane read two: twice the L1 lines at M > 1).
//  3. FP8 bits are pre-scrambled inside each 32-bit word so that widening 4 codes costs 1 + 4 integer ops
//     (version 1: ~8) plus the two exact bf16x2 multiplies by 2**120:
//        codes e0..e3 (MMA k pairs (e0, e1) and (e2, e3))  ->  word W with
//        e0: sign bit 15, value bits 10:4     e1: sign 31, value 26:20     (A = W & 0x87F087F0: bf16x2 e0, e1)
//        e2: sign 11, value[3:0] 3:0, value[6:4] 14:12                       (B = ((W & 0x080F080F) << 4)
//        e3: sign 27, value[3:0] 19:16, value[6:4] 30:28                          | ((W >> 4) & 0x07000700))
//     Each half is then the E4M3 value times 2**-120 in bf16 (fp8_decode.cuh explains the bit move); one
//     bf16x2 multiply by 2**120 makes it exact. NVFP4 keeps the standard nibble encoding, ordered so that
//     the select trick (fp8_decode.cuh e2m1x8_to_bf16) hands out the four A registers of one MMA directly.
//  4. Stream-K: the U units are split into Wt equal contiguous ranges, one per warp of a persistent grid
//     (grid = SMs x CTAs per SM), so every warp streams the same number of bytes and the tail is one unit,
//     whatever N / 16 is. A group of rows (one output tile) covered by one warp is written directly; a group
//     split between warps is finished by the last of them: each writes its fp32 partial sums to its slot of a
//     workspace and bumps the group's counter (a release add); the warp that sees the count complete sums the slots
//     IN SLOT ORDER (deterministic, bit-reproducible) and runs the epilogue, then resets the counter.
//     Where N is large (gemv_v3.py whole_groups_pays) the ranges are cut at row-group boundaries instead (gran = KU
//     units): no group is split, and no warp ends in a fix-up (its fence, atomic and workspace reads).
//  5. P units of weight loads in flight per warp (a register ring: P * 2CR 16-byte loads issued before their
//     first use), ld.global.nc.L1::no_allocate (read once), activations through L1 (shared by every row).
//  6. Epilogues: plain store (x the per-channel scale, or the NVFP4 global scale), + residual (the decode
//     layer's O and down projections), and SiLU(gate) * up for a gate/up pair interleaved 8 rows at a time
//     (one pass over the concatenated weight: row g of a tile is gate row j, row g + 8 is up row j, so one lane
//     holds both and the product never leaves registers).
//  7. Programmatic dependent launch: weights (independent of earlier kernels) are put in flight before
//     pdl_wait(); activations and residuals are read after it (ptx.cuh).
//
// MMA operand map (m16n8k16, A = 16 weight rows, B = 8 tokens): lane (g = lane / 4, t = lane % 4) holds rows g,
// g + 8 and tokens 2t, 2t + 1 of the C fragment. FP8 step s (0..3) of a 64-k chunk uses the physical k
// 16t + 4s + {0, 1} for the MMA's k (2t, 2t + 1) and 16t + 4s + {2, 3} for (2t + 8, 2t + 9); NVFP4 step s (0..7)
// of a 128-k chunk, s = 4q + s', the same with 64q + 16t + 4s' (half q of the chunk is lane t's 16-block t + 4q, under one
// scale). Token rows past M read token 0 (their outputs are never stored).
//
// Launch: grid = ceil(Wt / WPC) CTAs of 32 * WPC threads (the Python side picks Wt <= U); shared memory only with
// NORM = 1 (the RMS-normalized activations, M (Kp + 8) bf16).
// Kernel names: gemv3_{fp8c|fp8b|nvfp4}_r{R}_nt{NT}_c{C}_p{P}_e{EPI}_n{NORM}; the instantiation list comes from
// gemv_v3.py KERNELS as a -D define, like versions 1 and 2.
#include "gemv_v3_common.cuh"  // widening, chunk MMAs, epilogues, stream-K fix-up, fused RMSNorm

// ---- the kernel body -------------------------------------------------------------------------------------------
template <int FMT, int R, int NT, int C, int P, int EPI, int NORM>
__device__ __forceinline__ void gemv3_body(V3_PARAMS) {
    constexpr bool NV = FMT == V3_NVFP4;
    constexpr int NW = 2 * C * R;            // 16-byte weight loads per lane per unit
    constexpr int NS = NV ? C * R : 1;       // NVFP4: 4-byte scale words per lane per unit
    constexpr int UB = C * R * 1024;         // weight bytes per unit
    constexpr int CK = NV ? 128 : 64;        // k per chunk
    constexpr int XV = NV ? 4 : 2;           // 16-byte activation loads per lane per chunk per token tile
    static_assert(FMT != V3_FP8B || C % 2 == 0, "128x128 block scales: units of whole 128-k blocks");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wpc = blockDim.x >> 5;
    const int wg = blockIdx.x * wpc + (threadIdx.x >> 5);
    const int Wt = gridDim.x * wpc;
    pdl_launch_dependents();
    long long u0, u1;
    v3_range(wg, Wt, U, gran, u0, u1);
    if (!NORM && u0 >= u1) return;  // an idle warp (whole-group ranges leave a few; NORM: it joins the CTA's barrier first)

    const u8* wbase = W + lane * 16;
    const u8* sbase = reinterpret_cast<const u8*>(S) + lane * 4;  // NVFP4 scale words
    auto load_unit = [&](uint4 (&dst)[NW], u32 (&sdst)[NS], long long u) {
        const u8* p = wbase + (size_t)u * UB;
#pragma unroll
        for (int j = 0; j < NW; ++j) dst[j] = ld_stream16(p + j * 512);
        if constexpr (NV) {
            const u8* q = sbase + (size_t)u * (C * R * 128);
#pragma unroll
            for (int j = 0; j < NS; ++j) sdst[j] = ld_stream_u32(q + j * 128);
        }
    };
    // weights first: they do not depend on earlier kernels, so they fly during pdl_wait()
    uint4 ring[P][NW];
    u32 sring[P][NS];
#pragma unroll
    for (int j = 0; j < P; ++j)
        if (u0 + j < u1) load_unit(ring[j], sring[j], u0 + j);
    pdl_wait();

    const V3Out o{CS, RES, Y, M, nout};
    extern __shared__ uint4 v3_smem[];
    const u16* xrow[NT];
    if constexpr (NORM) {
        u16* xs = reinterpret_cast<u16*>(v3_smem);
        v3_stage_normed<NT * 8>(X, G, eps, M, Kp, Kn, xs);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xrow[nt] = xs + (size_t)(nt * 8 + g < M ? nt * 8 + g : 0) * (Kp + 8) + 16 * t;
    } else {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xrow[nt] = X + (size_t)(nt * 8 + g < M ? nt * 8 + g : 0) * Kp + 16 * t;
    }
    const int KB = Kp >> 7;  // FP8 block scales: float2 [group][Kp / 128][R] (rows 0-7, rows 8-15 of the tile)

    float acc[R][NT][4];
    zero_tiles(acc);
    int grp = (int)(u0 / KU), kk = (int)(u0 - (long long)grp * KU);
    if (u0 >= u1) return;

    for (long long ub = u0; ub < u1; ub += P) {
#pragma unroll
        for (int j = 0; j < P; ++j) {
            const long long u = ub + j;
            if (u < u1) {
                uint4 cur[NW];
                u32 scur[NS];
#pragma unroll
                for (int i = 0; i < NW; ++i) cur[i] = ring[j][i];
#pragma unroll
                for (int i = 0; i < NS; ++i) scur[i] = sring[j][i];
                if (u + P < u1) load_unit(ring[j], sring[j], u + P);  // keep P units in flight
                v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);
                v3_after_unit<FMT, R, NT, EPI>(o, acc, grp, kk, u, u0, u1, KU, U, Wt, wg, lane, WS, CNT, smax, gran);
            }
        }
    }
}

#define GEMV3(FMT, R, NT, C, P, EPI, NORM)                                                                         \
    V3_DEFINE_KERNEL(V3_CAT(gemv3_, V3_CAT(V3_FMT_NAME_##FMT, _r##R##_nt##NT##_c##C##_p##P##_e##EPI##_n##NORM)), \
                     (gemv3_body<FMT, R, NT, C, P, EPI, NORM>))

#ifndef FP8LAB_GEMV_V3
#error "the loader passes the instantiation list (gemv_v3.py KERNELS) as a -D define"
#endif
FP8LAB_GEMV_V3
