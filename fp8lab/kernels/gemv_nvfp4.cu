// gemv_nvfp4.cu -- W4A16 NVFP4 decode GEMV / skinny GEMM on the tensor cores.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W)^T,  M = 1..16, fp32 accumulation
//   W: packed E2M1 [N, K/2] (element 2i in the LOW nibble of byte i), E4M3 block scales [N, K/16],
//      one fp32 global scale:  w = e2m1(code) * e4m3(scale code) * global
//
// Dequantized in registers, never materialized:
//   * nibble -> bf16 by bit moves: sign to bit 15, the 3 value bits to bits 8:6 (the low end of bf16's
//     exponent and the top of its mantissa) = the E2M1 value times 2**-126, subnormal 0.5 included;
//     the pair (nibble i, nibble i+4) of a 32-bit word lands in one bf16x2 with two shifts and masks.
//   * one bf16x2 multiply by s' = e4m3(scale) * 2**118 (built in fp32, exact, <= 448 * 2**118 < 2**127)
//     gives w * 2**-8 EXACTLY in bf16: e2m1 (2 significant bits) times e4m3 (4) has <= 5 significant
//     bits, and 2**-18 <= |w * s * 2**-8| <= 10.5 stays normal. The 2**-8 and the global scale are
//     applied once to the fp32 result.
//   * mma.sync.m16n8k16 bf16 as in gemv_fp8.cu; the activations are permuted (prmt) into the same
//     (i, i+4) pair order as the weights. Work split, k loops and split-K epilogue: gemv_common.cuh;
//     the nibble and scale widening: fp8_decode.cuh.
// A NaN scale code (0x7F/0xFF) gives a NaN scale, so its block's outputs are NaN (as dequantize does).
//
// Each iteration covers 256 k per row: lane t of a 4-lane group reads 16 bytes (32 elements) at byte
// offsets c*64 + t*16 (c = 0, 1), so a group reads a full 128-byte line of one row.
// Launch: grid = ceil(N / (16 R)), block = 32 S, dynamic shared memory = S * R * NT * 4 * 32 * 4 bytes.

#include "gemv_common.cuh"

// Activation pairs (x_i, x_{i+4}), i = 0..3, of 8 bf16 activations: the weights' nibble pair order.
__device__ __forceinline__ void nvfp4_act_pairs(const uint4& xa, u32 (&bp)[4]) {
    bp[0] = prmt(xa.x, xa.z, 0x5410u);
    bp[1] = prmt(xa.x, xa.z, 0x7632u);
    bp[2] = prmt(xa.y, xa.w, 0x5410u);
    bp[3] = prmt(xa.y, xa.w, 0x7632u);
}

// One 64-byte chunk of packed nibbles (128 k, two 16-blocks): 4 words x R x NT x 2 MMAs into acc.
// wr[r][h]: 16 weight bytes of row tile r, row g (h = 0) / g + 8 (h = 1); xc[nt][w]: 8 activations per word w;
// sc[r][h][b]: the bf16x2 scale (both halves) of 16-block b of the chunk. V: nibble widening version (1 or 2).
template <int V, int R, int NT>
__device__ __forceinline__ void nvfp4_chunk_mma(float (&acc)[R][NT][4], const uint4 (&wr)[R][2], const uint4 (&xc)[NT][4],
                                                const u32 (&sc)[R][2][2]) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        u32 bp[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) nvfp4_act_pairs(xc[nt][w], bp[nt]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const u32 q0 = word_of(wr[r][0], w), q1 = word_of(wr[r][1], w);
            const u32 sa = sc[r][0][w >> 1], sb = sc[r][1][w >> 1];  // words 0,1: the first 16-block; 2,3: the second
            u32 p0[4], p1[4];  // (nibble i, nibble i+4) of rows g / g+8
            if (V == 1) {
                p0[0] = e2m1_pair<0>(q0); p0[1] = e2m1_pair<1>(q0); p0[2] = e2m1_pair<2>(q0); p0[3] = e2m1_pair<3>(q0);
                p1[0] = e2m1_pair<0>(q1); p1[1] = e2m1_pair<1>(q1); p1[2] = e2m1_pair<2>(q1); p1[3] = e2m1_pair<3>(q1);
            } else {
                e2m1x8_to_bf16(q0, p0);
                e2m1x8_to_bf16(q1, p1);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) { p0[i] = bf16x2_mul(p0[i], sa); p1[i] = bf16x2_mul(p1[i], sb); }
            // MMA 1: logical k 2t,2t+1 <- pair 0 (nibbles 0,4); 2t+8,2t+9 <- pair 1. MMA 2: pairs 2, 3.
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                mma_bf16_16816(acc[r][nt], p0[0], p1[0], p0[1], p1[1], bp[nt][0], bp[nt][1]);
                mma_bf16_16816(acc[r][nt], p0[2], p1[2], p0[3], p1[3], bp[nt][2], bp[nt][3]);
            }
        }
    }
}

// =====================================================================================================
// Version 1. Each iteration covers 256 k per row: lane t of a 4-lane group reads 16 bytes (32 elements) at byte
// offsets c*64 + t*16 (c = 0, 1), so a group reads a full 128-byte line of one row.
// Launch: grid = ceil(N / (16 R)), block = 32 S, dynamic shared memory = S * R * NT * 4 * 32 * 4 bytes.
template <int R>
struct Nvfp4V1Frag {
    uint4 w[R][2][2];  // [tile][row half][chunk]
    u32 s[R][2][2];    // the two scale codes of each chunk
};

template <int R, int NT, bool PF>
__device__ __forceinline__ void gemv_nvfp4_body(const u8* __restrict__ W, const u8* __restrict__ SC,
                                                const float* __restrict__ gscale, const u16* __restrict__ X,
                                                u16* __restrict__ Y, int M, int N, int K) {
    extern __shared__ float red[];
    const GemvLane<R> L;
    const int KB = K >> 8;  // 256-wide k-blocks
    const u8* wrow[R][2];
    const u8* srow[R][2];
    nvfp4_rows(L, W, SC, N, K, L.t * 16, 0, 2 * L.t, 0, wrow, srow);
    const u16* xrow[NT];
    bool xok[NT];
    activation_rows(X, M, K, L.g, L.t * 32, xrow, xok);
    float acc[R][NT][4];
    zero_tiles(acc);

    auto load = [&](int kb, Nvfp4V1Frag<R>& f) {
        each_weight_chunk<R, 2>([&](int r, int h, int c) {
            f.w[r][h][c] = ld_stream16(wrow[r][h] + kb * 128 + c * 64);
            // scale blocks of this lane's 32 elements: (kb*256 + c*128 + t*32) / 16 = kb*16 + c*8 + 2t, +1
            f.s[r][h][c] = ld_stream_u16(srow[r][h] + kb * 16 + c * 8);
        });
    };
    auto body = [&](int kb, const Nvfp4V1Frag<R>& f) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            // activations: element k = kb*256 + c*128 + t*32 + 8w + i, one 16-byte load per word w
            uint4 xv[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    if (xok[nt]) xv[nt][w] = ld_cached16(xrow[nt] + kb * 256 + c * 128 + 8 * w);
                    else xv[nt][w] = make_uint4(0u, 0u, 0u, 0u);
                }
            uint4 wr[R][2];
            u32 sc[R][2][2];  // [r][row h][scale block within the chunk]
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    wr[r][h] = f.w[r][h][c];
                    sc[r][h][0] = scale_bf16x2(f.s[r][h][c] & 0xFFu);
                    sc[r][h][1] = scale_bf16x2(f.s[r][h][c] >> 8);
                }
            nvfp4_chunk_mma<1>(acc, wr, xv, sc);
        }
    };
    kloop_registers<PF, Nvfp4V1Frag<R>>(L.warp, L.S, KB, load, body);
    splitk_store(acc, red, L, M, N, Y, Nvfp4Out(gscale));
}

#define GEMV_NVFP4(R, NT, PF)                                                                                  \
    extern "C" __global__ void __launch_bounds__(512) gemv_nvfp4_r##R##_nt##NT##_pf##PF(GEMV_NVFP4_PARAMS) { \
        gemv_nvfp4_body<R, NT, PF>(GEMV_NVFP4_ARGS);                                                           \
    }

// =====================================================================================================
// Version 2: fewer instructions per nibble, a cheaper scale path, and (optionally) a cp.async ring.
//
// Version 1 is bound by the integer/logic pipe, not by memory: per 32-bit word (8 nibbles) it spends
// ~15 shifts and logic ops moving sign and value bits into place (every pair needs its sign shifted
// 6 bits further than its value bits, so two shifted copies and two masks each), plus ~9 ops per
// block scale (fp32 arithmetic, NaN select, pack). Version 2:
//
//  * widens a word in 11 integer ops instead of ~15. Trick: a SELECT (one lop3 with one mask) builds
//    a word in which the sign bit of each wanted nibble sits exactly 7 bits above its value bits, for
//    two pairs at once; each pair then needs one shift (or none) and one AND with 0x81C081C0:
//        set B (nibbles 2,3,6,7): pB = (q & 0x88008800) | ((q >> 6) & ~0x88008800)
//                                 (3,7) = pB & M,   (2,6) = (pB << 4) & M
//        set A (nibbles 0,1,4,5): pA = ((q << 8) & 0x88008800) | ((q << 2) & ~0x88008800)
//                                 (1,5) = pA & M,   (0,4) = (pA << 4) & M
//    Only the bits that survive the final AND must be right, so the select needs no second mask.
//  * converts two block scales with the hardware cvt.rn.f16x2.e4m3x2 (exact, NaN stays NaN), then
//    f16 -> f32 -> packed bf16x2 and one bf16x2 multiply by 2**118: 2.5 ops per scale instead of ~9.
//    Each HMUL2 then picks its scale from that pair (ptxas folds the broadcast into .H0_H0 / .H1_H1).
//  * D >= 2: the weight chunks and the 16 scale bytes of each row go through a cp.async ring of
//    D stages in shared memory (GemvRing, gemv_common.cuh); D = 0 loads straight into registers.
//
// Same arithmetic as version 1 (bf16 w * 2**-8 exact, fp32 accumulation, global scale at the end),
// so with C = 2 (256 k per iteration, version 1's k order) the two versions agree to the last bit --
// except that version 1 computes its scales in fp32 and CuPy's NVRTC compiles with -ftz=true, which
// flushes the E4M3 subnormal scale codes (1..7: 2**-9 .. 7 * 2**-9) to zero there; version 2's
// hardware cvt keeps them. C = 4 reads 512 k (256 bytes) of a row per iteration.
// Launch: grid = ceil(N / (16 R)), block = 32 S,
//   dynamic shared memory = S * D * (R*2*C + R*C) * 512 (ring) + S * R * NT * 512 (reduction).

template <int R, int NT, int C, int D>
__device__ __forceinline__ void gemv_nvfp4_v2_body(const u8* __restrict__ W, const u8* __restrict__ SC,
                                                   const float* __restrict__ gscale, const u16* __restrict__ X,
                                                   u16* __restrict__ Y, int M, int N, int K) {
    static_assert(C == 2 || C == 4, "C 64-byte chunks (128 k) per row per iteration");
    extern __shared__ uint4 smem_v2[];
    constexpr int NW = R * 2 * C;  // 16-byte weight chunks per lane per iteration (rows x h x c)
    constexpr int NS = R * C;      // 16-byte scale lines per lane per iteration (ring only): 8 C bytes per row
    const GemvLane<R> L;
    const int KB = K / (128 * C);

    // Running pointers, advanced once per iteration (loads then use immediate offsets only): weights of this lane's
    // rows at the current k-block (D = 0) or the next to issue, their scale codes, and the activations (tokens past M
    // read token 0's, unmasked: activation_rows says why that is safe).
    const u8* wp[R][2];
    const u8* sp[R][2];
    nvfp4_rows(L, W, SC, N, K, L.t * 16, (size_t)L.warp * (64 * C), D > 0 ? 0 : 2 * L.t, (size_t)L.warp * (8 * C), wp, sp);
    const u16* xp[NT];
    bool xok[NT];
    activation_rows(X, M, K, L.g, L.t * 32 + (size_t)L.warp * (128 * C), xp, xok);
    const size_t wstep = (size_t)L.S * (64 * C), sstep = (size_t)L.S * 8 * C, xstep = (size_t)L.S * 128 * C;
    float acc[R][NT][4];
    zero_tiles(acc);

    GemvRing<D, NW + NS> ring(smem_v2, L.warp, L.lane);
    auto issue = [&](uint4* dst) {  // copy this lane's chunks of the k-block at wp/sp, then advance them
        issue_weights<R, C>(dst, wp, wstep);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // the row's 8 C scale bytes of this k-block (the 4 lanes of a row copy the same lines)
#pragma unroll
                for (int l = 0; l < C / 2; ++l) cp_async16_l2(dst + (NW + (r * 2 + h) * (C / 2) + l) * 32, sp[r][h] + 16 * l);
                sp[r][h] += sstep;
            }
    };
    if (D > 0) ring.prologue(issue, L.warp, L.S, KB);
    for (int kb = L.warp; kb < KB; kb += L.S) {
        uint4 wv[NW];
        u32 sv[R][2][C];  // [r][h][c]: the two scale codes of chunk c (blocks kb*8C + c*8 + 2t, +1)
        const uint4* cur = ring.base;
        if (D > 0) {
            ring.refill(issue, kb, L.S, KB);
            cur = ring.wait_current();
            each_weight_chunk<R, C>([&](int r, int h, int c) {  // line c/2 of the row, bytes (c&1)*8 + 2t, +1
                sv[r][h][c] = reinterpret_cast<const u16*>(cur + (NW + (r * 2 + h) * (C / 2) + (c >> 1)) * 32)[(c & 1) * 4 + L.t];
            });
        } else {
            nvfp4_load_direct<R, C>(wv, sv, wp, sp, wstep, sstep);
        }
#pragma unroll
        for (int c = 0; c < C; ++c) {
            uint4 wr[R][2];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {  // from the ring, read just before use (fewer live registers)
                    if (D > 0) wv[(r * 2 + h) * C + c] = cur[((r * 2 + h) * C + c) * 32];
                    wr[r][h] = wv[(r * 2 + h) * C + c];
                }
            uint4 xv[NT][4];
            load_act_chunk(xv, xp, c);
            u32 sc[R][2][2];
            chunk_scales(sc, sv, c, [](u32 codes) { return scale2_bf16x2(codes); });
            nvfp4_chunk_mma<2>(acc, wr, xv, sc);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xp[nt] += xstep;
    }
    if (D > 0) cp_async_wait<0>();
    splitk_store(acc, GemvRing<D, NW + NS>::end(smem_v2, L.S), L, M, N, Y, Nvfp4Out(gscale));
}

#define GEMV_NVFP4_V2(R, NT, C, D)                                                                             \
    extern "C" __global__ void __launch_bounds__(256) gemv_nvfp4_v2_r##R##_nt##NT##_c##C##_d##D(GEMV_NVFP4_PARAMS) { \
        gemv_nvfp4_v2_body<R, NT, C, D>(GEMV_NVFP4_ARGS);                                                      \
    }

// The compiled configurations, from gemv_nvfp4.py (KERNELS_RNP: (R, NT, PF); KERNELS_V2: (R, NT, C, D)).
#if !defined(FP8LAB_GEMV_NVFP4_V1) || !defined(FP8LAB_GEMV_NVFP4_V2)
#error "the loader passes the instantiation lists (gemv_nvfp4.py KERNELS_RNP / KERNELS_V2) as -D defines"
#endif
FP8LAB_GEMV_NVFP4_V1
FP8LAB_GEMV_NVFP4_V2
