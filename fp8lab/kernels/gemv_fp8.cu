// gemv_fp8.cu -- W8A16 decode GEMV / skinny GEMM on the tensor cores.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W[N, K] e4m3)^T,   M = 1..16, fp32 accumulation
//
// Weights stay FP8 in memory and are widened in registers, never materialized:
//   * each lane reads 16-byte chunks of weight bytes (ld.global.nc.L1::no_allocate: read once, stream);
//   * e4m3 -> bf16 by bit moves: the 7 exponent+mantissa bits slide into the low end of bf16's
//     exponent/mantissa, which is the value times 2**-120 for every code, subnormals included;
//     one bf16x2 multiply by 2**120 (exact: a power of two, no overflow since |w| <= 448) restores it;
//   * the widened pairs feed mma.sync.m16n8k16 bf16 (fp32 accumulate): 16 weight rows are the MMA's M,
//     the tokens are its N (8 per MMA; M <= 8 uses one n-tile, M <= 16 two), K is K.
//   The bit move hands out the bytes of a word in the order (b0, b2), (b1, b3); a dot product does
//   not care about the order of k, so the activations are permuted the same way (prmt) and the
//   MMA sees a consistent k order on both operands.
//
// Scales: per output channel (scale[N], applied once at the end) or 128x128 blocks
// (scale[ceil(N/128), K/128]): each 128-wide k-block is accumulated in its own fp32 registers and
// promoted with acc += part * scale (DeepGEMM's FP32 promotion).
//
// Work split: a warp owns R 16-row tiles; a block of S warps splits K (warp w takes k-blocks
// w, w+S, ...) and the S partial sums meet in shared memory at the end (split-K without atomics).
//
// NaN weight codes (0x7F/0xFF) decode as +-480 here, not NaN: the kernels assume finite weights.
// PF = 1 kernels prefetch the next k-block into registers (software pipelining); PF = 0 rely on occupancy.
// Launch: grid = ceil(N / (16 R)), block = 32 S, dynamic shared memory = S * R * NT * 4 * 32 * 4 bytes.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define BF16X2_2POW120 0x7B807B80u  // bf16 2**120 in both halves (exponent field 247)

__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    // Weights are read exactly once: keep them out of L1, ask L2 for the whole 256-byte line.
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ uint4 ld_cached16(const void* p) {
    // Activations are shared by every row: let them live in L1.
    uint4 r;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
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

// Four e4m3 bytes q = [b3 b2 b1 b0] -> bf16x2 (b0, b2) and (b1, b3), exact values.
__device__ __forceinline__ void e4m3x4_to_bf16(u32 q, u32& p02, u32& p13) {
    // b1 and b3 already sit in bits 15:8 / 31:24: sign stays, the 7 value bits move down 4 places.
    u32 hi = (q & 0x80008000u) | ((q >> 4) & 0x07F007F0u);
    // b0 and b2: the same after moving them up one byte.
    u32 lo = ((q << 8) & 0x80008000u) | ((q << 4) & 0x07F007F0u);
    p02 = bf16x2_mul(lo, BF16X2_2POW120);
    p13 = bf16x2_mul(hi, BF16X2_2POW120);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 word_of(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // i is a compile-time constant after unrolling
}

template <int R, int NT, bool BLOCK, bool PF>
__device__ __forceinline__ void gemv_fp8_body(const u8* __restrict__ W, const float* __restrict__ scale,
                                              const u16* __restrict__ X, u16* __restrict__ Y,
                                              int M, int N, int K) {
    extern __shared__ float red[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, S = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * (16 * R);
    const int KB = K >> 7;

    // Row pointers (rows past N are clamped for the loads and dropped at the store).
    const u8* wrow[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int row = min(n0 + 16 * r + g + 8 * h, N - 1);
            wrow[r][h] = W + (size_t)row * K + t * 16;
        }
    const u16* xrow[NT];
    bool xok[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        int m = nt * 8 + g;
        xok[nt] = m < M;
        xrow[nt] = X + (size_t)(xok[nt] ? m : 0) * K + t * 16;
    }

    float acc[R][NT][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][nt][i] = 0.f;

    // Software pipeline: the next k-block's weights and activations are in flight while this one is
    // multiplied (twice the bytes in flight per warp, no bubble between iterations).
    uint4 wv[R][2][2], xv[NT][2][2];
    auto load = [&](int kb, uint4 (&w)[R][2][2], uint4 (&xx)[NT][2][2]) {
        const int k0 = kb << 7;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int c = 0; c < 2; ++c) w[r][h][c] = ld_stream16(wrow[r][h] + k0 + c * 64);
        // lane (g, t) holds token g's k = k0 + c*64 + t*16 .. +15
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    if (xok[nt]) xx[nt][c][j] = ld_cached16(xrow[nt] + k0 + c * 64 + j * 8);
                    else xx[nt][c][j] = make_uint4(0u, 0u, 0u, 0u);
                }
    };
    if (PF && warp < KB) load(warp, wv, xv);
    for (int kb = warp; kb < KB; kb += S) {
        uint4 wn[R][2][2], xn[NT][2][2];
        if (PF) {
            if (kb + S < KB) load(kb + S, wn, xn);
        } else {
            load(kb, wv, xv);  // PF = false: fewer registers, more resident warps instead
        }
        float part[R][NT][4];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) part[r][nt][i] = 0.f;
        // 3. 8 MMAs (k16 each) per row tile and n-tile; MMA s uses weight word s of each row.
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const int c = s >> 2, w = s & 3;
            u32 b0[NT], b1[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                // weight word w covers x elements 4w..4w+3 of the chunk = x words 2w, 2w+1 (of 8)
                const uint4& xa = xv[nt][c][w >> 1];
                u32 x01 = (w & 1) ? xa.z : xa.x, x23 = (w & 1) ? xa.w : xa.y;
                b0[nt] = prmt(x01, x23, 0x5410u);  // (x0, x2) pairs with weight bytes (b0, b2)
                b1[nt] = prmt(x01, x23, 0x7632u);  // (x1, x3) pairs with (b1, b3)
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                u32 a0, a1, a2, a3;
                e4m3x4_to_bf16(word_of(wv[r][0][c], w), a0, a2);  // row g:   (b0,b2) -> k 2t.., (b1,b3) -> k 2t+8..
                e4m3x4_to_bf16(word_of(wv[r][1][c], w), a1, a3);  // row g+8
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    if (BLOCK) mma_bf16(part[r][nt], a0, a1, a2, a3, b0[nt], b1[nt]);
                    else mma_bf16(acc[r][nt], a0, a1, a2, a3, b0[nt], b1[nt]);
                }
            }
        }
        // 4. FP32 promotion with this k-block's 128x128 weight scale.
        if (BLOCK) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float sc = __ldg(scale + (size_t)((n0 + 16 * r) >> 7) * KB + kb);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[r][nt][i] = fmaf(part[r][nt][i], sc, acc[r][nt][i]);
            }
        }
        if (PF) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int c = 0; c < 2; ++c) wv[r][h][c] = wn[r][h][c];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c)
#pragma unroll
                    for (int j = 0; j < 2; ++j) xv[nt][c][j] = xn[nt][c][j];
        }
    }

    // Split-K reduction across the S warps: red[warp][idx][lane], conflict-free.
    constexpr int NV = R * NT * 4;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[(warp * NV + (r * NT + nt) * 4 + i) * 32 + lane] = acc[r][nt][i];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int idx = (r * NT + nt) * 4 + i;
                float v = 0.f;
                for (int w = 0; w < S; ++w) v += red[(w * NV + idx) * 32 + lane];
                // C fragment: c0,c1 -> (row g, tokens 2t, 2t+1); c2,c3 -> (row g+8, same tokens)
                const int n = n0 + 16 * r + g + 8 * (i >> 1);
                const int m = nt * 8 + 2 * t + (i & 1);
                if (n < N && m < M) {
                    if (!BLOCK) v *= __ldg(scale + n);
                    Y[(size_t)m * N + n] = f32_to_bf16(v);
                }
            }
}

#define GEMV_FP8(R, NT, PF)                                                                                    \
    extern "C" __global__ void __launch_bounds__(512) gemv_fp8_channel_r##R##_nt##NT##_pf##PF(                \
        const u8* __restrict__ W, const float* __restrict__ scale, const u16* __restrict__ X,                  \
        u16* __restrict__ Y, int M, int N, int K) {                                                            \
        gemv_fp8_body<R, NT, false, PF>(W, scale, X, Y, M, N, K);                                              \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(512) gemv_fp8_block_r##R##_nt##NT##_pf##PF(                  \
        const u8* __restrict__ W, const float* __restrict__ scale, const u16* __restrict__ X,                  \
        u16* __restrict__ Y, int M, int N, int K) {                                                            \
        gemv_fp8_body<R, NT, true, PF>(W, scale, X, Y, M, N, K);                                               \
    }

// (R, NT, prefetch). Left out because they spill at the 128-register cap of 512-thread blocks:
// (4, 2, *), (4, 1, 1), (2, 2, 1).
GEMV_FP8(1, 1, 0)
GEMV_FP8(2, 1, 0)
GEMV_FP8(4, 1, 0)
GEMV_FP8(1, 2, 0)
GEMV_FP8(2, 2, 0)
GEMV_FP8(1, 1, 1)
GEMV_FP8(2, 1, 1)
GEMV_FP8(1, 2, 1)

// =====================================================================================================
// Version 2: a cp.async ring in shared memory keeps the weight bytes in flight without holding them
// in registers, and each iteration can read 256 bytes of a row (C = 4) instead of 128.
//
// Why: at M = 1 a version-1 warp issues its loads, waits ~1 us, then spends a similar time widening
// and multiplying, with nothing in flight meanwhile. Its prefetching form (PF = 1) holds the next
// k-block in registers, which costs so many registers that fewer warps fit on the SM. Here each lane
// copies its own 16-byte chunks for the iteration D-1 steps ahead straight into shared memory
// (cp.async.cg: bypasses L1 and registers), then reads back the chunks of the current iteration
// (ld.shared, conflict-free: lane i reads bytes 16i..16i+15 of a 512-byte row of the ring). A lane
// only ever reads what it copied itself, so cp.async.wait_group is the only synchronisation needed.
// D = 0 keeps version 1's direct register loads (for comparison at the same C).
//
// C = 8 reads 512 contiguous bytes of each row per iteration (what a bf16 GEMV warp typically reads).
// Layout per iteration: lane (g, t) holds bytes c*64 + t*16 .. +15 of rows g and g+8 of each 16-row
// tile, c = 0..C-1: a 4-lane group reads C*64 contiguous bytes of one row (full 32-byte sectors).
// 128x128 block scales: one promotion per 128-wide k-block, i.e. after every second chunk.
// Launch: grid = ceil(N / (16 R)), block = 32 S,
//         dynamic shared memory = S * D * R*2*C * 512 (ring) + S * R * NT * 512 (split-K reduction).

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gsrc) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

template <int R, int NT, int C, int D, bool BLOCK>
__device__ __forceinline__ void gemv_fp8_v2_body(const u8* __restrict__ W, const float* __restrict__ scale,
                                                 const u16* __restrict__ X, u16* __restrict__ Y,
                                                 int M, int N, int K) {
    static_assert(C == 2 || C == 4 || C == 8, "C chunks of 64 bytes per row per iteration");
    extern __shared__ uint4 smem_v2[];
    constexpr int KW = 64 * C;        // k (= weight bytes) per row per iteration
    constexpr int NW = R * 2 * C;     // 16-byte weight chunks per lane per iteration
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, S = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * (16 * R);
    const int KB = K / KW;
    const int KS = K >> 7;            // 128-wide scale k-blocks per row (block mode)

    // Running pointers, advanced once per iteration (the loads then use immediate offsets only).
    const u8* wp[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = min(n0 + 16 * r + g + 8 * h, N - 1);  // rows past N: loaded, never stored
            wp[r][h] = W + (size_t)row * K + t * 16 + (size_t)warp * KW;
        }
    // Tokens past M read token 0's activations: an MMA output column depends on its own B column
    // only, so they touch only output columns m >= M, which are never stored. No masking needed.
    const u16* xp[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int m = nt * 8 + g;
        xp[nt] = X + (size_t)(m < M ? m : 0) * K + t * 16 + (size_t)warp * KW;
    }
    const size_t step = (size_t)S * KW;  // bytes of W (and elements of X) per iteration of a warp
    const float* sp[R];                  // block mode: this warp's first scale of each row tile
#pragma unroll
    for (int r = 0; r < R; ++r) sp[r] = scale + (size_t)(min(n0 + 16 * r, N - 1) >> 7) * KS + warp * (KW / 128);
    float acc[R][NT][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][nt][i] = 0.f;

    uint4* ring = smem_v2 + (size_t)warp * (D > 0 ? D : 1) * NW * 32 + lane;  // [D][NW][32 lanes] x 16 B
    auto issue = [&](uint4* dst) {  // copy this lane's chunks of the k-block at wp, then advance wp
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int c = 0; c < C; ++c) cp_async16(dst + ((r * 2 + h) * C + c) * 32, wp[r][h] + c * 64);
                wp[r][h] += step;
            }
    };
    if (D > 0) {
#pragma unroll
        for (int s = 0; s < D - 1; ++s) {
            if (warp + s * S < KB) issue(ring + s * NW * 32);
            cp_async_commit();  // empty groups too: wait_group<D-1> then always means "this iteration's data"
        }
    }
    int slot = 0;
    for (int kb = warp; kb < KB; kb += S) {
        const uint4* cur = ring;
        if (D > 0) {
            if (kb + (D - 1) * S < KB) issue(ring + (slot == 0 ? D - 1 : slot - 1) * NW * 32);  // slot read last time
            cp_async_commit();
        }
        // activations first: L1 hits mostly, their latency overlaps the wait below
        uint4 xv[NT][C][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < C; ++c)
#pragma unroll
                for (int j = 0; j < 2; ++j) xv[nt][c][j] = ld_cached16(xp[nt] + c * 64 + j * 8);
        uint4 wv[NW];
        if (D > 0) {
            cp_async_wait<(D > 0 ? D - 1 : 0)>();
            cur = ring + slot * NW * 32;
            slot = slot + 1 == D ? 0 : slot + 1;
        } else {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int c = 0; c < C; ++c) wv[(r * 2 + h) * C + c] = ld_stream16(wp[r][h] + c * 64);
                    wp[r][h] += step;
                }
        }
        float part[R][NT][4];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            if (D > 0) {  // this chunk's weights from the ring, read just before use (fewer live registers)
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int h = 0; h < 2; ++h) wv[(r * 2 + h) * C + c] = cur[((r * 2 + h) * C + c) * 32];
            }
            if (BLOCK && (c & 1) == 0) {
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int i = 0; i < 4; ++i) part[r][nt][i] = 0.f;
            }
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                u32 b0[NT], b1[NT];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const uint4& xa = xv[nt][c][w >> 1];
                    const u32 x01 = (w & 1) ? xa.z : xa.x, x23 = (w & 1) ? xa.w : xa.y;
                    b0[nt] = prmt(x01, x23, 0x5410u);  // (x0, x2) pairs with weight bytes (b0, b2)
                    b1[nt] = prmt(x01, x23, 0x7632u);  // (x1, x3) pairs with (b1, b3)
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    u32 a0, a1, a2, a3;
                    e4m3x4_to_bf16(word_of(wv[(r * 2 + 0) * C + c], w), a0, a2);
                    e4m3x4_to_bf16(word_of(wv[(r * 2 + 1) * C + c], w), a1, a3);
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        if (BLOCK) mma_bf16(part[r][nt], a0, a1, a2, a3, b0[nt], b1[nt]);
                        else mma_bf16(acc[r][nt], a0, a1, a2, a3, b0[nt], b1[nt]);
                    }
                }
            }
            if (BLOCK && (c & 1) == 1) {  // FP32 promotion with this 128-wide k-block's scale
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const float sc = __ldg(sp[r] + (c >> 1));
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int i = 0; i < 4; ++i) acc[r][nt][i] = fmaf(part[r][nt][i], sc, acc[r][nt][i]);
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xp[nt] += step;
#pragma unroll
        for (int r = 0; r < R; ++r) sp[r] += (size_t)S * (KW / 128);
    }
    if (D > 0) cp_async_wait<0>();

    // Split-K reduction across the S warps (after the ring in shared memory): red[warp][idx][lane].
    constexpr int NV = R * NT * 4;
    float* red = reinterpret_cast<float*>(smem_v2 + (size_t)S * (D > 0 ? D : 0) * NW * 32);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[(warp * NV + (r * NT + nt) * 4 + i) * 32 + lane] = acc[r][nt][i];
    __syncthreads();
    if (warp != 0) return;
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
                if (n < N && m < M) {
                    if (!BLOCK) v *= __ldg(scale + n);
                    Y[(size_t)m * N + n] = f32_to_bf16(v);
                }
            }
}

#define GEMV_FP8_V2(R, NT, C, D)                                                                               \
    extern "C" __global__ void __launch_bounds__(256) gemv_fp8_v2_channel_r##R##_nt##NT##_c##C##_d##D(         \
        const u8* __restrict__ W, const float* __restrict__ scale, const u16* __restrict__ X,                  \
        u16* __restrict__ Y, int M, int N, int K) {                                                            \
        gemv_fp8_v2_body<R, NT, C, D, false>(W, scale, X, Y, M, N, K);                                         \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(256) gemv_fp8_v2_block_r##R##_nt##NT##_c##C##_d##D(           \
        const u8* __restrict__ W, const float* __restrict__ scale, const u16* __restrict__ X,                  \
        u16* __restrict__ Y, int M, int N, int K) {                                                            \
        gemv_fp8_v2_body<R, NT, C, D, true>(W, scale, X, Y, M, N, K);                                          \
    }

// (R, NT, C, D): row tiles per warp, token tiles, 64-byte chunks per row per iteration, ring depth (0: none)
GEMV_FP8_V2(1, 1, 2, 2)
GEMV_FP8_V2(2, 1, 2, 2)
GEMV_FP8_V2(1, 1, 4, 0)
GEMV_FP8_V2(1, 1, 4, 2)
GEMV_FP8_V2(1, 1, 4, 3)
GEMV_FP8_V2(2, 1, 4, 0)
GEMV_FP8_V2(1, 1, 8, 0)
GEMV_FP8_V2(1, 1, 8, 2)
GEMV_FP8_V2(1, 2, 2, 2)
GEMV_FP8_V2(2, 2, 2, 2)
GEMV_FP8_V2(1, 2, 2, 3)
GEMV_FP8_V2(1, 2, 4, 0)
GEMV_FP8_V2(1, 2, 4, 2)
