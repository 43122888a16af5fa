// attention_decode.cuh -- decode attention, version 2: the parts every cache format shares (bf16, FP8 E4M3 by
// the cvt instruction or the bit move, NVFP4), used by attention_fp8kv.cu (bf16 / FP8) and attention_nvfp4kv.cu.
// Version 1 (attention_fp8kv.cu's decode_attn_*) takes its tile geometry, Q.K^T, P.V and output from here too.
//
//   out[b, h*G+g, :] = softmax(q[b, h*G+g] . K[b, h]^T * sm_scale) . V[b, h]     (bf16 out, fp32 softmax)
//
// What version 1 (attention_fp8kv.cu, kept as it was) taught: a warp that holds its tiles in flight in REGISTERS
// gets ~230 registers, so 8 warps per SM, 2 per scheduler; each 16-token tile then runs one long dependent chain
// (MMA -> max -> shuffles -> exp -> MMA) with only one other warp to hide it, and an FP8 tile carries half the
// bytes of a bf16 tile for the same chain. Measured on the H200: bf16 0.97 of copy bandwidth, FP8 0.87.
//
// Version 2 keeps the bytes in flight in SHARED memory instead (the GEMV's version-2 ring, gemv_common.cuh):
//   * each lane cp.async-copies exactly the 16-byte (8, 4) pieces of K and V that version 1 loaded into its
//     registers, into its own lane-interleaved slots of a per-warp ring of NS stages, and later reads back only
//     what it copied itself: cp.async.wait_group is the only synchronisation (no barrier), and the slots are
//     conflict-free (32 consecutive 16-byte words per instruction). Rows past the sequence end are zero-filled
//     by the copy (src-size 0), so no NaN from stale memory reaches P.V;
//   * so a warp needs ~half the registers (more warps per SM), and the prefetch depth (NS - 1 stages) no longer
//     costs registers;
//   * NSUB 16-token tiles per step share one softmax update (the max / shuffle / exp chain and the rescale of O
//     are paid once per 16 * NSUB tokens), and the rescale is skipped when no row's max moved (exactly 1);
//   * the order in which a warp visits its tiles is rotated by a hash of (split, head, sequence) (ROT = 1): the
//     softmax does not care about token order, and with it the warps of a contiguous cache stop marching through
//     addresses a power of two apart in lockstep (the paged layout ran faster than the contiguous one in
//     version 1, which is what that predicts).
// Per-lane fragment layouts, the conversions and the online softmax are version 1's (its header says why each
// is right); NVFP4 adds its own K and V layouts (below). The V operand is always the A operand of P.V ("va").
//
// NVFP4 K/V (bf16 MMAs): a token's row is D/2 bytes of E2M1 nibbles (element 2i in the low nibble of byte i,
// fp8lab.scaling.pack_nibbles) and D/16 E4M3 block-scale codes in a parallel pool; the fp32 global scale is per
// tensor or per KV head. A nibble word widens to bf16 pairs (nibble i, nibble i+4) by fp8_decode.cuh's
// e2m1x8_to_bf16 (value * 2**-126), and one bf16x2 multiply by the block scale * 2**118 (scale2_bf16x2) gives
// e2m1 * e4m3 * 2**-8 EXACTLY (at most 6 significant bits, a normal bf16); 2**8 * global goes into the fp32 score
// multiplier (K) and the output scale (V).
//   K: lane (r, c) holds dims KD*c .. KD*c + KD-1 (KD = D/4) of rows r and r+8: one 16-byte (D = 128) or 8-byte
//      piece, 1 or 2 scale blocks. Chunk j = 2 w + h of Q.K^T uses word w's pairs p[2h] (k-slots 2c, 2c+1) and
//      p[2h+1] (2c+8, 2c+9): dims base + 2h, +2h+4, +2h+1, +2h+5, base = KD*c + 8w. Q is gathered in that order.
//   V: lane (r, c) holds dims VD*r .. VD*r + VD-1 (VD = D/8) of tokens 2c, 2c+1, 2c+8, 2c+9: one block's scale per
//      token. prmt puts two tokens' words side by side so that the pair (nibble i, nibble i+4) IS (token 2c,
//      token 2c+1) at one dim: exactly V^T's A-fragment register. m-tile mt holds dims VD*r + 2mt (rows r) and
//      VD*r + 2mt + 1 (rows r+8), so the output of a lane is VD contiguous dims.
//   Scales: the tile's 16 rows of scale codes are contiguous (16 * D/16 = D bytes); lanes copy them in 4-byte
//   pieces and read them back across lanes, so NVFP4 adds a __syncwarp after the wait and before each refill.
//
// No host code; NVRTC-compatible; built without fast math (CuPy adds -ftz=true, which touches only f32 C++
// arithmetic: the bf16/f16 PTX here keeps subnormals). Instruction set: sm_80+ (cp.async, mma.sync, prmt), and
// cvt.rn.f16x2.e4m3x2 (sm_89+) for the FP8 cvt format, so every listed arch builds the same kernels.
#pragma once

#include "fp8_decode.cuh"

namespace attn {

enum : int { FMT_BF16 = 0, FMT_FP8CVT = 1, FMT_FP8BIT = 2, FMT_NVFP4 = 3 };

constexpr float LOG2E = 1.4426950408889634f;
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xFF800000); }
__device__ __forceinline__ float ex2(float x) {  // 2**x, ~2 ulp; ex2(-inf) = +0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
template <bool F16>
__device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    if constexpr (F16) mma_f16_16816(d, a[0], a[1], a[2], a[3], b0, b1);
    else mma_bf16_16816(d, a[0], a[1], a[2], a[3], b0, b1);
}

// ---- cp.async with zero fill: N = 16 (.cg, L2 fetches the 256-byte line), 8 or 4 (.ca) bytes ------------------
template <int N>
__device__ __forceinline__ void cp_async_z(u32 dst, const void* src, bool ok) {
    const int n = ok ? N : 0;
    if constexpr (N == 16)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(N), "r"(n) : "memory");
}

// ---- geometry of one 16-token tile, per format --------------------------------------------------------------
// Lane = 4 r + c (r = lane / 4 in 0..7, c = lane % 4), as in the MMA fragment layouts.
template <int D, int FMT>
struct Geo {
    static constexpr bool NV = FMT == FMT_NVFP4;
    static constexpr bool F16 = FMT == FMT_FP8CVT || FMT == FMT_FP8BIT;  // f16 MMAs (else bf16)
    static constexpr int BYTES = FMT == FMT_BF16 ? 2 : 1;     // bytes per element (FP8 / bf16)
    static constexpr int ROWB = NV ? D / 2 : D * BYTES;        // bytes of one token's K (or V) row
    static constexpr int NCH = D / 16;                         // k-chunks of Q.K^T
    // FP8 / bf16 (version 1's layout): K pieces of 16 bytes, lane c's piece p at byte (4p + c) * 16 of its row.
    static constexpr int EPP = 16 / BYTES;                     // elements per 16-byte piece
    static constexpr int CPP = EPP / 4;                        // chunks per piece
    static constexpr int KP = NV ? 1 : ROWB / 64;              // K pieces per lane per row
    static constexpr int KPB = NV ? ROWB / 4 : 16;             // bytes of one K piece
    static constexpr int KW = KP * KPB / 4;                    // u32 words per lane per K row
    // V: the 8 lanes r = 0..7 share a token; lane r holds VTB bytes of it, in NVP pieces of VPB bytes.
    static constexpr int VTB = ROWB / 8;
    static constexpr int VPB = VTB < 16 ? VTB : 16;
    static constexpr int NVP = VTB / VPB;
    static constexpr int VEPP = NV ? 2 * VPB : VPB / BYTES;    // elements per V piece
    static constexpr int VW = VTB / 4;                         // u32 words per lane per V token
    static constexpr int OT = D / 16;                          // m-tiles of O^T (16 dims each)
    // the output of a lane: NRUN runs of RL contiguous dims; run k, element i is dim k*8*RL + r*RL + i
    static constexpr int RL = VEPP;
    static constexpr int NRUN = NVP;
    // NVFP4 scale codes: SROW per row, the tile's 16 rows contiguous (D bytes), copied 4 bytes per lane
    static constexpr int SROW = D / 16;
    static constexpr int SCB = NV ? D : 0;                     // scale bytes per tile for K (and again for V)
    // shared memory of one tile in one warp's ring: [K slots][V slots][K scales][V scales]
    static constexpr int KSLOTS = 2 * KP, VSLOTS = 4 * NVP;
    static constexpr int K_OFF = 0, V_OFF = KSLOTS * 32 * KPB, KS_OFF = V_OFF + VSLOTS * 32 * VPB, VS_OFF = KS_OFF + SCB;
    static constexpr int TILE_BYTES = VS_OFF + SCB;
    static_assert(KSLOTS * 32 * KPB == 16 * ROWB && VSLOTS * 32 * VPB == 16 * ROWB, "a tile's K and V bytes, exactly");
    static_assert(TILE_BYTES % 16 == 0, "16-byte aligned tiles");
};

// Which 16-byte piece of a K row lane c holds as its piece slot pp (FP8 / bf16). KMAP 0 (versions 1 and 2): piece
// 4 pp + c, so the 4 lanes of a row read 64 contiguous bytes per instruction (full sectors from global memory).
// KMAP 1 (version 3, which reads K from a shared-memory copy of the rows): within each 128-byte block of the row,
// lane c holds pieces 2c and 2c+1 -- with rows 16 bytes apart in the banks (attention_decode_v3.cu), the 8 lanes of
// one shared-load phase (rows r, r+1) then hit 8 different 16-byte bank groups. A row of 64 bytes (FP8, D = 64) has
// one piece per lane, the same under both maps.
template <int D, int FMT, int KMAP>
__device__ __forceinline__ int kpiece(int c, int pp) {
    using G_ = Geo<D, FMT>;
    if constexpr (KMAP == 1 && G_::ROWB >= 128) return (pp / 2) * 8 + 2 * c + (pp % 2);
    else return pp * 4 + c;
}
// First of the 4 consecutive dims that lane c contributes to k-chunk j of Q.K^T (FP8 / bf16): chunk j lives in piece
// slot j / CPP, words (j % CPP) of it.
template <int D, int FMT, int KMAP = 0>
__device__ __forceinline__ int kdim(int c, int j) {
    using G_ = Geo<D, FMT>;
    return kpiece<D, FMT, KMAP>(c, j / G_::CPP) * G_::EPP + (j % G_::CPP) * 4;
}

template <int D, int FMT>
struct Tile {
    u32 k[2][Geo<D, FMT>::KW];  // K rows ts + nb*8 + r, nb = 0, 1
    u32 v[4][Geo<D, FMT>::VW];  // V rows ts + 2c, 2c+1, 2c+8, 2c+9
    u32 ks[2];                  // NVFP4: the K rows' block-scale codes (1 or 2 bytes each)
    u32 vs01, vs89;             // NVFP4: V scale codes of tokens (2c, 2c+1) and (2c+8, 2c+9), low byte first
};

// ---- copy one tile into the ring (global -> shared), every lane its own pieces ----------------------------------
// kb / vb: the tile's first K / V row (ROWB bytes each, 16 rows contiguous); ksb / vsb: its first scale row
// (NVFP4); nvalid: rows of the tile that hold tokens (<= 0: the whole tile zero-filled).
// FULL: all 16 rows hold tokens (the common case: no predicates, no address selects).
template <int D, int FMT, bool FULL>
__device__ __forceinline__ void issue_tile(u32 dst, const u8* kb, const u8* vb, const u8* ksb, const u8* vsb, int nvalid,
                                          int r, int c, int lane) {
    using G_ = Geo<D, FMT>;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
        const int row = nb * 8 + r;
        const bool ok = FULL || row < nvalid;
#pragma unroll
        for (int pp = 0; pp < G_::KP; ++pp) {
            const int off = row * G_::ROWB + (G_::NV ? c * G_::KPB : (pp * 4 + c) * 16);
            cp_async_z<G_::KPB>(dst + G_::K_OFF + ((nb * G_::KP + pp) * 32 + lane) * G_::KPB, ok ? kb + off : kb, ok);
        }
    }
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) {
        const int row = 2 * c + (sl & 1) + (sl >> 1) * 8;
        const bool ok = FULL || row < nvalid;
#pragma unroll
        for (int k = 0; k < G_::NVP; ++k) {
            const int off = row * G_::ROWB + (k * 8 + r) * G_::VPB;
            cp_async_z<G_::VPB>(dst + G_::V_OFF + ((sl * G_::NVP + k) * 32 + lane) * G_::VPB, ok ? vb + off : vb, ok);
        }
    }
    if constexpr (G_::NV) {
        if (lane < D / 4) {  // 4 bytes of the tile's scale rows each: row = 4 lane / SROW
            const bool ok = FULL || (4 * lane) / G_::SROW < nvalid;
            cp_async_z<4>(dst + G_::KS_OFF + 4 * lane, ok ? ksb + 4 * lane : ksb, ok);
            cp_async_z<4>(dst + G_::VS_OFF + 4 * lane, ok ? vsb + 4 * lane : vsb, ok);
        }
    }
}

// ---- read a tile back (shared -> registers): the lane's own slots; NVFP4 scales from any lane's ----------------
// K and V separately, so that a tile's K registers are dead before its V registers come alive (registers).
// A lane's slots of one operand: slot (a, b) of the NA x NP grid is PB bytes at ((a * NP + b) * 32 + lane) * PB,
// read into registers dst[a][b * PB/4 ..].
template <int NP, int PB, int NA, int W>
__device__ __forceinline__ void read_slots(u32 (&dst)[NA][W], const u8* base, int lane) {
    static_assert(NP * PB / 4 <= W, "the slots fit the registers");
#pragma unroll
    for (int a = 0; a < NA; ++a)
#pragma unroll
        for (int b = 0; b < NP; ++b) ld_words<PB>(&dst[a][b * (PB / 4)], base + ((a * NP + b) * 32 + lane) * PB);
}
// NVFP4 block-scale codes of a tile (the tile's 16 rows of SROW codes, contiguous in shared memory at ks / vs), read
// across lanes (versions 2 and 3). K: blocks 2c, 2c+1 (D = 128) or c (D = 64) of rows r and r + 8. V: the block of the
// lane's V dims VD*r .. VD*r + VD-1 for tokens (2c, 2c+1) and (2c+8, 2c+9), low byte first.
template <int D, int FMT>
__device__ __forceinline__ void read_kscales(Tile<D, FMT>& t, const u8* ksrc, int r, int c) {
    using G_ = Geo<D, FMT>;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
        const u8* ks = ksrc + (nb * 8 + r) * G_::SROW;
        t.ks[nb] = G_::SROW == 8 ? (u32)*reinterpret_cast<const u16*>(ks + 2 * c) : (u32)ks[c];
    }
}
template <int D, int FMT>
__device__ __forceinline__ void read_vscales(Tile<D, FMT>& t, const u8* vs, int r, int c) {
    using G_ = Geo<D, FMT>;
    const int blk = (r * (D / 8)) / 16;
    const int r0 = 2 * c;
    t.vs01 = (u32)vs[r0 * G_::SROW + blk] | ((u32)vs[(r0 + 1) * G_::SROW + blk] << 8);
    t.vs89 = (u32)vs[(r0 + 8) * G_::SROW + blk] | ((u32)vs[(r0 + 9) * G_::SROW + blk] << 8);
}
template <int D, int FMT>
__device__ __forceinline__ void read_k(Tile<D, FMT>& t, const u8* src, int r, int c, int lane) {
    using G_ = Geo<D, FMT>;
    read_slots<G_::KP, G_::KPB>(t.k, src + G_::K_OFF, lane);
    if constexpr (G_::NV) read_kscales<D, FMT>(t, src + G_::KS_OFF, r, c);
}
template <int D, int FMT>
__device__ __forceinline__ void read_v(Tile<D, FMT>& t, const u8* src, int r, int c, int lane) {
    using G_ = Geo<D, FMT>;
    read_slots<G_::NVP, G_::VPB>(t.v, src + G_::V_OFF, lane);
    if constexpr (G_::NV) read_vscales<D, FMT>(t, src + G_::VS_OFF, r, c);
}

// ---- one query row of the FP8 / bf16 paths (versions 1 and 2) ----------------------------------------------------
// Lane (r, c)'s pieces of the row, into the A registers of every k-chunk j: qa[j][ri] = k-slots (2c, 2c+1) and
// qa[j][2 + ri] = (2c+8, 2c+9). For f16 MMAs (FP8 K) the row is first scaled by the power of two qs = 2**(15 - e),
// amax = m * 2**e, m in [0.5, 1), so amax * qs lies in [2**14, 2**15): exact, and f16's range costs the scores
// nothing. Returns qs (1 for bf16, and for a zero or NaN row); the caller divides its score multiplier by it.
template <int D, int FMT, int NCH, int KMAP = 0>
__device__ __forceinline__ float q_row(u32 (&qa)[NCH][4], int ri, const u16* qrow, bool ok, int c) {
    static_assert(FMT != FMT_NVFP4, "NVFP4's Q stays bf16 in its own layout (q_fragments)");
    u32 raw[NCH][2];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < NCH; ++j) {
        uint2 x = ok ? *reinterpret_cast<const uint2*>(qrow + kdim<D, FMT, KMAP>(c, j)) : make_uint2(0u, 0u);
        raw[j][0] = x.x; raw[j][1] = x.y;
        amax = fmaxf(amax, fmaxf(fmaxf(fabsf(bf16_lo(x.x)), fabsf(bf16_hi(x.x))), fmaxf(fabsf(bf16_lo(x.y)), fabsf(bf16_hi(x.y)))));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
    float qs = 1.0f;
    if constexpr (FMT != FMT_BF16) {
        int e = (int)((__float_as_uint(amax) >> 23) & 0xFF) - 126;
        int s = 15 - e;
        s = s > 126 ? 126 : (s < -126 ? -126 : s);
        if (amax > 0.f && amax == amax) qs = __uint_as_float((u32)(127 + s) << 23);
    }
#pragma unroll
    for (int j = 0; j < NCH; ++j) {
        u32 e01, e23;
        if constexpr (FMT == FMT_BF16) {
            e01 = raw[j][0]; e23 = raw[j][1];
        } else {
            const float f0 = bf16_lo(raw[j][0]) * qs, f1 = bf16_hi(raw[j][0]) * qs;
            const float f2 = bf16_lo(raw[j][1]) * qs, f3 = bf16_hi(raw[j][1]) * qs;
            if constexpr (FMT == FMT_FP8CVT) { e01 = f16x2_rn(f0, f1); e23 = f16x2_rn(f2, f3); }
            else { e01 = f16x2_rn(f0, f2); e23 = f16x2_rn(f1, f3); }  // the bit move's (b0,b2),(b1,b3)
        }
        qa[j][ri] = e01;
        qa[j][2 + ri] = e23;
    }
    return qs;
}

// ---- Q: the A fragments of Q.K^T (rows r, r+8 = query heads h*G + row) and the fp32 score multiplier ------------
// FP8 (f16 MMAs): version 1's per-head power-of-two prescale into f16. bf16 / NVFP4: bf16 as it is.
// k_mult: what turns (raw MMA sum / q prescale) into the logit in log2 units: sm_scale * k_scale * LOG2E * unit.
// (Version 1 calls q_row itself rather than this function: it reads k_scale after the prescale, and with the load
// moved ptxas schedules its kernels differently.)
template <int D, int FMT, bool TWO, int KMAP = 0>
__device__ __forceinline__ void q_fragments(const u16* __restrict__ q, size_t qbase, int G, int r, int c, float k_mult,
                                            u32 (&qa)[D / 16][4], float (&sc)[2]) {
    using G_ = Geo<D, FMT>;
    constexpr int NR = TWO ? 2 : 1;
#pragma unroll
    for (int j = 0; j < G_::NCH; ++j) qa[j][1] = qa[j][3] = 0u;  // rows 8..15 stay zero when G <= 8
    sc[0] = sc[1] = k_mult;
#pragma unroll
    for (int ri = 0; ri < NR; ++ri) {
        const int row = r + 8 * ri;
        const bool ok = row < G;
        const u16* qrow = q + (qbase + (ok ? row : 0)) * D;
        if constexpr (G_::NV) {
            // chunk j = 2w + h: k-slots (2c, 2c+1, 2c+8, 2c+9) are dims base + 2h + (0, 4, 1, 5), base = KD*c + 8w
#pragma unroll
            for (int j = 0; j < G_::NCH; ++j) {
                const int base = (D / 4) * c + 8 * (j / 2) + 2 * (j % 2);
                u32 e0 = ok ? qrow[base] : 0u, e4 = ok ? qrow[base + 4] : 0u;
                u32 e1 = ok ? qrow[base + 1] : 0u, e5 = ok ? qrow[base + 5] : 0u;
                qa[j][ri] = e0 | (e4 << 16);
                qa[j][2 + ri] = e1 | (e5 << 16);
            }
        } else {
            sc[ri] = k_mult / q_row<D, FMT, G_::NCH, KMAP>(qa, ri, qrow, ok, c);
        }
    }
}

// ---- S = Q . K^T of one tile: s[nb][0..3] = rows (r, r, r+8, r+8) x tokens (2c, 2c+1) of n-block nb ----------
// (TileT: Tile<D, FMT>, or version 1's register tile, which has the same k / v and no scales.)
template <int D, int FMT, class TileT>
__device__ __forceinline__ void qk_tile(const TileT& t, const u32 (&qa)[D / 16][4], float (&s)[2][4]) {
    using G_ = Geo<D, FMT>;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
        float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        if constexpr (G_::NV) {
            const u32 s2 = scale2_bf16x2(t.ks[nb]);  // (block of words 0.., block of words 2..) * 2**118
#pragma unroll
            for (int w = 0; w < G_::KW; ++w) {
                const u32 sw = (G_::KW == 4 && w >= 2) ? bcast_hi(s2) : bcast_lo(s2);
                u32 p[4];
                e2m1x8_to_bf16(t.k[nb][w], p);
#pragma unroll
                for (int i = 0; i < 4; ++i) p[i] = bf16x2_mul(p[i], sw);
                mma<false>(acc[0], qa[2 * w], p[0], p[1]);
                mma<false>(acc[1], qa[2 * w + 1], p[2], p[3]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < G_::NCH; ++j) {
                u32 b0, b1;
                if constexpr (FMT == FMT_BF16) { b0 = t.k[nb][2 * j]; b1 = t.k[nb][2 * j + 1]; }
                else if constexpr (FMT == FMT_FP8CVT) { const u32 w = t.k[nb][j]; b0 = e4m3x2_to_f16x2(w); b1 = e4m3x2_to_f16x2(w >> 16); }
                else { const u32 w = t.k[nb][j]; b0 = e4m3x2_even_to_f16x2_2m8(w); b1 = e4m3x2_odd_to_f16x2_2m8(w); }
                mma<G_::F16>(acc[j & 1], qa[j], b0, b1);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) s[nb][i] = acc[0][i] + acc[1][i];
    }
}

// ---- O^T += V^T . P^T of one tile (V is the A operand; P^T's B fragment is S's accumulator rows as they are) ----
// o[nt][mt]: n-tile nt = heads 8 nt .. 8 nt + 7, m-tile mt = 16 output dims (Geo::RL / NRUN say which).
template <int D, int FMT, int NT, class TileT>
__device__ __forceinline__ void pv_tile(const TileT& t, const u32 (&pa)[4], float (&o)[NT][D / 16][4]) {
    using G_ = Geo<D, FMT>;
    constexpr bool F16 = G_::F16;
    if constexpr (G_::NV) {
        const u32 sx = scale2_bf16x2(t.vs01), sy = scale2_bf16x2(t.vs89);  // (token 2c, 2c+1), (2c+8, 2c+9)
#pragma unroll
        for (int w = 0; w < G_::VW; ++w)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const u32 sel = half ? 0x7632u : 0x5410u;  // nibbles 0..3: token A's dims, 4..7: token B's
                u32 X[4], Y[4];
                e2m1x8_to_bf16(prmt(t.v[0][w], t.v[1][w], sel), X);
                e2m1x8_to_bf16(prmt(t.v[2][w], t.v[3][w], sel), Y);
#pragma unroll
                for (int i = 0; i < 4; ++i) { X[i] = bf16x2_mul(X[i], sx); Y[i] = bf16x2_mul(Y[i], sy); }
#pragma unroll
                for (int i = 0; i < 4; i += 2) {  // dim e = 8w + 4 half + i of the lane: m-tile e / 2
                    const int mt = (8 * w + 4 * half + i) / 2;
                    const u32 A[4] = {X[i], X[i + 1], Y[i], Y[i + 1]};
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) mma<false>(o[nt][mt], A, pa[nt], pa[2 + nt]);
                }
            }
    } else {
#pragma unroll
        for (int w = 0; w < G_::VW; ++w) {
            // B0(e) = (V[2c][e], V[2c+1][e]), B1(e) = (V[2c+8][e], V[2c+9][e]); A(mt) = {B0(2mt), B0(2mt+1), B1(2mt), B1(2mt+1)}
            u32 A[G_::BYTES == 1 ? 2 : 1][4];
            if constexpr (FMT == FMT_BF16) {
                A[0][0] = prmt(t.v[0][w], t.v[1][w], 0x5410u); A[0][1] = prmt(t.v[0][w], t.v[1][w], 0x7632u);
                A[0][2] = prmt(t.v[2][w], t.v[3][w], 0x5410u); A[0][3] = prmt(t.v[2][w], t.v[3][w], 0x7632u);
            } else if constexpr (FMT == FMT_FP8CVT) {
                const u32 x01 = prmt(t.v[0][w], t.v[1][w], 0x5140u), x23 = prmt(t.v[0][w], t.v[1][w], 0x7362u);
                const u32 y01 = prmt(t.v[2][w], t.v[3][w], 0x5140u), y23 = prmt(t.v[2][w], t.v[3][w], 0x7362u);
                A[0][0] = e4m3x2_to_f16x2(x01); A[0][1] = e4m3x2_to_f16x2(x01 >> 16); A[0][2] = e4m3x2_to_f16x2(y01); A[0][3] = e4m3x2_to_f16x2(y01 >> 16);
                A[1][0] = e4m3x2_to_f16x2(x23); A[1][1] = e4m3x2_to_f16x2(x23 >> 16); A[1][2] = e4m3x2_to_f16x2(y23); A[1][3] = e4m3x2_to_f16x2(y23 >> 16);
            } else {
                const u32 x = prmt(t.v[0][w], t.v[1][w], 0x4501u), x2 = prmt(t.v[0][w], t.v[1][w], 0x6723u);
                const u32 y = prmt(t.v[2][w], t.v[3][w], 0x4501u), y2 = prmt(t.v[2][w], t.v[3][w], 0x6723u);
                A[0][0] = e4m3x2_odd_to_f16x2_2m8(x); A[0][1] = e4m3x2_even_to_f16x2_2m8(x); A[0][2] = e4m3x2_odd_to_f16x2_2m8(y); A[0][3] = e4m3x2_even_to_f16x2_2m8(y);
                A[1][0] = e4m3x2_odd_to_f16x2_2m8(x2); A[1][1] = e4m3x2_even_to_f16x2_2m8(x2); A[1][2] = e4m3x2_odd_to_f16x2_2m8(y2); A[1][3] = e4m3x2_even_to_f16x2_2m8(y2);
            }
            constexpr int PER = G_::BYTES == 1 ? 2 : 1;  // m-tiles per word: 4 FP8 elements, 2 bf16 elements
#pragma unroll
            for (int i = 0; i < PER; ++i)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mma<F16>(o[nt][PER * w + i], A[i], pa[nt], pa[2 + nt]);
        }
    }
}

// ---- O^T *= alpha per head: column 2c / 2c+1 of the accumulators is head 2c / 2c+1 (+8 nt), whose alpha lives in
// lane 8c / 8c+4 (the row owner's). Versions 1 and 2 ("va": V is the A operand of P.V).
template <int NT, int OT>
__device__ __forceinline__ void zero_o(float (&o)[NT][OT][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < OT; ++i) o[nt][i][0] = o[nt][i][1] = o[nt][i][2] = o[nt][i][3] = 0.f;
}
template <int NT, int OT>
__device__ __forceinline__ void rescale_o(float (&o)[NT][OT][4], const float (&al)[2], int c) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const float a0 = __shfl_sync(0xFFFFFFFFu, al[nt], 8 * c), a1 = __shfl_sync(0xFFFFFFFFu, al[nt], 8 * c + 4);
#pragma unroll
        for (int mt = 0; mt < OT; ++mt) { o[nt][mt][0] *= a0; o[nt][mt][2] *= a0; o[nt][mt][1] *= a1; o[nt][mt][3] *= a1; }
    }
}

// ---- the end of a split ("va" accumulators, versions 1 and 2), after the row sums over the quad: O (times vs, and
// divided by l when there is one split) as bf16 into out, or as fp32 partials with (m, l) for decode_reduce. Uses the
// body's names (o, m, l, vs, NT, NR, G_, b, h, G, Hq, S, split, r, c, out, part_o, part_ml). A macro, not a
// function: as a function it makes ptxas schedule version 2's G = 16 kernels differently (sass.py shows it), and
// the kernels stay instruction for instruction as they were measured.
#define ATTN_VA_FINISH()                                                                                                 \
    /* lane (r, c) holds heads 2c + eh (+ 8 nt); its element e = k*RL + i is o[nt][e / 2][2 (e % 2) + eh], at dim        \
       k*8*RL + r*RL + i (runs of RL contiguous dims) */                                                                 \
    _Pragma("unroll") for (int nt = 0; nt < NT; ++nt)                                                                    \
    _Pragma("unroll") for (int eh = 0; eh < 2; ++eh) {                                                                   \
        const float lh = __shfl_sync(0xFFFFFFFFu, l[nt], 8 * c + 4 * eh);                                                \
        const int row = 2 * c + eh + 8 * nt;                                                                             \
        if (row >= G) continue;                                                                                          \
        const size_t hq = (size_t)b * Hq + (size_t)h * G + row;                                                          \
        const float f = (S == 1) ? vs / lh : vs;                                                                         \
        _Pragma("unroll") for (int k = 0; k < G_::NRUN; ++k) {                                                           \
            const int d0 = k * 8 * G_::RL + r * G_::RL;                                                                  \
            float val[G_::RL];                                                                                           \
            _Pragma("unroll") for (int i = 0; i < G_::RL; ++i) {                                                         \
                const int e = k * G_::RL + i;                                                                            \
                val[i] = o[nt][e >> 1][((e & 1) << 1) + eh] * f;                                                         \
            }                                                                                                            \
            if (S == 1) {                                                                                                \
                uint4* dst = reinterpret_cast<uint4*>(out + hq * D + d0);                                                \
                _Pragma("unroll") for (int i = 0; i < G_::RL / 8; ++i)                                                   \
                    dst[i] = make_uint4(bf16x2_rn(val[8 * i], val[8 * i + 1]), bf16x2_rn(val[8 * i + 2], val[8 * i + 3]), \
                                        bf16x2_rn(val[8 * i + 4], val[8 * i + 5]), bf16x2_rn(val[8 * i + 6], val[8 * i + 7])); \
            } else {                                                                                                     \
                float4* dst = reinterpret_cast<float4*>(part_o + (hq * S + split) * D + d0);                             \
                _Pragma("unroll") for (int i = 0; i < G_::RL / 4; ++i)                                                   \
                    dst[i] = make_float4(val[4 * i], val[4 * i + 1], val[4 * i + 2], val[4 * i + 3]);                    \
            }                                                                                                            \
        }                                                                                                                \
    }                                                                                                                    \
    _Pragma("unroll") for (int ri = 0; ri < NR; ++ri) { /* the row's owner records its (max, sum) for the merge */       \
        const int row = r + 8 * ri;                                                                                      \
        if (S > 1 && c == 0 && row < G) {                                                                                \
            const size_t hq = (size_t)b * Hq + (size_t)h * G + row;                                                      \
            part_ml[(hq * S + split) * 2 + 0] = m[ri];                                                                   \
            part_ml[(hq * S + split) * 2 + 1] = l[ri];                                                                   \
        }                                                                                                                \
    }

// ---- the row sums l of rows r (and r + 8) over the 4 lanes of a quad, at the end of a split (versions 2 and 3) -----
template <int NR>
__device__ __forceinline__ void quad_sum_rows(float (&l)[2]) {
#pragma unroll
    for (int ri = 0; ri < NR; ++ri) {
        l[ri] += __shfl_xor_sync(0xFFFFFFFFu, l[ri], 1);
        l[ri] += __shfl_xor_sync(0xFFFFFFFFu, l[ri], 2);
    }
}

// ---- the merge's weighted sum over n partials (the split reduce kernel and version 3's in-kernel merge) -----------
// Partial s has its (max m_s, sum l_s) at ml[s * mls] (two floats) and its 4 dims at po[s * pst]; M >= every m_s
// (a partial of no token has m = -inf, l = 0, O = 0 and weighs 2**-inf = 0). acc = sum_s 2**(m_s - M) O_s,
// den = sum_s 2**(m_s - M) l_s, summed in s order, 8 partials per round with their loads independent. CG: loads that
// bypass L1 (.cg: partials written by other blocks of the running grid).
template <bool CG>
__device__ __forceinline__ void merge_sum(const float* ml, int mls, const float* po, size_t pst, int n, float M,
                                          float4& acc, float& den) {
    auto ld2 = [](const float* p) { return CG ? __ldcg(reinterpret_cast<const float2*>(p)) : *reinterpret_cast<const float2*>(p); };
    auto ld4 = [](const float* p) { return CG ? __ldcg(reinterpret_cast<const float4*>(p)) : *reinterpret_cast<const float4*>(p); };
    acc = make_float4(0.f, 0.f, 0.f, 0.f);
    den = 0.f;
    int s = 0;
    for (; s + 8 <= n; s += 8) {
        float2 x[8];
        float4 v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            x[i] = ld2(ml + (size_t)(s + i) * mls);
            v[i] = ld4(po + (size_t)(s + i) * pst);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float w = ex2(x[i].x - M);
            den += w * x[i].y;
            acc.x += w * v[i].x; acc.y += w * v[i].y; acc.z += w * v[i].z; acc.w += w * v[i].w;
        }
    }
    for (; s < n; ++s) {
        const float2 x = ld2(ml + (size_t)s * mls);
        const float4 v = ld4(po + (size_t)s * pst);
        const float w = ex2(x.x - M);
        den += w * x.y;
        acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
    }
}

// ---- the tokens [t0, t1) of split `split` (split_len each) of sequence b; false: an empty split, which the reduce
// never reads (versions 1 and 2)
__device__ __forceinline__ bool split_range(const int* __restrict__ seq_lens, int b, int split, int S, int split_len,
                                            int& t0, int& t1) {
    const int len = seq_lens[b];
    t0 = split * split_len;
    if (split >= S || t0 >= len) return false;
    t1 = min(len, t0 + split_len);
    return true;
}

// ---- the online softmax of one step of NSUB 16-token tiles (versions 2 and 3), per row ri < NR ------------------
// s: the step's raw scores (lane: tokens 2c, 2c+1, 8+2c, 9+2c of each tile, rows r and r+8); sc: each row's score
// multiplier (log2 units); nv: tokens left from the step's first one (tokens at or past it are masked, so stale or
// zero-filled rows never count). Updates the running max m and sum l; pa: P as the B fragments of P.V (f16 for the
// FP8 paths, bf16 otherwise); al: each row's rescale factor for O (exactly 1 when its max did not move).
template <int NSUB, int NR, bool F16>
__device__ __forceinline__ void softmax_step(const float (&s)[NSUB][2][4], const float (&sc)[2], int nv, int c,
                                             float (&m)[2], float (&l)[2], u32 (&pa)[NSUB][4], float (&al)[2]) {
    al[0] = al[1] = 1.f;
#pragma unroll
    for (int u = 0; u < NSUB; ++u) pa[u][0] = pa[u][1] = pa[u][2] = pa[u][3] = 0u;
#pragma unroll
    for (int ri = 0; ri < NR; ++ri) {
        float x[NSUB][4];
        float mx = neg_inf();
#pragma unroll
        for (int u = 0; u < NSUB; ++u) {
            const int n = nv - 16 * u;
            x[u][0] = (2 * c < n) ? s[u][0][2 * ri] * sc[ri] : neg_inf();
            x[u][1] = (2 * c + 1 < n) ? s[u][0][2 * ri + 1] * sc[ri] : neg_inf();
            x[u][2] = (2 * c + 8 < n) ? s[u][1][2 * ri] * sc[ri] : neg_inf();
            x[u][3] = (2 * c + 9 < n) ? s[u][1][2 * ri + 1] * sc[ri] : neg_inf();
            mx = fmaxf(mx, fmaxf(fmaxf(x[u][0], x[u][1]), fmaxf(x[u][2], x[u][3])));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
        const float mn = fmaxf(m[ri], mx);  // finite: every step holds a valid token
        al[ri] = ex2(m[ri] - mn);
        m[ri] = mn;
        const float mo = mn - 15.0f;  // P in [0, 2**15]: clear of f16's subnormals
        float sum = 0.f;
#pragma unroll
        for (int u = 0; u < NSUB; ++u) {
            float p[4];
#pragma unroll
            for (int i2 = 0; i2 < 4; ++i2) p[i2] = ex2(x[u][i2] - mo);
            sum += (p[0] + p[1]) + (p[2] + p[3]);
            if constexpr (F16) { pa[u][ri] = f16x2_rn(p[0], p[1]); pa[u][2 + ri] = f16x2_rn(p[2], p[3]); }
            else { pa[u][ri] = bf16x2_rn(p[0], p[1]); pa[u][2 + ri] = bf16x2_rn(p[2], p[3]); }
        }
        l[ri] = l[ri] * al[ri] + sum;
    }
}

// ---- the decode kernel, version 2 ---------------------------------------------------------------------------------
// grid = (ceil(S / warps per block), Hk, B); warp w of block x takes split x * WPB + w. Dynamic shared memory:
// NS * NSUB * Geo::TILE_BYTES per warp. k_scale / v_scale: FP8 dequant multipliers, NVFP4 global scales (the bf16
// cache ignores them). ksc / vsc: NVFP4 block-scale code pools [n_pages, Hk, P, D/16] (unused otherwise).
// ROT: rotate the visiting order of the warp's steps (see the file header).
template <int D, int FMT, bool TWO, int NSUB, int NS, bool ROT>
__device__ __forceinline__ void decode_v2_body(
    const u16* __restrict__ q, const u8* __restrict__ kpool, const u8* __restrict__ vpool, const u8* __restrict__ ksc,
    const u8* __restrict__ vsc, const int* __restrict__ block_table, const int* __restrict__ seq_lens,
    const float* __restrict__ k_scale, const float* __restrict__ v_scale, int scale_stride, float sm_scale, int max_blocks,
    int page, int Hk, int G, int S, int split_len, u16* __restrict__ out, float* __restrict__ part_o,
    float* __restrict__ part_ml) {
    using G_ = Geo<D, FMT>;
    constexpr int NR = TWO ? 2 : 1;   // MMA rows r (and r + 8 when G > 8) that hold real query heads
    constexpr int NT = TWO ? 2 : 1;   // n-tiles of heads in O^T
    constexpr int OT = G_::OT;
    constexpr int TT = 16 * NSUB;     // tokens per step
    constexpr int STAGE = NSUB * G_::TILE_BYTES;
    constexpr float UNIT = (FMT == FMT_FP8BIT || FMT == FMT_NVFP4) ? 256.0f : 1.0f;  // the conversions' 2**-8
    extern __shared__ uint4 dyn_smem[];

    const int lane = threadIdx.x & 31, r = lane >> 2, c = lane & 3;
    const int warp = threadIdx.x >> 5;
    const int split = blockIdx.x * (blockDim.x >> 5) + warp;
    const int h = blockIdx.y, b = blockIdx.z;
    const int Hq = Hk * G;
    int t0, t1;
    if (!split_range(seq_lens, b, split, S, split_len, t0, t1)) return;
    const int nsteps = (t1 - t0 + TT - 1) / TT;

    u8* ring = reinterpret_cast<u8*>(dyn_smem) + (size_t)warp * NS * STAGE;
    const u32 ring_s = smem_addr(ring);

    u32 qa[G_::NCH][4];
    float sc[2];
    q_fragments<D, FMT, TWO>(q, (size_t)b * Hq + (size_t)h * G, G, r, c, sm_scale * k_scale[h * scale_stride] * LOG2E * UNIT,
                             qa, sc);

    float o[NT][OT][4];
    zero_o(o);
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};

    const int* bt = block_table + (size_t)b * max_blocks;
    const int rot = ROT ? (int)(((unsigned)split * 2654435761u + (unsigned)h * 40503u + (unsigned)b * 2246822519u) % (unsigned)nsteps) : 0;
    auto step_of = [&](int i) { int k = i + rot; return k >= nsteps ? k - nsteps : k; };  // i < nsteps
    // A cursor (page-table entry, offset in the page) walks the tiles in visiting order: +16 tokens per tile, back
    // to the split's first tile after the last step (the rotation's wrap). Two divisions per warp, none per tile.
    // The pages of a step's tiles are looked up one step ahead (pg), so the block table's latency hides too.
    // A contiguous cache is one page of L tokens per sequence (max_blocks == 1, page = L, not a multiple of 16).
    const int blk0 = t0 / page, off0 = t0 - blk0 * page;
    int cblk, coff;
    {
        const int ts = t0 + rot * TT;
        cblk = ts / page;
        coff = ts - cblk * page;
    }
    int pg[NSUB], po[NSUB];
    auto lookup = [&](int i) {  // step i of the visiting order (i may be >= nsteps: nothing to look up)
        const int k = step_of(i);
#pragma unroll
        for (int u = 0; u < NSUB; ++u) {
            const bool ok = i < nsteps && t0 + k * TT + 16 * u < t1;
            pg[u] = ok ? bt[cblk] : 0;
            po[u] = ok ? coff : 0;
            coff += 16;
            if (coff >= page) { coff -= page; ++cblk; }
        }
        if (k == nsteps - 1) { cblk = blk0; coff = off0; }
    };
    auto issue = [&](int i, int slot) {  // step i (in visiting order) into ring slot `slot`, then look up step i + 1
        if (i < nsteps) {
            const int k = step_of(i);
#pragma unroll
            for (int u = 0; u < NSUB; ++u) {
                const int nvalid = t1 - (t0 + k * TT + 16 * u);
                const size_t row0 = ((size_t)pg[u] * Hk + h) * page + po[u];
                const u8* kb = kpool + row0 * G_::ROWB;
                const u8* vb = vpool + row0 * G_::ROWB;
                const u8* ks_ = G_::NV ? ksc + row0 * G_::SROW : nullptr;
                const u8* vs_ = G_::NV ? vsc + row0 * G_::SROW : nullptr;
                const u32 dst = ring_s + slot * STAGE + u * G_::TILE_BYTES;
                if (nvalid >= 16) issue_tile<D, FMT, true>(dst, kb, vb, ks_, vs_, nvalid, r, c, lane);
                else issue_tile<D, FMT, false>(dst, kb, vb, ks_, vs_, nvalid, r, c, lane);
            }
            lookup(i + 1);
        }
        cp_async_commit();  // empty groups too: wait_group<NS - 1> then always means "step i's data"
    };

    lookup(0);
#pragma unroll
    for (int s = 0; s < NS - 1; ++s) issue(s, s);
    int slot = 0;
    for (int i = 0; i < nsteps; ++i) {
        if constexpr (G_::NV) __syncwarp();  // scales are read across lanes: everyone is done with the slot refilled next
        issue(i + NS - 1, slot == 0 ? NS - 1 : slot - 1);
        cp_async_wait<NS - 1>();
        if constexpr (G_::NV) __syncwarp();  // ... and everyone's scale pieces of this step have landed
        const u8* cur = ring + slot * STAGE;
        slot = slot + 1 == NS ? 0 : slot + 1;
        const int ts0 = t0 + step_of(i) * TT;

        Tile<D, FMT> t[NSUB];
#pragma unroll
        for (int u = 0; u < NSUB; ++u) read_k<D, FMT>(t[u], cur + u * G_::TILE_BYTES, r, c, lane);
        float s[NSUB][2][4];
#pragma unroll
        for (int u = 0; u < NSUB; ++u) qk_tile<D, FMT>(t[u], qa, s[u]);

        // ---- online softmax over the step's 16 NSUB tokens (softmax_step)
        u32 pa[NSUB][4];
        float al[2];
        softmax_step<NSUB, NR, G_::F16>(s, sc, t1 - ts0, c, m, l, pa, al);
        // ---- rescale O when some row's max moved (alpha == 1 exactly otherwise: skipping is bit-identical) ----
        // Column 2c / 2c+1 of the accumulators is head 2c / 2c+1 (+8 nt), whose alpha lives in lane 8c / 8c+4.
        const bool moved = (al[0] != 1.f) || (NR > 1 && al[1] != 1.f);
        if (__any_sync(0xFFFFFFFFu, moved)) rescale_o(o, al, c);
#pragma unroll
        for (int u = 0; u < NSUB; ++u) {
            read_v<D, FMT>(t[u], cur + u * G_::TILE_BYTES, r, c, lane);
            pv_tile<D, FMT, NT>(t[u], pa[u], o);
        }
    }
    cp_async_wait<0>();  // nothing of this warp's copies may still be landing when it exits

    // ---- finish: row sums over the quad, then write --------------------------------------------------------
    const float vs = v_scale[h * scale_stride] * UNIT;
    quad_sum_rows<NR>(l);
    ATTN_VA_FINISH();
}

}  // namespace attn

// Kernel name: decode_v2_<bf16|fp8cvt|fp8bit|nvfp4>_d<D>_<g8|g16>_n<NSUB>_s<NS>_r<ROT>_b<MINB>; 4 warps per block,
// MINB blocks per SM asked of the register allocator (__launch_bounds__).
#define ATTN_FMT_bf16 attn::FMT_BF16
#define ATTN_FMT_fp8cvt attn::FMT_FP8CVT
#define ATTN_FMT_fp8bit attn::FMT_FP8BIT
#define ATTN_FMT_nvfp4 attn::FMT_NVFP4
#define ATTN_G_g8 false
#define ATTN_G_g16 true
#define DECODE_V2(FMT, D, GG, NSUB, NS, ROT, MINB)                                                                   \
    extern "C" __global__ void __launch_bounds__(128, MINB) decode_v2_##FMT##_d##D##_##GG##_n##NSUB##_s##NS##_r##ROT##_b##MINB( \
        const u16* q, const u8* kpool, const u8* vpool, const u8* ksc, const u8* vsc, const int* block_table,           \
        const int* seq_lens, const float* k_scale, const float* v_scale, int scale_stride, float sm_scale, int max_blocks, \
        int page, int Hk, int G, int S, int split_len, u16* out, float* part_o, float* part_ml) {                       \
        attn::decode_v2_body<D, ATTN_FMT_##FMT, ATTN_G_##GG, NSUB, NS, (ROT != 0)>(                                     \
            q, kpool, vpool, ksc, vsc, block_table, seq_lens, k_scale, v_scale, scale_stride, sm_scale, max_blocks, page,  \
            Hk, G, S, split_len, out, part_o, part_ml);                                                                  \
    }

// ---- merge the splits: out = sum_s 2**(m_s - M) O_s / sum_s 2**(m_s - M) l_s ----------------------------------
// grid = (Hq, B), block = D / 4 threads (one warp or half of one), each owning 4 consecutive dims. O_s already carries
// the V scale. (Versions 1-3, every format and the chunked prefill write the same partials.)
// The first version walked the splits one after another (the max, then the sum), ~2 S dependent loads per thread:
// 6-8 us at S = 32 on the H200 (Nsight Compute), more than the bytes justify (S x D x 4 bytes per row). Now the max is
// a strided pass plus shuffles, and the sum runs 8 splits per round with their loads independent. Version 3 launches
// it with programmatic dependent launch, so its blocks are resident before the main kernel ends (pdl_wait: no-op
// when launched normally, nothing on sm_89).
#define DECODE_REDUCE_KERNEL                                                                                             \
    extern "C" __global__ void __launch_bounds__(32) decode_reduce(const float* __restrict__ part_o,                     \
                                                                    const float* __restrict__ part_ml,                    \
                                                                    const int* __restrict__ seq_lens, int Hq, int S,      \
                                                                    int split_len, int D, u16* __restrict__ out) {        \
        const int hq = blockIdx.x, b = blockIdx.y, t = threadIdx.x, nt = blockDim.x, d = t * 4;                          \
        pdl_wait(); /* launched with PDL (version 3): the splits' partials are complete and visible past this point */  \
        const int len = seq_lens[b];                                                                                     \
        const int ns = min(S, (len + split_len - 1) / split_len);                                                        \
        const size_t row = (size_t)b * Hq + hq;                                                                          \
        const float* ml = part_ml + row * S * 2;                                                                         \
        float M = attn::neg_inf();                                                                                       \
        for (int s = t; s < ns; s += nt) M = fmaxf(M, ml[2 * s]);                                                        \
        for (int o = nt >> 1; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xFFFFFFFFu >> (32 - nt), M, o, nt));         \
        float4 acc;                                                                                                      \
        float den;                                                                                                       \
        attn::merge_sum<false>(ml, 2, part_o + row * S * D + d, D, ns, M, acc, den);                                     \
        const float inv = 1.0f / den;                                                                                    \
        uint2 res = make_uint2(bf16x2_rn(acc.x * inv, acc.y * inv), bf16x2_rn(acc.z * inv, acc.w * inv));                \
        *reinterpret_cast<uint2*>(out + row * D + d) = res;                                                              \
    }
