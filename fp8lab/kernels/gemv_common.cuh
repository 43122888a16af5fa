// gemv_common.cuh -- the skeleton every decode GEMV shares: W8A16 FP8 (gemv_fp8.cu) and W4A16 NVFP4
// (gemv_nvfp4.cu), versions 1 and 2, and the hardware-E2M1 NVFP4 GEMV (gemv_nvfp4_hw.cu). A GEMV file holds only
// its weight format's loads and widening. Version 3 (gemv_v3.cu) takes only zero_tiles: built on the other helpers
// (each_tile for its stream-K fixup) ptxas allocates its sm_121 registers differently, and its SASS stays as measured.
//
//   y[M, N] (bf16) = x[M, K] (bf16) . W[N, K]^T,  M = 1..16 tokens,  mma.sync.m16n8k16 bf16, fp32 accumulation
//
// Work split: a warp owns R 16-row tiles of W (the MMA's M); lane (g = lane / 4, t = lane % 4) holds rows
// n0 + 16 r + g and + 8 of each tile, and tokens 2t, 2t+1 of each 8-token tile (the MMA's N; NT tiles).
// A block of S warps splits K: warp w takes k-blocks w, w + S, w + 2S, ... and the S partial sums meet in shared
// memory at the end (split-K without atomics, `splitk_store`). The k loop comes in two forms:
//   version 1  `kloop_registers`: each k-block's bytes are loaded into registers; PF = 1 loads the next k-block
//              while this one is multiplied (twice the bytes in flight, at the price of registers);
//   version 2  `GemvRing`: a D-stage cp.async ring in shared memory per warp keeps the weight bytes in flight
//              without holding them in registers (D = 0: direct loads). Each lane copies its own 16-byte chunks
//              for the iteration D-1 steps ahead and reads back only what it copied itself, so
//              cp.async.wait_group is the only synchronisation needed.
#pragma once

#include "fp8_decode.cuh"

template <int R>
struct GemvLane {
    int lane, warp, S, g, t, n0;
    __device__ GemvLane()
        : lane(threadIdx.x & 31), warp(threadIdx.x >> 5), S(blockDim.x >> 5), g((threadIdx.x & 31) >> 2),
          t(threadIdx.x & 3), n0(blockIdx.x * (16 * R)) {}
    // Weight row of tile r, half h (rows past N are clamped for the loads and dropped at the store).
    __device__ int row(int r, int h, int N) const { return min(n0 + 16 * r + g + 8 * h, N - 1); }
};

// This lane's rows of an NVFP4 weight (K/2 packed bytes and K/16 scale codes per row): weight pointers at byte
// wl + ww of each row, scale pointers at code sl + sw (the lane's and the warp's parts, added in that order).
template <int R>
__device__ __forceinline__ void nvfp4_rows(const GemvLane<R>& L, const u8* W, const u8* SC, int N, int K, int wl,
                                           size_t ww, int sl, size_t sw, const u8* (&wp)[R][2], const u8* (&sp)[R][2]) {
    const int KH = K >> 1, KS = K >> 4;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = L.row(r, h, N);
            wp[r][h] = W + (size_t)row * KH + wl + ww;
            sp[r][h] = SC + (size_t)row * KS + sl + sw;
        }
}

// Activation rows of this lane: token g of each 8-token tile, at element `offset` of its row. A token past M reads
// token 0 (an MMA output column depends on its own B column only, so it feeds only outputs m >= M, never stored);
// ok[nt] says whether the token exists (version 1 loads zeros for the others).
template <int NT>
__device__ __forceinline__ void activation_rows(const u16* X, int M, int K, int g, size_t offset, const u16* (&xp)[NT],
                                                bool (&ok)[NT]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int m = nt * 8 + g;
        ok[nt] = m < M;
        xp[nt] = X + (size_t)(ok[nt] ? m : 0) * K + offset;
    }
}

// f(a, b, c) for a < A, b < B, c < C, unrolled: the loop nest of the weight chunks and of the accumulator tiles.
template <int A, int B, int C, class F>
__device__ __forceinline__ void unroll3(F f) {
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
        for (int b = 0; b < B; ++b)
#pragma unroll
            for (int c = 0; c < C; ++c) f(a, b, c);
}

// The running pointers of an NVFP4 lane whose warp w starts at k-block w (128 C elements, 64 C weight bytes per row)
// and steps S blocks: its weight rows, their scale codes, its activation rows, and the step of each. The sm_120a
// kernel uses it; version 2 writes the same walk out (its ring reads scale lines from a block's first code), because
// held in this struct its prologue registers are allocated differently and its recorded timings are of that form.
template <int R, int NT, int C>
struct Nvfp4Walk {
    const u8* wp[R][2];
    const u8* sp[R][2];
    const u16* xp[NT];
    bool xok[NT];
    size_t wstep, sstep, xstep;
    __device__ __forceinline__ Nvfp4Walk(const GemvLane<R>& L, const u8* W, const u8* SC, const u16* X, int M, int N,
                                         int K) {
        nvfp4_rows(L, W, SC, N, K, L.t * 16, (size_t)L.warp * (64 * C), 2 * L.t, (size_t)L.warp * (8 * C), wp, sp);
        activation_rows(X, M, K, L.g, L.t * 32 + (size_t)L.warp * (128 * C), xp, xok);
        wstep = (size_t)L.S * 64 * C, sstep = (size_t)L.S * 8 * C, xstep = (size_t)L.S * 128 * C;
    }
};

// f(r, h, c) for every 16-byte weight chunk c < C of the rows g (h = 0) and g + 8 (h = 1) of each row tile r.
template <int R, int C, class F>
__device__ __forceinline__ void each_weight_chunk(F f) { unroll3<R, 2, C>(f); }

// f(r, nt, i) for every accumulator of R row tiles x NT token tiles (C fragment element i: row g + 8 (i >> 1),
// token 2t + (i & 1)).
template <int R, int NT, class F>
__device__ __forceinline__ void each_tile(F f) { unroll3<R, NT, 4>(f); }

template <int R>
__device__ __forceinline__ void advance_rows(const u8* (&p)[R][2], size_t step) {
#pragma unroll
    for (int r = 0; r < R; ++r) { p[r][0] += step; p[r][1] += step; }
}

// NVFP4 direct loads (no ring) of one iteration: the lane's C weight chunks (16 bytes, 64 apart) of each row into
// wv[(r*2 + h)*C + c], their scale-code pairs (2 bytes, 8 apart) into sv[r][h][c]; then every pointer advances.
template <int R, int C>
__device__ __forceinline__ void nvfp4_load_direct(uint4 (&wv)[R * 2 * C], u32 (&sv)[R][2][C], const u8* (&wp)[R][2],
                                                  const u8* (&sp)[R][2], size_t wstep, size_t sstep) {
    each_weight_chunk<R, C>([&](int r, int h, int c) {
        wv[(r * 2 + h) * C + c] = ld_stream16(wp[r][h] + c * 64);
        sv[r][h][c] = ld_stream_u16(sp[r][h] + c * 8);
    });
    advance_rows(wp, wstep);
    advance_rows(sp, sstep);
}

// The activations of 128-k chunk c (NVFP4): 4 x 16 bytes (32 bf16) per token tile, through L1.
template <int NT>
__device__ __forceinline__ void load_act_chunk(uint4 (&xv)[NT][4], const u16* const (&xp)[NT], int c) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int w = 0; w < 4; ++w) xv[nt][w] = ld_cached16(xp[nt] + c * 128 + 8 * w);
}

// The bf16x2 scales of chunk c's two 16-blocks, both halves broadcast: sc[r][h][b] from scale2(two codes).
template <int R, int C, class Scale2>
__device__ __forceinline__ void chunk_scales(u32 (&sc)[R][2][2], const u32 (&sv)[R][2][C], int c, Scale2 scale2) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 s2 = scale2(sv[r][h][c]);
            sc[r][h][0] = bcast_lo(s2);
            sc[r][h][1] = bcast_hi(s2);
        }
}

// Version 2: copy this lane's C weight chunks of each row (r, h) at wp into ring stage dst (16-byte line
// (r*2 + h)*C + c of the lane), then advance every row pointer by `step` bytes.
template <int R, int C>
__device__ __forceinline__ void issue_weights(uint4* dst, const u8* (&wp)[R][2], size_t step) {
    each_weight_chunk<R, C>([&](int r, int h, int c) { cp_async16_l2(dst + ((r * 2 + h) * C + c) * 32, wp[r][h] + c * 64); });
    advance_rows(wp, step);
}

template <int R, int NT>
__device__ __forceinline__ void zero_tiles(float (&a)[R][NT][4]) {
    each_tile<R, NT>([&](int r, int nt, int i) { a[r][nt][i] = 0.f; });
}

// FP32 promotion of a k-block's partial sums with row tile r's scale (DeepGEMM): acc += part * scale(r).
template <int R, int NT, class Scale>
__device__ __forceinline__ void promote_tiles(float (&acc)[R][NT][4], const float (&part)[R][NT][4], Scale scale) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const float sc = scale(r);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][nt][i] = fmaf(part[r][nt][i], sc, acc[r][nt][i]);
    }
}

// Version 1's k loop. `load(kb, frag)` fills a Frag with k-block kb's bytes, `body(kb, frag)` multiplies them.
template <bool PF, class Frag, class Load, class Body>
__device__ __forceinline__ void kloop_registers(int warp, int S, int KB, Load load, Body body) {
    Frag cur;
    if (PF && warp < KB) load(warp, cur);
    for (int kb = warp; kb < KB; kb += S) {
        Frag nxt;
        if (PF) {
            if (kb + S < KB) load(kb + S, nxt);  // the next k-block in flight during this one's math
        } else {
            load(kb, cur);  // PF = false: fewer registers, more resident warps instead
        }
        body(kb, cur);
        if (PF) cur = nxt;
    }
}

// Version 2's ring: D stages x NSLOT 16-byte lines x 32 lanes of shared memory per warp; lane i's lines are
// 16i..16i+15 of each 512-byte row (conflict-free). The split-K reduction area follows the S rings (`end`).
template <int D, int NSLOT>
struct GemvRing {
    uint4* base;
    int slot;
    __device__ GemvRing(uint4* smem, int warp, int lane) : base(smem + (size_t)warp * (D > 0 ? D : 1) * NSLOT * 32 + lane), slot(0) {}
    __device__ uint4* stage(int s) const { return base + s * NSLOT * 32; }
    // The first D-1 k-blocks. Empty groups are committed too: wait_group<D-1> then always means "this iteration's data".
    template <class Issue>
    __device__ void prologue(Issue issue, int warp, int S, int KB) {
#pragma unroll
        for (int s = 0; s < D - 1; ++s) {
            if (warp + s * S < KB) issue(stage(s));
            cp_async_commit();
        }
    }
    // The k-block D-1 iterations ahead of kb, into the slot read last time.
    template <class Issue>
    __device__ void refill(Issue issue, int kb, int S, int KB) {
        if (kb + (D - 1) * S < KB) issue(stage(slot == 0 ? D - 1 : slot - 1));
        cp_async_commit();
    }
    // Wait for this iteration's lines; returns them (this lane's) and moves to the next slot.
    __device__ const uint4* wait_current() {
        cp_async_wait<(D > 0 ? D - 1 : 0)>();
        const uint4* cur = stage(slot);
        slot = slot + 1 == D ? 0 : slot + 1;
        return cur;
    }
    static __device__ float* end(uint4* smem, int S) { return reinterpret_cast<float*>(smem + (size_t)S * (D > 0 ? D : 0) * NSLOT * 32); }
};

// The NVFP4 GEMVs' output (versions 1, 2 and the hardware-E2M1 one): y = acc * global scale * 2**SHIFT, undoing the
// 2**-SHIFT that their bf16 block scales carry. Their kernels all take these parameters:
struct Nvfp4Out {
    float gs;
    __device__ explicit Nvfp4Out(const float* gscale)
        : gs(__ldg(gscale) * __uint_as_float(FP8LAB_POW2_BITS(FP8LAB_E2M1_GEMV_SHIFT))) {}
    __device__ float operator()(int, float v) const { return v * gs; }
};
#define GEMV_NVFP4_PARAMS                                                                                      \
    const u8* __restrict__ W, const u8* __restrict__ SC, const float* __restrict__ gscale,                     \
        const u16* __restrict__ X, u16* __restrict__ Y, int M, int N, int K
#define GEMV_NVFP4_ARGS W, SC, gscale, X, Y, M, N, K

// The split-K epilogue, the one every GEMV ends with: warp w stores its accumulators to red[w][idx][lane]
// (conflict-free), warp 0 sums the S partials in warp order and writes y[m, n] = bf16(out(n, sum)) for rows
// n < N and tokens m < M. C fragment: c0, c1 -> (row g, tokens 2t, 2t+1); c2, c3 -> (row g + 8, same tokens).
// `red` holds S * R * NT * 4 * 32 floats.
template <int R, int NT, class Out>
__device__ __forceinline__ void splitk_store(const float (&acc)[R][NT][4], float* red, const GemvLane<R>& L, int M, int N,
                                             u16* __restrict__ Y, Out out) {
    constexpr int NV = R * NT * 4;
    each_tile<R, NT>([&](int r, int nt, int i) { red[(L.warp * NV + (r * NT + nt) * 4 + i) * 32 + L.lane] = acc[r][nt][i]; });
    __syncthreads();
    if (L.warp != 0) return;
    each_tile<R, NT>([&](int r, int nt, int i) {
        const int idx = (r * NT + nt) * 4 + i;
        float v = 0.f;
        for (int w = 0; w < L.S; ++w) v += red[(w * NV + idx) * 32 + L.lane];
        const int n = L.n0 + 16 * r + L.g + 8 * (i >> 1);
        const int m = nt * 8 + 2 * L.t + (i & 1);
        if (n < N && m < M) Y[(size_t)m * N + n] = f32_to_bf16(out(n, v));
    });
}

