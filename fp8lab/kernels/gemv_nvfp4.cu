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
