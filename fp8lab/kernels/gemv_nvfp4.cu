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
//     (i, i+4) pair order as the weights.
// A NaN scale code (0x7F/0xFF) gives a NaN scale, so its block's outputs are NaN (as dequantize does).
//
// Each iteration covers 256 k per row: lane t of a 4-lane group reads 16 bytes (32 elements) at byte
// offsets c*64 + t*16 (c = 0, 1), so a group reads a full 128-byte line of one row.
// Launch: grid = ceil(N / (16 R)), block = 32 S, dynamic shared memory = S * R * NT * 4 * 32 * 4 bytes.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ uint4 ld_cached16(const void* p) {
    uint4 r;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ u32 ld_u16(const void* p) {
    u16 v;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

__device__ __forceinline__ u32 bf16x2_mul(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// E4M3 scale byte -> bf16x2 of e4m3(b) * 2**118 in both halves (exact; NaN code -> NaN).
__device__ __forceinline__ u32 scale_bf16x2(u32 b) {
    float f = __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7Fu) << 20));  // e4m3 * 2**-120, subnormals too
    f = f * 0x1p120f;                                                         // the e4m3 value, exact
    f = f * 0x1p118f;                                                         // <= 448 * 2**118: no overflow
    if ((b & 0x7Fu) == 0x7Fu) f = __int_as_float(0x7FC00000);
    u32 h = f32_to_bf16(f);
    return h | (h << 16);
}

// Nibble pair (i, i+4) of word q as bf16x2 (value * 2**-126), i = 0..3 (compile-time).
template <int I>
__device__ __forceinline__ u32 e2m1_pair(u32 q) {
    constexpr int sgn = 12 - 4 * I;  // sign bit 4i+3 -> 15
    constexpr int mag = 6 - 4 * I;   // value bits 4i+2..4i -> 8..6
    u32 s = (sgn >= 0 ? (q << sgn) : (q >> -sgn)) & 0x80008000u;
    u32 m = (mag >= 0 ? (q << mag) : (q >> -mag)) & 0x01C001C0u;
    return s | m;
}

template <int R, int NT, bool PF>
__device__ __forceinline__ void gemv_nvfp4_body(const u8* __restrict__ W, const u8* __restrict__ SC,
                                                const float* __restrict__ gscale, const u16* __restrict__ X,
                                                u16* __restrict__ Y, int M, int N, int K) {
    extern __shared__ float red[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, S = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * (16 * R);
    const int KB = K >> 8;          // 256-wide k-blocks
    const int KH = K >> 1, KS = K >> 4;

    const u8* wrow[R][2];
    const u8* srow[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int row = min(n0 + 16 * r + g + 8 * h, N - 1);
            wrow[r][h] = W + (size_t)row * KH + t * 16;
            srow[r][h] = SC + (size_t)row * KS + 2 * t;
        }
    const u16* xrow[NT];
    bool xok[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        int m = nt * 8 + g;
        xok[nt] = m < M;
        xrow[nt] = X + (size_t)(xok[nt] ? m : 0) * K + t * 32;
    }

    float acc[R][NT][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][nt][i] = 0.f;

    uint4 wv[R][2][2];
    u32 sv[R][2][2];
    auto load = [&](int kb, uint4 (&w)[R][2][2], u32 (&sc)[R][2][2]) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    w[r][h][c] = ld_stream16(wrow[r][h] + kb * 128 + c * 64);
                    // scale blocks of this lane's 32 elements: (kb*256 + c*128 + t*32) / 16 = kb*16 + c*8 + 2t, +1
                    sc[r][h][c] = ld_u16(srow[r][h] + kb * 16 + c * 8);
                }
    };
    if (PF && warp < KB) load(warp, wv, sv);
    for (int kb = warp; kb < KB; kb += S) {
        uint4 wn[R][2][2];
        u32 sn[R][2][2];
        if (PF) {
            if (kb + S < KB) load(kb + S, wn, sn);  // next k-block in flight during this one's math
        } else {
            load(kb, wv, sv);
        }
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
            u32 s2[R][2][2];  // [r][row h][scale block within the chunk]
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    s2[r][h][0] = scale_bf16x2(sv[r][h][c] & 0xFFu);
                    s2[r][h][1] = scale_bf16x2(sv[r][h][c] >> 8);
                }
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                u32 bp[NT][4];  // activation pairs (x_i, x_{i+4}), i = 0..3
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const uint4& xa = xv[nt][w];
                    bp[nt][0] = prmt(xa.x, xa.z, 0x5410u);
                    bp[nt][1] = prmt(xa.x, xa.z, 0x7632u);
                    bp[nt][2] = prmt(xa.y, xa.w, 0x5410u);
                    bp[nt][3] = prmt(xa.y, xa.w, 0x7632u);
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const u32 q0 = w == 0 ? wv[r][0][c].x : w == 1 ? wv[r][0][c].y : w == 2 ? wv[r][0][c].z : wv[r][0][c].w;
                    const u32 q1 = w == 0 ? wv[r][1][c].x : w == 1 ? wv[r][1][c].y : w == 2 ? wv[r][1][c].z : wv[r][1][c].w;
                    const u32 sa = s2[r][0][w >> 1], sb = s2[r][1][w >> 1];
                    // MMA 1: logical k 2t,2t+1 <- pair 0; 2t+8,2t+9 <- pair 1.  MMA 2: pairs 2 and 3.
                    u32 a0 = bf16x2_mul(e2m1_pair<0>(q0), sa), a1 = bf16x2_mul(e2m1_pair<0>(q1), sb);
                    u32 a2 = bf16x2_mul(e2m1_pair<1>(q0), sa), a3 = bf16x2_mul(e2m1_pair<1>(q1), sb);
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) mma_bf16(acc[r][nt], a0, a1, a2, a3, bp[nt][0], bp[nt][1]);
                    a0 = bf16x2_mul(e2m1_pair<2>(q0), sa); a1 = bf16x2_mul(e2m1_pair<2>(q1), sb);
                    a2 = bf16x2_mul(e2m1_pair<3>(q0), sa); a3 = bf16x2_mul(e2m1_pair<3>(q1), sb);
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) mma_bf16(acc[r][nt], a0, a1, a2, a3, bp[nt][2], bp[nt][3]);
                }
            }
        }
        if (PF) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int c = 0; c < 2; ++c) { wv[r][h][c] = wn[r][h][c]; sv[r][h][c] = sn[r][h][c]; }
        }
    }

    constexpr int NV = R * NT * 4;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[(warp * NV + (r * NT + nt) * 4 + i) * 32 + lane] = acc[r][nt][i];
    __syncthreads();
    if (warp != 0) return;
    const float gs = __ldg(gscale) * 0x1p8f;  // undo the 2**-8 carried by s'
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int idx = (r * NT + nt) * 4 + i;
                float v = 0.f;
                for (int w = 0; w < S; ++w) v += red[(w * NV + idx) * 32 + lane];
                const int n = n0 + 16 * r + g + 8 * (i >> 1);
                const int m = nt * 8 + 2 * t + (i & 1);
                if (n < N && m < M) Y[(size_t)m * N + n] = f32_to_bf16(v * gs);
            }
}

#define GEMV_NVFP4(R, NT, PF)                                                                                  \
    extern "C" __global__ void __launch_bounds__(512) gemv_nvfp4_r##R##_nt##NT##_pf##PF(                      \
        const u8* __restrict__ W, const u8* __restrict__ SC, const float* __restrict__ gscale,                 \
        const u16* __restrict__ X, u16* __restrict__ Y, int M, int N, int K) {                                 \
        gemv_nvfp4_body<R, NT, PF>(W, SC, gscale, X, Y, M, N, K);                                              \
    }

// (R, NT, prefetch); (4, *, *) and the prefetching R = 2 / NT = 2 ones spill at 128 registers.
GEMV_NVFP4(1, 1, 0)
GEMV_NVFP4(2, 1, 0)
GEMV_NVFP4(1, 2, 0)
GEMV_NVFP4(2, 2, 0)
GEMV_NVFP4(1, 1, 1)
GEMV_NVFP4(2, 1, 1)

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
//    D stages in shared memory (see gemv_fp8.cu version 2); D = 0 loads straight into registers.
//
// Same arithmetic as version 1 (bf16 w * 2**-8 exact, fp32 accumulation, global scale at the end),
// so with C = 2 (256 k per iteration, version 1's k order) the two versions agree to the last bit --
// except that version 1 computes its scales in fp32 and CuPy's NVRTC compiles with -ftz=true, which
// flushes the E4M3 subnormal scale codes (1..7: 2**-9 .. 7 * 2**-9) to zero there; version 2's
// hardware cvt keeps them. C = 4 reads 512 k (256 bytes) of a row per iteration.
// Launch: grid = ceil(N / (16 R)), block = 32 S,
//   dynamic shared memory = S * D * (R*2*C + R*C) * 512 (ring) + S * R * NT * 512 (reduction).

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gsrc) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Two E4M3 scale codes (low byte = first block) -> bf16x2 of e4m3 * 2**118 (exact; NaN code -> NaN).
__device__ __forceinline__ u32 scale2_bf16x2(u32 two_codes) {
    u32 h2;
    asm("{ .reg .b16 s; cvt.u16.u32 s, %1; cvt.rn.f16x2.e4m3x2 %0, s; }" : "=r"(h2) : "r"(two_codes));
    float lo, hi;
    asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }" : "=f"(lo), "=f"(hi) : "r"(h2));
    u32 p;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(p) : "f"(hi), "f"(lo));  // lo in bits 15:0
    return bf16x2_mul(p, 0x7A807A80u);                                  // x 2**118 (bf16 0x7A80), exact
}

// (a & 0x88008800) | (c & ~0x88008800) in ONE lop3 (LUT 0xE2 = a&b | c&~b). Written out in PTX:
// from plain C, ptxas masks the shifted operand first and spends two.
__device__ __forceinline__ u32 select_8800(u32 a, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, 0x88008800, %2, 0xE2;" : "=r"(d) : "r"(a), "r"(c));
    return d;
}

// Low / high bf16 of a pair, broadcast to both halves (ptxas folds this into HMUL2's .H0_H0 / .H1_H1).
__device__ __forceinline__ u32 bcast_lo(u32 x) {
    u32 d;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {l, l}; }" : "=r"(d) : "r"(x));
    return d;
}
__device__ __forceinline__ u32 bcast_hi(u32 x) {
    u32 d;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {h, h}; }" : "=r"(d) : "r"(x));
    return d;
}

// The eight nibbles of q as four bf16x2 (value * 2**-126 each): p[i] = (nibble i, nibble i+4).
__device__ __forceinline__ void e2m1x8_to_bf16(u32 q, u32 (&p)[4]) {
    constexpr u32 M = 0x81C081C0u;
    const u32 pb = select_8800(q, q >> 6);
    const u32 pa = select_8800(q << 8, q << 2);
    p[0] = (pa << 4) & M;
    p[1] = pa & M;
    p[2] = (pb << 4) & M;
    p[3] = pb & M;
}

template <int R, int NT, int C, int D>
__device__ __forceinline__ void gemv_nvfp4_v2_body(const u8* __restrict__ W, const u8* __restrict__ SC,
                                                   const float* __restrict__ gscale, const u16* __restrict__ X,
                                                   u16* __restrict__ Y, int M, int N, int K) {
    static_assert(C == 2 || C == 4, "C 64-byte chunks (128 k) per row per iteration");
    extern __shared__ uint4 smem_v2[];
    constexpr int KW = 64 * C;     // weight bytes per row per iteration (128 C k)
    constexpr int NW = R * 2 * C;  // 16-byte weight chunks per lane per iteration (rows x h x c)
    constexpr int NS = R * C;      // 16-byte scale lines per lane per iteration (ring only): 8 C bytes per row
    constexpr int NSLOT = NW + NS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, S = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * (16 * R);
    const int KB = K / (128 * C);
    const int KH = K >> 1, KS = K >> 4;

    // Running pointers, advanced once per iteration (loads then use immediate offsets only).
    const u8* wp[R][2];  // weights of this lane's rows at the current k-block (D = 0) or the next to issue
    const u8* sp[R][2];  // their scale codes
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = min(n0 + 16 * r + g + 8 * h, N - 1);  // rows past N: loaded, never stored
            wp[r][h] = W + (size_t)row * KH + t * 16 + (size_t)warp * KW;
            sp[r][h] = SC + (size_t)row * KS + (D > 0 ? 0 : 2 * t) + (size_t)warp * (8 * C);
        }
    // Tokens past M load token 0's activations: they only feed output columns m >= M (an MMA output
    // column depends on its own B column alone), which are never stored. No masking needed.
    const u16* xp[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int m = nt * 8 + g;
        xp[nt] = X + (size_t)(m < M ? m : 0) * K + t * 32 + (size_t)warp * (128 * C);
    }
    const size_t wstep = (size_t)S * KW, sstep = (size_t)S * 8 * C, xstep = (size_t)S * 128 * C;
    float acc[R][NT][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][nt][i] = 0.f;

    uint4* ring = smem_v2 + (size_t)warp * (D > 0 ? D : 1) * NSLOT * 32 + lane;
    auto issue = [&](uint4* dst) {  // copy this lane's chunks of the k-block at wp/sp, then advance them
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int c = 0; c < C; ++c) cp_async16(dst + ((r * 2 + h) * C + c) * 32, wp[r][h] + c * 64);
                // the row's 8 C scale bytes of this k-block (the 4 lanes of a row copy the same lines)
#pragma unroll
                for (int l = 0; l < C / 2; ++l) cp_async16(dst + (NW + (r * 2 + h) * (C / 2) + l) * 32, sp[r][h] + 16 * l);
                wp[r][h] += wstep;
                sp[r][h] += sstep;
            }
    };
    if (D > 0) {
#pragma unroll
        for (int s = 0; s < D - 1; ++s) {
            if (warp + s * S < KB) issue(ring + s * NSLOT * 32);
            cp_async_commit();  // empty groups too: wait_group<D-1> then always means "this iteration's data"
        }
    }
    int slot = 0;
    for (int kb = warp; kb < KB; kb += S) {
        uint4 wv[NW];
        u32 sv[R][2][C];  // [r][h][c]: the two scale codes of chunk c (blocks kb*8C + c*8 + 2t, +1)
        const uint4* cur = ring;
        if (D > 0) {
            if (kb + (D - 1) * S < KB) issue(ring + (slot == 0 ? D - 1 : slot - 1) * NSLOT * 32);  // slot read last time
            cp_async_commit();
            cp_async_wait<(D > 0 ? D - 1 : 0)>();
            cur = ring + slot * NSLOT * 32;
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int c = 0; c < C; ++c)  // line c/2 of the row, bytes (c&1)*8 + 2t, +1
                        sv[r][h][c] = reinterpret_cast<const u16*>(cur + (NW + (r * 2 + h) * (C / 2) + (c >> 1)) * 32)[(c & 1) * 4 + t];
            slot = slot + 1 == D ? 0 : slot + 1;
        } else {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int c = 0; c < C; ++c) {
                        wv[(r * 2 + h) * C + c] = ld_stream16(wp[r][h] + c * 64);
                        sv[r][h][c] = ld_u16(sp[r][h] + c * 8);
                    }
                    wp[r][h] += wstep;
                    sp[r][h] += sstep;
                }
        }
#pragma unroll
        for (int c = 0; c < C; ++c) {
            if (D > 0) {  // this chunk's weights from the ring, read just before use (fewer live registers)
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int h = 0; h < 2; ++h) wv[(r * 2 + h) * C + c] = cur[((r * 2 + h) * C + c) * 32];
            }
            uint4 xv[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int w = 0; w < 4; ++w) xv[nt][w] = ld_cached16(xp[nt] + c * 128 + 8 * w);
            u32 s2[R][2];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) s2[r][h] = scale2_bf16x2(sv[r][h][c]);
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                u32 bp[NT][4];  // activation pairs (x_i, x_{i+4}), the weights' pair order
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const uint4& xa = xv[nt][w];
                    bp[nt][0] = prmt(xa.x, xa.z, 0x5410u);
                    bp[nt][1] = prmt(xa.x, xa.z, 0x7632u);
                    bp[nt][2] = prmt(xa.y, xa.w, 0x5410u);
                    bp[nt][3] = prmt(xa.y, xa.w, 0x7632u);
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const uint4& v0 = wv[(r * 2 + 0) * C + c];
                    const uint4& v1 = wv[(r * 2 + 1) * C + c];
                    const u32 q0 = w == 0 ? v0.x : w == 1 ? v0.y : w == 2 ? v0.z : v0.w;
                    const u32 q1 = w == 0 ? v1.x : w == 1 ? v1.y : w == 2 ? v1.z : v1.w;
                    // words 0,1 of the chunk are its first 16-block, words 2,3 the second
                    const u32 sa = (w >> 1) ? bcast_hi(s2[r][0]) : bcast_lo(s2[r][0]);
                    const u32 sb = (w >> 1) ? bcast_hi(s2[r][1]) : bcast_lo(s2[r][1]);
                    u32 p0[4], p1[4];
                    e2m1x8_to_bf16(q0, p0);
                    e2m1x8_to_bf16(q1, p1);
#pragma unroll
                    for (int i = 0; i < 4; ++i) { p0[i] = bf16x2_mul(p0[i], sa); p1[i] = bf16x2_mul(p1[i], sb); }
                    // MMA 1: logical k 2t,2t+1 <- pair 0 (nibbles 0,4); 2t+8,2t+9 <- pair 1. MMA 2: pairs 2, 3.
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        mma_bf16(acc[r][nt], p0[0], p1[0], p0[1], p1[1], bp[nt][0], bp[nt][1]);
                        mma_bf16(acc[r][nt], p0[2], p1[2], p0[3], p1[3], bp[nt][2], bp[nt][3]);
                    }
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xp[nt] += xstep;
    }
    if (D > 0) cp_async_wait<0>();

    constexpr int NV = R * NT * 4;
    float* red = reinterpret_cast<float*>(smem_v2 + (size_t)S * (D > 0 ? D : 0) * NSLOT * 32);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[(warp * NV + (r * NT + nt) * 4 + i) * 32 + lane] = acc[r][nt][i];
    __syncthreads();
    if (warp != 0) return;
    const float gs = __ldg(gscale) * 0x1p8f;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int idx = (r * NT + nt) * 4 + i;
                float v = 0.f;
                for (int w = 0; w < S; ++w) v += red[(w * NV + idx) * 32 + lane];
                const int n = n0 + 16 * r + g + 8 * (i >> 1);
                const int m = nt * 8 + 2 * t + (i & 1);
                if (n < N && m < M) Y[(size_t)m * N + n] = f32_to_bf16(v * gs);
            }
}

#define GEMV_NVFP4_V2(R, NT, C, D)                                                                             \
    extern "C" __global__ void __launch_bounds__(256) gemv_nvfp4_v2_r##R##_nt##NT##_c##C##_d##D(              \
        const u8* __restrict__ W, const u8* __restrict__ SC, const float* __restrict__ gscale,                 \
        const u16* __restrict__ X, u16* __restrict__ Y, int M, int N, int K) {                                 \
        gemv_nvfp4_v2_body<R, NT, C, D>(W, SC, gscale, X, Y, M, N, K);                                         \
    }

// (R, NT, C, D): row tiles per warp, token tiles, 64-byte chunks (128 k) per row per iteration,
// ring depth (0: direct register loads)
GEMV_NVFP4_V2(1, 1, 2, 0)
GEMV_NVFP4_V2(2, 1, 2, 0)
GEMV_NVFP4_V2(1, 1, 2, 2)
GEMV_NVFP4_V2(2, 1, 2, 2)
GEMV_NVFP4_V2(1, 1, 4, 0)
GEMV_NVFP4_V2(1, 1, 4, 2)
GEMV_NVFP4_V2(2, 1, 4, 0)
GEMV_NVFP4_V2(1, 2, 2, 0)
GEMV_NVFP4_V2(2, 2, 2, 0)
GEMV_NVFP4_V2(1, 2, 2, 2)
GEMV_NVFP4_V2(2, 2, 2, 2)
GEMV_NVFP4_V2(2, 2, 4, 0)
