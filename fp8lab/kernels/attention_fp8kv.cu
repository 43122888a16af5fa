// attention_fp8kv.cu -- decode attention (one query token per sequence) over an FP8 E4M3 or bf16 KV cache.
//
//   out[b, h*G+g, :] = softmax(q[b, h*G+g] . K[b, h]^T * sm_scale) . V[b, h]     (bf16 out, fp32 softmax)
//   K = decode(k_code) * k_scale[h],  V = decode(v_code) * v_scale[h]          (vLLM's convention)
//
// Layout. One code path for both caches: a contiguous cache [B, Hk, L, D] IS a paged pool with one page of
// L tokens per sequence (block_table[b] = [b]); a paged pool is [n_pages, Hk, P, D] with P % 16 == 0, so a
// 16-token tile never straddles a page.
//
// Work split (flash-decoding). A warp owns one (sequence b, kv head h, split s): a contiguous range of
// split_len tokens (a multiple of 16). It walks that range in 16-token tiles and keeps an online softmax.
// All G query heads of the group ride in the same warp, so each K/V byte is read from memory exactly once.
// With more than one split, each warp writes (m, l, unnormalized O) and `decode_reduce` merges the splits.
//
// Tensor cores, registers only (no shared memory). Per 16-token tile, two mma.sync.m16n8k16 (fp32 accumulate) steps:
//   S[16 rows = query heads (G <= 16, padded), 16 tokens] = Q[16, D] . K^T        A = Q (registers, loaded once)
//   "va" (default): O^T[D, heads] += V^T[D, 16 tokens] . P^T[16 tokens, 8 heads]   B = P^T: S's accumulators of
//        rows r are exactly P^T's B fragment, so P never moves; D/16 accumulator tiles (half of "vb" when G <= 8).
//   "vb": O[16 heads, D] += P[16 heads, 16 tokens] . V                             A = P (FlashAttention-2's trick);
//        D/8 accumulator tiles whose rows 8..15 are dead weight when G <= 8.
// The K/V operands come straight from global memory without a transpose, because a dot product does not
// care about the order of its terms: each lane loads 16-byte pieces of K rows and we declare that the
// dims it holds are the k-slots the MMA wants from it; Q is loaded with the SAME dim permutation. For
// P.V the token order inside a tile and the order of the output dims are free in the same way.
// Loads run NBUF - 1 tiles ahead in a rotation of register tiles (NBUF per kernel: the deepest that fits the
// register file without spills); FP8 tiles are half the bytes, so FP8 kernels keep more of them in flight.
//
// FP8 -> f16 in registers (exact: every E4M3 value is an f16), two ways (template CONV):
//   CONV_CVT: the sm_89+/sm_90 instruction cvt.rn.f16x2.e4m3x2 (2 values per instruction);
//   CONV_BIT: Marlin / FlashInfer's bit move: the 7 exponent+mantissa bits shifted into f16 give
//             value * 2**-8 for every code (subnormals included); the 2**8 is folded into the scales.
//             It hands out byte pairs (b0,b2),(b1,b3); Q is permuted to match.
//   NaN codes (0x7F/0xFF) are NaN under CONV_CVT and +-480 under CONV_BIT: saturating encoders never
//   write them, and the wrapper documents that the cache must be finite.
// The MMAs run in f16 for FP8 (K and V exact in f16), in bf16 for the bf16 cache (same code, other type).
// Q (bf16) becomes f16 after a per-head power-of-two prescale that puts max|q| in [2**14, 2**15): exact
// for every element within 2**-29 of the row max, and no overflow. P = exp2(x - m + 15) in [0, 2**15] so
// that f16's subnormal floor (2**-24) sits 2**-39 below the row max instead of 2**-24; the 2**15 cancels
// in O / l. The row sum l is kept in fp32 from the unrounded P (as FlashAttention does).
//
// No host code; NVRTC-compatible (no CUDA headers: bf16/f16 are raw bits). Built without fast math.
// Shared helpers: ptx.cuh (packing, mma.sync), fp8_decode.cuh (the two E4M3 -> f16 conversions), attention_decode.cuh
// (version 2's tile geometry, Q.K^T, P.V and output, which are version 1's, written once).
// This file is VERSION 1, kept as it was measured (the llm.c habit: earlier versions stay beside the new one,
// each timed). Version 2 -- shared-memory ring, more warps per SM, one softmax update per NSUB tiles -- lives in
// attention_decode.cuh (whose header says what version 1 taught) and is instantiated in attention_decode_v2.cu.

#include "attention_decode.cuh"

#define CONV_NONE 0  // bf16 cache
#define CONV_CVT 1
#define CONV_BIT 2

namespace {

// ---- loads --------------------------------------------------------------------------------------------
// The cache is streamed once: bypass L1. Predicated: a token past the sequence end reads as zeros (a V of
// zero times a P of zero is 0, whereas garbage could be NaN and NaN * 0 = NaN).
__device__ __forceinline__ uint4 ld16(const u8* p, bool ok) {
    uint4 r = make_uint4(0u, 0u, 0u, 0u);
    if (ok)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ uint2 ld8(const u8* p, bool ok) {
    uint2 r = make_uint2(0u, 0u);
    if (ok) asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

// ---- what version 1 shares with version 2 (attention_decode.cuh) ---------------------------------------------
// CONV is version 2's FMT (bf16, FP8 by the cvt, FP8 by the bit move): the same tile geometry, ex2 / mma, split
// range, Q.K^T and (for "va") rescale, P.V and output code. Version 1's own: the register tile rotation (load_tile:
// ld.global into registers), its Q prescale (as attn::q_fragments the k_scale load moves and ptxas schedules the FP8
// kernels differently), the per-tile softmax update and the "vb" variant. The SASS of every kernel is the same as
// before the sharing (compared instruction by instruction with sass.py on sm_90 and sm_121).
static_assert(CONV_NONE == attn::FMT_BF16 && CONV_CVT == attn::FMT_FP8CVT && CONV_BIT == attn::FMT_FP8BIT, "CONV is FMT");
using attn::LOG2E;
using attn::neg_inf;
using attn::ex2;
using attn::mma;

// Lane = 4 r + c (r = lane / 4 in 0..7, c = lane % 4), as in the MMA fragment layouts. K: the 4 lanes of a row read
// 16-byte pieces; piece p of lane c sits at byte (4p + c) * 16, so one load instruction covers 64 contiguous bytes
// of 8 rows (full 32-byte sectors). V: the 8 lanes r = 0..7 share a token; lane r holds dims {k * 8 VEPP + r * VEPP + i}.
template <int D, int CONV>
struct Geo : attn::Geo<D, CONV> {
    static constexpr int ND = D / 8;  // n-blocks of P.V (8 output dims each), "vb"
};
template <int D, int CONV>
struct Tile {  // attn::Tile without the NVFP4 scales (as that type, ptxas allocates the "vb" d128 kernels differently)
    u32 k[2][Geo<D, CONV>::KW];  // K rows ts + nb*8 + r, nb = 0, 1
    u32 v[4][Geo<D, CONV>::VW];  // V rows ts + 2c, 2c+1, 2c+8, 2c+9
};

template <int D, int CONV>
__device__ __forceinline__ void load_tile(Tile<D, CONV>& t, const u8* kb, const u8* vb, int nvalid, int r, int c) {
    using G_ = Geo<D, CONV>;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
        const int row = nb * 8 + r;
        const u8* p = kb + (size_t)row * G_::ROWB;
#pragma unroll
        for (int pp = 0; pp < G_::KP; ++pp) {
            uint4 x = ld16(p + (pp * 4 + c) * 16, row < nvalid);
            t.k[nb][pp * 4 + 0] = x.x; t.k[nb][pp * 4 + 1] = x.y;
            t.k[nb][pp * 4 + 2] = x.z; t.k[nb][pp * 4 + 3] = x.w;
        }
    }
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) {
        const int row = 2 * c + (sl & 1) + (sl >> 1) * 8;
        const u8* p = vb + (size_t)row * G_::ROWB;
#pragma unroll
        for (int k = 0; k < G_::NVP; ++k) {
            if constexpr (G_::VPB == 16) {
                uint4 x = ld16(p + (k * 8 + r) * 16, row < nvalid);
                t.v[sl][k * 4 + 0] = x.x; t.v[sl][k * 4 + 1] = x.y;
                t.v[sl][k * 4 + 2] = x.z; t.v[sl][k * 4 + 3] = x.w;
            } else {
                uint2 x = ld8(p + r * 8, row < nvalid);
                t.v[sl][0] = x.x; t.v[sl][1] = x.y;
            }
        }
    }
}

// ---- the decode kernel ------------------------------------------------------------------------------------
// grid = (ceil(S / WPC), Hk, B), block = 32 * WPC; warp w of block x takes split x * WPC + w.
template <int D, int CONV, bool TWO, bool VA, int NBUF>
__device__ __forceinline__ void decode_body(
    const u16* __restrict__ q,            // [B, Hq, D] bf16
    const u8* __restrict__ kpool,         // [n_pages, Hk, P, D] codes or bf16 (as bytes)
    const u8* __restrict__ vpool,
    const int* __restrict__ block_table,  // [B, max_blocks]
    const int* __restrict__ seq_lens,     // [B]
    const float* __restrict__ k_scale,    // [Hk] or [1] (scale_stride 0)
    const float* __restrict__ v_scale,
    int scale_stride, float sm_scale, int max_blocks, int page, int Hk, int G, int S, int split_len,
    u16* __restrict__ out,                // [B, Hq, D] bf16 (S == 1)
    float* __restrict__ part_o,           // [B, Hq, S, D] fp32 (S > 1)
    float* __restrict__ part_ml)          // [B, Hq, S, 2] fp32 (S > 1)
{
    using G_ = Geo<D, CONV>;
    constexpr bool F16 = CONV != CONV_NONE;
    constexpr float UNIT = CONV == CONV_BIT ? 256.0f : 1.0f;  // the bit move yields value * 2**-8
    constexpr int NR = TWO ? 2 : 1;  // MMA rows r (and r + 8 when G > 8) that hold real query heads
    // Output accumulators. VA: O^T = V^T . P^T, one n-tile of 8 heads per row set, D/16 m-tiles of dims.
    // Otherwise O = P . V: D/8 n-blocks of 8 dims, whose rows 8..15 are dead weight when G <= 8.
    constexpr int NT = VA ? NR : 1;
    constexpr int OT = VA ? G_::ND / 2 : G_::ND;

    const int lane = threadIdx.x & 31, r = lane >> 2, c = lane & 3;
    const int split = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int h = blockIdx.y, b = blockIdx.z;
    const int Hq = Hk * G;
    int t0, t1;
    if (!attn::split_range(seq_lens, b, split, S, split_len, t0, t1)) return;

    // ---- Q fragments (A operand of Q.K^T), rows r and r + 8 = query heads h*G + row -----------------------
    u32 qa[G_::NCH][4];
    float sc[2];  // log2-domain multiplier of the raw MMA score, per row
#pragma unroll
    for (int j = 0; j < G_::NCH; ++j) qa[j][1] = qa[j][3] = 0u;  // rows 8..15 stay zero when G <= 8
#pragma unroll
    for (int ri = 0; ri < NR; ++ri) {
        const int row = r + 8 * ri;
        const bool ok = row < G;
        const u16* qrow = q + ((size_t)b * Hq + (size_t)h * G + (ok ? row : 0)) * D;
        const float qs = attn::q_row<D, CONV>(qa, ri, qrow, ok, c);  // a0 (row r) / a1 (row r+8), a2 / a3
        const float ks = k_scale[h * scale_stride];
        sc[ri] = sm_scale * ks * LOG2E * UNIT / qs;
    }

    float o[NT][OT][4];
    attn::zero_o(o);
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};

    const int* bt = block_table + (size_t)b * max_blocks;
    auto page_of = [&](int ts) -> int { return ts < t1 ? bt[ts / page] : 0; };
    auto base = [&](const u8* pool, int pidx, int ts) -> const u8* {
        return pool + (((size_t)pidx * Hk + h) * page + (ts % page)) * G_::ROWB;
    };

    auto compute = [&](const Tile<D, CONV>& t, int ts) {
        // ---- S = Q . K^T: two n-blocks of 8 tokens, two accumulator chains each --------------------------
        float s[2][4];
        attn::qk_tile<D, CONV>(t, qa, s);
        // ---- online softmax, per row (this lane: tokens ts+2c, ts+2c+1, ts+8+2c, ts+9+2c) ------------------
        u32 pa[4] = {0u, 0u, 0u, 0u};
        float al[2] = {1.f, 1.f};
        const int nv = t1 - ts;
#pragma unroll
        for (int ri = 0; ri < NR; ++ri) {
            float x[4];
            x[0] = (2 * c < nv) ? s[0][2 * ri] * sc[ri] : neg_inf();
            x[1] = (2 * c + 1 < nv) ? s[0][2 * ri + 1] * sc[ri] : neg_inf();
            x[2] = (2 * c + 8 < nv) ? s[1][2 * ri] * sc[ri] : neg_inf();
            x[3] = (2 * c + 9 < nv) ? s[1][2 * ri + 1] * sc[ri] : neg_inf();
            float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
            const float mn = fmaxf(m[ri], mx);  // finite: token ts is always valid
            const float alpha = ex2(m[ri] - mn);
            m[ri] = mn;
            const float mo = mn - 15.0f;        // P in [0, 2**15]: clear of f16's subnormals
            float p[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) p[i] = ex2(x[i] - mo);
            l[ri] = l[ri] * alpha + ((p[0] + p[1]) + (p[2] + p[3]));
            if constexpr (VA) {
                al[ri] = alpha;
            } else {
#pragma unroll
                for (int nd = 0; nd < G_::ND; ++nd) { o[0][nd][2 * ri] *= alpha; o[0][nd][2 * ri + 1] *= alpha; }
            }
            if constexpr (F16) { pa[ri] = f16x2_rn(p[0], p[1]); pa[2 + ri] = f16x2_rn(p[2], p[3]); }
            else { pa[ri] = bf16x2_rn(p[0], p[1]); pa[2 + ri] = bf16x2_rn(p[2], p[3]); }
        }
        if constexpr (VA) {
            // ---- O^T += V^T . P^T. P^T's B fragment is S's accumulator rows as they are: lane (r, c) holds
            // P[head r][tokens 2c, 2c+1] (b0) and [tokens 2c+8, 2c+9] (b1). V^T is the A operand: m-tile mt's
            // rows r / r+8 are this lane's V elements 2mt / 2mt+1, k = the 16 tokens. Rescale O^T first.
            attn::rescale_o(o, al, c);
            attn::pv_tile<D, CONV, NT>(t, pa, o);
        } else {
            // ---- O += P . V: n-block nd holds dims {n * VEPP + (nd / VEPP) * 8 VEPP + nd % VEPP}, n = 0..7 ------
    #pragma unroll
            for (int w = 0; w < G_::VW; ++w) {
                if constexpr (CONV == CONV_NONE) {
                    // bf16: word w holds elements 2w (low) and 2w+1 (high); pair token A (low) with token B (high).
                    mma<false>(o[0][2 * w], pa, prmt(t.v[0][w], t.v[1][w], 0x5410u), prmt(t.v[2][w], t.v[3][w], 0x5410u));
                    mma<false>(o[0][2 * w + 1], pa, prmt(t.v[0][w], t.v[1][w], 0x7632u), prmt(t.v[2][w], t.v[3][w], 0x7632u));
                } else if constexpr (CONV == CONV_CVT) {
                    const u32 x01 = prmt(t.v[0][w], t.v[1][w], 0x5140u), x23 = prmt(t.v[0][w], t.v[1][w], 0x7362u);
                    const u32 y01 = prmt(t.v[2][w], t.v[3][w], 0x5140u), y23 = prmt(t.v[2][w], t.v[3][w], 0x7362u);
                    mma<true>(o[0][4 * w + 0], pa, e4m3x2_to_f16x2(x01), e4m3x2_to_f16x2(y01));
                    mma<true>(o[0][4 * w + 1], pa, e4m3x2_to_f16x2(x01 >> 16), e4m3x2_to_f16x2(y01 >> 16));
                    mma<true>(o[0][4 * w + 2], pa, e4m3x2_to_f16x2(x23), e4m3x2_to_f16x2(y23));
                    mma<true>(o[0][4 * w + 3], pa, e4m3x2_to_f16x2(x23 >> 16), e4m3x2_to_f16x2(y23 >> 16));
                } else {
                    // [a1 a0 b1 b0] -> odd bytes (a0, b0), even bytes (a1, b1); [a3 a2 b3 b2] likewise.
                    const u32 x = prmt(t.v[0][w], t.v[1][w], 0x4501u), x2 = prmt(t.v[0][w], t.v[1][w], 0x6723u);
                    const u32 y = prmt(t.v[2][w], t.v[3][w], 0x4501u), y2 = prmt(t.v[2][w], t.v[3][w], 0x6723u);
                    mma<true>(o[0][4 * w + 0], pa, e4m3x2_odd_to_f16x2_2m8(x), e4m3x2_odd_to_f16x2_2m8(y));
                    mma<true>(o[0][4 * w + 1], pa, e4m3x2_even_to_f16x2_2m8(x), e4m3x2_even_to_f16x2_2m8(y));
                    mma<true>(o[0][4 * w + 2], pa, e4m3x2_odd_to_f16x2_2m8(x2), e4m3x2_odd_to_f16x2_2m8(y2));
                    mma<true>(o[0][4 * w + 3], pa, e4m3x2_even_to_f16x2_2m8(x2), e4m3x2_even_to_f16x2_2m8(y2));
                }
            }
        }
    };

    // ---- the token loop: NBUF tiles of registers rotate; while tile i computes, tiles i+1 .. i+NBUF-1 are in
    // flight (FP8 tiles are half the bytes, so FP8 keeps more of them to have as many bytes in flight).
    // The page of the tile to load next is looked up one step earlier, so its latency hides too.
    Tile<D, CONV> buf[NBUF];
#pragma unroll
    for (int i = 0; i < NBUF - 1; ++i) {
        const int tt = t0 + 16 * i;
        if (tt < t1) { const int pg = page_of(tt); load_tile<D, CONV>(buf[i], base(kpool, pg, tt), base(vpool, pg, tt), t1 - tt, r, c); }
    }
    int pg_next = page_of(t0 + 16 * (NBUF - 1));
    for (int ts = t0; ts < t1; ts += 16 * NBUF) {
#pragma unroll
        for (int u = 0; u < NBUF; ++u) {
            const int tc = ts + 16 * u;           // the tile to compute now, in buf[u]
            const int tl = tc + 16 * (NBUF - 1);  // the tile to load now, into the buffer computed last step
            if (tc < t1) {
                if (tl < t1) load_tile<D, CONV>(buf[(u + NBUF - 1) % NBUF], base(kpool, pg_next, tl), base(vpool, pg_next, tl), t1 - tl, r, c);
                pg_next = page_of(tl + 16);
                compute(buf[u], tc);
            }
        }
    }

    // ---- finish: row sums over the quad, then write ---------------------------------------------------------
    const float vs = v_scale[h * scale_stride] * UNIT;
#pragma unroll
    for (int ri = 0; ri < NR; ++ri) {
        l[ri] += __shfl_xor_sync(0xFFFFFFFFu, l[ri], 1);
        l[ri] += __shfl_xor_sync(0xFFFFFFFFu, l[ri], 2);
    }
    if constexpr (VA) {
        ATTN_VA_FINISH();
    } else {
        // Lane (r, c) holds dims n * VEPP + (nd / VEPP) * 8 VEPP + nd % VEPP, n = 2c + e, of rows r (and r + 8).
#pragma unroll
        for (int ri = 0; ri < NR; ++ri) {
            const int row = r + 8 * ri;
            if (row >= G) continue;
            const size_t hq = (size_t)b * Hq + (size_t)h * G + row;
            const float f = (S == 1) ? vs / l[ri] : vs;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int n = 2 * c + e;
#pragma unroll
                for (int k = 0; k < G_::NVP; ++k) {
                    const int d0 = k * 8 * G_::VEPP + n * G_::VEPP;
                    if (S == 1) {
                        u32 wv[G_::VEPP / 2];
#pragma unroll
                        for (int i = 0; i < G_::VEPP / 2; ++i)
                            wv[i] = bf16x2_rn(o[0][k * G_::VEPP + 2 * i][2 * ri + e] * f, o[0][k * G_::VEPP + 2 * i + 1][2 * ri + e] * f);
                        uint4* dst = reinterpret_cast<uint4*>(out + hq * D + d0);
#pragma unroll
                        for (int i = 0; i < G_::VEPP / 8; ++i) dst[i] = make_uint4(wv[4 * i], wv[4 * i + 1], wv[4 * i + 2], wv[4 * i + 3]);
                    } else {
                        float4* dst = reinterpret_cast<float4*>(part_o + (hq * S + split) * D + d0);
#pragma unroll
                        for (int i = 0; i < G_::VEPP / 4; ++i)
                            dst[i] = make_float4(o[0][k * G_::VEPP + 4 * i][2 * ri + e] * f, o[0][k * G_::VEPP + 4 * i + 1][2 * ri + e] * f,
                                                 o[0][k * G_::VEPP + 4 * i + 2][2 * ri + e] * f, o[0][k * G_::VEPP + 4 * i + 3][2 * ri + e] * f);
                    }
                }
            }
            if (S > 1 && c == 0) {  // the row's owner records its (max, sum) for the merge
                part_ml[(hq * S + split) * 2 + 0] = m[ri];
                part_ml[(hq * S + split) * 2 + 1] = l[ri];
            }
        }
    }
}

}  // namespace

#define DECODE_KERNEL(NAME, D, CONV, TWO, VA, NBUF)                                                              \
    extern "C" __global__ void __launch_bounds__(128) NAME(                                                        \
        const u16* q, const u8* kpool, const u8* vpool, const int* block_table, const int* seq_lens,             \
        const float* k_scale, const float* v_scale, int scale_stride, float sm_scale, int max_blocks, int page, \
        int Hk, int G, int S, int split_len, u16* out, float* part_o, float* part_ml) {                          \
        decode_body<D, CONV, TWO, VA, NBUF>(q, kpool, vpool, block_table, seq_lens, k_scale, v_scale, scale_stride, \
                                            sm_scale, max_blocks, page, Hk, G, S, split_len, out, part_o, part_ml);  \
    }

// Kernels: decode_attn_<bf16|fp8cvt|fp8bit>_d<64|128>_<g8|g16>_<va|vb>. "va": V is the A operand of P.V (the
// default: half the accumulators when G <= 8, so a deeper tile rotation fits); "vb": V is the B operand.
// NBUF (tiles of registers in rotation) is the deepest that fits the register file without spills (ptxas -v).

DECODE_KERNEL(decode_attn_bf16_d64_g8_va, 64, CONV_NONE, false, true, 4)
DECODE_KERNEL(decode_attn_bf16_d64_g8_vb, 64, CONV_NONE, false, false, 3)
DECODE_KERNEL(decode_attn_bf16_d64_g16_va, 64, CONV_NONE, true, true, 4)
DECODE_KERNEL(decode_attn_bf16_d64_g16_vb, 64, CONV_NONE, true, false, 3)
DECODE_KERNEL(decode_attn_bf16_d128_g8_va, 128, CONV_NONE, false, true, 2)
DECODE_KERNEL(decode_attn_bf16_d128_g8_vb, 128, CONV_NONE, false, false, 2)
DECODE_KERNEL(decode_attn_bf16_d128_g16_va, 128, CONV_NONE, true, true, 2)
DECODE_KERNEL(decode_attn_bf16_d128_g16_vb, 128, CONV_NONE, true, false, 2)
DECODE_KERNEL(decode_attn_fp8cvt_d64_g8_va, 64, CONV_CVT, false, true, 6)
DECODE_KERNEL(decode_attn_fp8cvt_d64_g8_vb, 64, CONV_CVT, false, false, 4)
DECODE_KERNEL(decode_attn_fp8cvt_d64_g16_va, 64, CONV_CVT, true, true, 6)
DECODE_KERNEL(decode_attn_fp8cvt_d64_g16_vb, 64, CONV_CVT, true, false, 4)
DECODE_KERNEL(decode_attn_fp8cvt_d128_g8_va, 128, CONV_CVT, false, true, 4)
DECODE_KERNEL(decode_attn_fp8cvt_d128_g8_vb, 128, CONV_CVT, false, false, 3)
DECODE_KERNEL(decode_attn_fp8cvt_d128_g16_va, 128, CONV_CVT, true, true, 4)
DECODE_KERNEL(decode_attn_fp8cvt_d128_g16_vb, 128, CONV_CVT, true, false, 3)
DECODE_KERNEL(decode_attn_fp8bit_d64_g8_va, 64, CONV_BIT, false, true, 6)
DECODE_KERNEL(decode_attn_fp8bit_d64_g8_vb, 64, CONV_BIT, false, false, 4)
DECODE_KERNEL(decode_attn_fp8bit_d64_g16_va, 64, CONV_BIT, true, true, 6)
DECODE_KERNEL(decode_attn_fp8bit_d64_g16_vb, 64, CONV_BIT, true, false, 4)
DECODE_KERNEL(decode_attn_fp8bit_d128_g8_va, 128, CONV_BIT, false, true, 4)
DECODE_KERNEL(decode_attn_fp8bit_d128_g8_vb, 128, CONV_BIT, false, false, 3)
DECODE_KERNEL(decode_attn_fp8bit_d128_g16_va, 128, CONV_BIT, true, true, 4)
DECODE_KERNEL(decode_attn_fp8bit_d128_g16_vb, 128, CONV_BIT, true, false, 3)

// ---- merge the splits (decode_reduce, shared by both versions and every format: attention_decode.cuh) -----------
DECODE_REDUCE_KERNEL
