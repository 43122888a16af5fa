// gemv_fp8.cu -- W8A16 decode GEMV / skinny GEMM on the tensor cores.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . dequant(W[N, K] e4m3)^T,   M = 1..16, fp32 accumulation
//
// Weights stay FP8 in memory and are widened in registers, never materialized:
//   * each lane reads 16-byte chunks of weight bytes (ld.global.nc.L1::no_allocate: read once, stream);
//   * e4m3 -> bf16 by bit moves (fp8_decode.cuh e4m3x4_to_bf16): the 7 exponent+mantissa bits slide into the
//     low end of bf16's exponent/mantissa, the value times 2**-120 for every code, subnormals included; one
//     bf16x2 multiply by 2**120 (exact) restores it;
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
// Work split, k loops and the split-K epilogue: gemv_common.cuh.
// NaN weight codes (0x7F/0xFF) decode as +-480 here, not NaN: the kernels assume finite weights.
//
// The compiled configurations are the Python lists gemv_fp8.py KERNELS_RNP / KERNELS_V2, passed by the loader
// as -DFP8LAB_GEMV_FP8_V1=GEMV_FP8(1,1,0)GEMV_FP8(2,1,0)... (one list, so the two sides cannot drift).
#include "gemv_common.cuh"

// One 64-byte chunk of k (4 weight words per row): 4 x R x NT MMAs (k16 each) into d.
// wr[r][h]: the chunk's 16 weight bytes of row tile r, rows g (h = 0) and g + 8 (h = 1);
// xc[nt][j]: the chunk's activations of token g of tile nt, 8 bf16 each (j = 0, 1).
// Weight word w covers x elements 4w..4w+3 = x words 2w, 2w+1 of the chunk.
template <int R, int NT>
__device__ __forceinline__ void fp8_chunk_mma(float (&d)[R][NT][4], const uint4 (&wr)[R][2], const uint4 (&xc)[NT][2]) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        u32 b0[NT], b1[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const uint4& xa = xc[nt][w >> 1];
            const u32 x01 = (w & 1) ? xa.z : xa.x, x23 = (w & 1) ? xa.w : xa.y;
            b0[nt] = prmt(x01, x23, 0x5410u);  // (x0, x2) pairs with weight bytes (b0, b2)
            b1[nt] = prmt(x01, x23, 0x7632u);  // (x1, x3) pairs with (b1, b3)
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            u32 a0, a1, a2, a3;
            e4m3x4_to_bf16(word_of(wr[r][0], w), a0, a2);  // row g:   (b0,b2) -> k 2t.., (b1,b3) -> k 2t+8..
            e4m3x4_to_bf16(word_of(wr[r][1], w), a1, a3);  // row g+8
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mma_bf16_16816(d[r][nt], a0, a1, a2, a3, b0[nt], b1[nt]);
        }
    }
}

// y = acc (block scales, already promoted) or acc * scale[n] (per channel).
template <bool BLOCK>
struct Fp8Out {
    const float* scale;
    __device__ float operator()(int n, float v) const { return BLOCK ? v : v * __ldg(scale + n); }
};

// The chunk c's vectors of a version-1 fragment / a version-2 iteration, gathered for fp8_chunk_mma.
template <int R, int NT, class WAt, class XAt>
__device__ __forceinline__ void fp8_chunk(float (&d)[R][NT][4], WAt w_at, XAt x_at) {
    uint4 wr[R][2], xc[NT][2];
#pragma unroll
    for (int r = 0; r < R; ++r) { wr[r][0] = w_at(r, 0); wr[r][1] = w_at(r, 1); }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) { xc[nt][0] = x_at(nt, 0); xc[nt][1] = x_at(nt, 1); }
    fp8_chunk_mma(d, wr, xc);
}

// =====================================================================================================
// Version 1: registers only. An iteration is one 128-wide k-block: lane (g, t) holds bytes c*64 + t*16 .. +15
// (c = 0, 1) of rows g and g+8 of each tile, and token g's activations at the same k.
// Launch: grid = ceil(N / (16 R)), block = 32 S, dynamic shared memory = S * R * NT * 4 * 32 * 4 bytes.
template <int R, int NT>
struct Fp8V1Frag {
    uint4 w[R][2][2];   // [tile][row half][chunk]
    uint4 x[NT][2][2];  // [token tile][chunk][16-byte half]
};

template <int R, int NT, bool BLOCK, bool PF>
__device__ __forceinline__ void gemv_fp8_body(const u8* __restrict__ W, const float* __restrict__ scale,
                                              const u16* __restrict__ X, u16* __restrict__ Y,
                                              int M, int N, int K) {
    extern __shared__ float red[];
    const GemvLane<R> L;
    const int KB = K >> 7;
    const u8* wrow[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) wrow[r][h] = W + (size_t)L.row(r, h, N) * K + L.t * 16;
    const u16* xrow[NT];
    bool xok[NT];
    activation_rows(X, M, K, L.g, L.t * 16, xrow, xok);
    float acc[R][NT][4];
    zero_tiles(acc);

    auto load = [&](int kb, Fp8V1Frag<R, NT>& f) {
        const int k0 = kb << 7;
        each_weight_chunk<R, 2>([&](int r, int h, int c) { f.w[r][h][c] = ld_stream16(wrow[r][h] + k0 + c * 64); });
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    if (xok[nt]) f.x[nt][c][j] = ld_cached16(xrow[nt] + k0 + c * 64 + j * 8);
                    else f.x[nt][c][j] = make_uint4(0u, 0u, 0u, 0u);
                }
    };
    auto body = [&](int kb, const Fp8V1Frag<R, NT>& f) {
        float part[R][NT][4];
        zero_tiles(part);
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            auto w_at = [&](int r, int h) { return f.w[r][h][c]; };
            auto x_at = [&](int nt, int j) { return f.x[nt][c][j]; };
            if (BLOCK) fp8_chunk(part, w_at, x_at);
            else fp8_chunk(acc, w_at, x_at);
        }
        if (BLOCK)  // FP32 promotion with this k-block's 128x128 weight scale
            promote_tiles(acc, part, [&](int r) { return __ldg(scale + (size_t)((L.n0 + 16 * r) >> 7) * KB + kb); });
    };
    kloop_registers<PF, Fp8V1Frag<R, NT>>(L.warp, L.S, KB, load, body);
    splitk_store(acc, red, L, M, N, Y, Fp8Out<BLOCK>{scale});
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

// =====================================================================================================
// Version 2: a cp.async ring in shared memory keeps the weight bytes in flight without holding them
// in registers, and each iteration can read 256 bytes of a row (C = 4) instead of 128.
//
// Why: at M = 1 a version-1 warp issues its loads, waits ~1 us, then spends a similar time widening
// and multiplying, with nothing in flight meanwhile. Its prefetching form (PF = 1) holds the next
// k-block in registers, which costs so many registers that fewer warps fit on the SM. Here each lane
// copies its own 16-byte chunks for the iteration D-1 steps ahead straight into shared memory
// (cp.async.cg: bypasses L1 and registers), then reads back the chunks of the current iteration
// (GemvRing, gemv_common.cuh). D = 0 keeps version 1's direct register loads (for comparison at the same C).
//
// C = 8 reads 512 contiguous bytes of each row per iteration (what a bf16 GEMV warp typically reads).
// Layout per iteration: lane (g, t) holds bytes c*64 + t*16 .. +15 of rows g and g+8 of each 16-row
// tile, c = 0..C-1: a 4-lane group reads C*64 contiguous bytes of one row (full 32-byte sectors).
// 128x128 block scales: one promotion per 128-wide k-block, i.e. after every second chunk.
// Launch: grid = ceil(N / (16 R)), block = 32 S,
//         dynamic shared memory = S * D * R*2*C * 512 (ring) + S * R * NT * 512 (split-K reduction).
template <int R, int NT, int C, int D, bool BLOCK>
__device__ __forceinline__ void gemv_fp8_v2_body(const u8* __restrict__ W, const float* __restrict__ scale,
                                                 const u16* __restrict__ X, u16* __restrict__ Y,
                                                 int M, int N, int K) {
    static_assert(C == 2 || C == 4 || C == 8, "C chunks of 64 bytes per row per iteration");
    extern __shared__ uint4 smem_v2[];
    constexpr int KW = 64 * C;        // k (= weight bytes) per row per iteration
    constexpr int NW = R * 2 * C;     // 16-byte weight chunks per lane per iteration
    const GemvLane<R> L;
    const int KB = K / KW;
    const int KS = K >> 7;            // 128-wide scale k-blocks per row (block mode)

    // Running pointers, advanced once per iteration (the loads then use immediate offsets only).
    const u8* wp[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) wp[r][h] = W + (size_t)L.row(r, h, N) * K + L.t * 16 + (size_t)L.warp * KW;
    // Tokens past M read token 0's activations, unmasked (activation_rows says why that is safe).
    const u16* xp[NT];
    bool xok[NT];
    activation_rows(X, M, K, L.g, L.t * 16 + (size_t)L.warp * KW, xp, xok);
    const size_t step = (size_t)L.S * KW;  // bytes of W (and elements of X) per iteration of a warp
    const float* sp[R];                    // block mode: this warp's first scale of each row tile
#pragma unroll
    for (int r = 0; r < R; ++r) sp[r] = scale + (size_t)(min(L.n0 + 16 * r, N - 1) >> 7) * KS + L.warp * (KW / 128);
    float acc[R][NT][4];
    zero_tiles(acc);

    GemvRing<D, NW> ring(smem_v2, L.warp, L.lane);
    auto issue = [&](uint4* dst) { issue_weights<R, C>(dst, wp, step); };  // the k-block at wp, then advance wp
    if (D > 0) ring.prologue(issue, L.warp, L.S, KB);
    for (int kb = L.warp; kb < KB; kb += L.S) {
        const uint4* cur = ring.base;
        if (D > 0) ring.refill(issue, kb, L.S, KB);
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
            cur = ring.wait_current();
        } else {
            each_weight_chunk<R, C>([&](int r, int h, int c) { wv[(r * 2 + h) * C + c] = ld_stream16(wp[r][h] + c * 64); });
            advance_rows(wp, step);
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
            if (BLOCK && (c & 1) == 0) zero_tiles(part);
            auto w_at = [&](int r, int h) { return wv[(r * 2 + h) * C + c]; };
            auto x_at = [&](int nt, int j) { return xv[nt][c][j]; };
            if (BLOCK) fp8_chunk(part, w_at, x_at);
            else fp8_chunk(acc, w_at, x_at);
            if (BLOCK && (c & 1) == 1)  // FP32 promotion with this 128-wide k-block's scale
                promote_tiles(acc, part, [&](int r) { return __ldg(sp[r] + (c >> 1)); });
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xp[nt] += step;
#pragma unroll
        for (int r = 0; r < R; ++r) sp[r] += (size_t)L.S * (KW / 128);
    }
    if (D > 0) cp_async_wait<0>();
    splitk_store(acc, GemvRing<D, NW>::end(smem_v2, L.S), L, M, N, Y, Fp8Out<BLOCK>{scale});
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

// The compiled configurations, from gemv_fp8.py (KERNELS_RNP: (R, NT, PF); KERNELS_V2: (R, NT, C, D)).
#if !defined(FP8LAB_GEMV_FP8_V1) || !defined(FP8LAB_GEMV_FP8_V2)
#error "the loader passes the instantiation lists (gemv_fp8.py KERNELS_RNP / KERNELS_V2) as -D defines"
#endif
FP8LAB_GEMV_FP8_V1
FP8LAB_GEMV_FP8_V2
