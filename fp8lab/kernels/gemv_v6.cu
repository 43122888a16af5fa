// gemv_v6.cu -- W8A16 decode GEMV, version 6: the weights never leave shared memory; the FP8 tensor cores do the work.
//
//   y[m, n] = scale[n] * sum_k x[m, k] * e4m3(w[n, k])        x bf16 [M, K] (M = 1..16), w e4m3 [N, K], y bf16 [M, N]
//
// Versions 1-5 widen every weight byte to bf16 in registers (loads, conversions, mma.sync: ~1.75 instructions per
// 16-byte code word on top of the loads), which on the H200 keeps them short of `_scaled_mm` tensorwise: cuBLASLt's
// FP8 GEMM copies weights to shared memory with TMA and multiplies them there (wgmma), with no per-byte instruction.
// Hopper's FP8 wgmma needs BOTH operands in FP8, so version 6 writes the bf16 activations as two E4M3 terms:
//
//   per token m and 128-wide k-block g:  s = amax / 448 (the lab's scale rule, fp8lab.scaling),  q = x / s (IEEE),
//   hi = e4m3(q) (RNE),  lo = e4m3(16 (q - hi)) (RNE; q - hi is exact),  x ~= s (hi + lo / 16)
//
// hi + lo / 16 keeps 8 significant bits where q is a normal E4M3 number (|x| >= 2**-6 s): the precision of bf16
// itself, so the error is about one more bf16 rounding of x (fp8lab.kernels.gemv_v6 measures it against the exact
// W8A16 answer). Below that, the split's absolute error is <= 2**-14 s (both terms subnormal).
//
//   gemv6_split        x -> X8 [NB, K] e4m3 (row 2m = hi of token m, row 2m + 1 = lo; rows 2M.. stay zero) and
//                      sx [M, K / 128] fp32. One CTA of 128 threads per (k-block, token). Launches its dependents at
//                      once (PDL): the GEMV's weight copies start while it runs.
//   gemv6_<mode>_n<NB>_m<MH>_s<ST>
//                      the GEMV: a persistent stream-K grid over units (row tile of 64 MH rows, k-block); per CTA a
//                      producer thread keeps ST stages in flight (TMA: the weight box 64 MH x 128 bytes and the X8 box
//                      NB x 128 bytes on one full barrier) and one consumer warpgroup issues, per stage and m64
//                      sub-tile, four m64n<NB>k32 e4m3 wgmma (A = weights, B = the NB activation rows), then promotes
//                      the k-block's fp32 partial sums: acc += (p_hi + p_lo / 16) * sx (* the weight block's scale in
//                      mode "block"). A tile cut between CTAs writes one slot per piece; the last piece to arrive sums
//                      the slots in piece order (the same bits whichever CTA finishes last), as gemm_w8a8_tma.cu does.
//
// Accumulator layout of m64nNk32 (thread t of the warpgroup, warp w = t / 32, g = (t % 32) / 4, q = t % 4):
// d[4j + 0/1] = row 16 w + g, columns 8 j + 2 q (+1); d[4j + 2/3] = row 16 w + g + 8, the same columns. Column 2c is
// the hi term of token c, 2c + 1 its lo term: one thread holds both terms of token c = 4 j + q.
//
// Shapes: N % (64 MH) == 0, K % 128 == 0 (the wrapper checks). sm_90a only (wgmma).

#include "quant_common.cuh"
#include "fp8_decode.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

// m64n8k32, m64n16k32 and m64n32k32 (wgmma.cuh writes the prefill widths with the same macro)
FP8LAB_WGMMA_E4M3(8, 4, "%0, %1, %2, %3", 4, 5, 6, FP8LAB_D4(0))
FP8LAB_WGMMA_E4M3(16, 8, "%0, %1, %2, %3, %4, %5, %6, %7", 8, 9, 10, FP8LAB_D4(0), FP8LAB_D4(4))
FP8LAB_WGMMA_E4M3(32, 16, FP8LAB_R00, 16, 17, 18, FP8LAB_D16(0))

template <int NB>
__device__ __forceinline__ void wgmma_nb(float (&d)[NB / 2], u64 da, u64 db, int scale_d) {
    if constexpr (NB == 8) wgmma_m64n8k32_e4m3(d, da, db, scale_d);
    else if constexpr (NB == 16) wgmma_m64n16k32_e4m3(d, da, db, scale_d);
    else wgmma_m64n32k32_e4m3(d, da, db, scale_d);
}

// ---- the split: x -> (hi, lo) E4M3 rows and one fp32 scale per (token, k-block) -----------------------------------
extern "C" __global__ void __launch_bounds__(128) gemv6_split(const u16* __restrict__ x, u8* __restrict__ x8,
                                                              float* __restrict__ sx, int M, int K) {
    pdl_launch_dependents();  // the GEMV may start now: its weight copies do not read what this kernel writes
    __shared__ float wmax[4];
    const int kb = blockIdx.x, m = blockIdx.y, t = threadIdx.x, KB = K >> 7;
    const int k = (kb << 7) + t;
    const float v = __uint_as_float(u32(x[(size_t)m * K + k]) << 16);
    float a = absmax_finite(0.f, v);  // NaN and Inf count as 0 (the "propagate" policy's amax)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = max_nonneg(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    if ((t & 31) == 0) wmax[t >> 5] = a;
    __syncthreads();
    const float amax = max_nonneg(max_nonneg(wmax[0], wmax[1]), max_nonneg(wmax[2], wmax[3]));
    const float s = f_pos(amax) ? f_div(amax, FP8LAB_E4M3_MAX) : 1.0f;
    const float q = f_div(v, s);
    const u32 hi = e4m3_encode_sw(q);
    const u32 lo = e4m3_encode_sw(f_mul(f_sub(q, e4m3_decode(hi)), 16.0f));
    x8[(size_t)(2 * m) * K + k] = (u8)hi;
    x8[(size_t)(2 * m + 1) * K + k] = (u8)lo;
    if (t == 0) sx[(size_t)m * KB + kb] = s;
}

// ---- the GEMV -------------------------------------------------------------------------------------------------------
// The CTA that owns unit u of U units cut into P equal ranges (range c = [c U / P, (c + 1) U / P)).
__device__ __forceinline__ int v6_owner(long long u, long long U, long long P) { return (int)(((u + 1) * P - 1) / U); }

template <int BLOCK, int NB, int MH, int ST>
__device__ __forceinline__ void gemv6_body(const TmaDesc* tmW, const TmaDesc* tmX, const float* __restrict__ sx,
                                           const float* __restrict__ wscale, u16* __restrict__ y, int M, int N, int K,
                                           float* __restrict__ ws, unsigned* __restrict__ cnt, int maxp) {
    static_assert(NB == 8 || NB == 16 || NB == 32, "NB: 8, 16 or 32 activation rows (2 per token)");
    constexpr int A_BYTES = MH * 64 * 128, B_BYTES = NB * 128, STAGE = A_BYTES + B_BYTES;
    constexpr int R = NB / 2;      // partial sums per thread per m64 sub-tile
    constexpr int J = NB / 8;      // n8 column groups: tokens 4 j + q
    extern __shared__ __align__(1024) u8 smem_v6[];
    __shared__ __align__(8) u64 bars[2 * ST];
    const u32 base = (smem_addr(smem_v6) + 1023u) & ~1023u;
    const u32 full0 = smem_addr(&bars[0]), empty0 = smem_addr(&bars[ST]);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int KB = K >> 7, T = N / (64 * MH);
    const long long U = (long long)T * KB, P = gridDim.x, c = blockIdx.x;
    const long long g0 = c * U / P, g1 = (c + 1) * U / P;

    if (tid == 128) {
        tma_prefetch_desc(tmW);
        tma_prefetch_desc(tmX);
        for (int s = 0; s < ST; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 4);  // one arrival per consumer warp
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (warp == 4) {  // ---------------- producer: one thread issues every copy ----------------
        if (lane == 0) {
            // The first ST weight boxes go out before the split kernel has finished (PDL); their X8 boxes after it.
            int s = 0;
            u32 ph = 0;
            const long long pre = min(g1 - g0, (long long)ST);
            for (long long g = g0; g < g0 + pre; ++g) {
                const int t = (int)(g / KB), kb = (int)(g - (long long)t * KB);
                const u32 fb = full0 + 8 * s, sA = base + s * STAGE;
                mbar_expect_tx(fb, STAGE);
                tma_load_2d(sA, tmW, fb, kb * 128, t * 64 * MH);
                ++s;
            }
            pdl_wait();
            s = 0;
            for (long long g = g0; g < g0 + pre; ++g) {
                const int t = (int)(g / KB), kb = (int)(g - (long long)t * KB);
                (void)t;
                tma_load_2d(base + s * STAGE + A_BYTES, tmX, full0 + 8 * s, kb * 128, 0);
                ++s;
            }
            if (s == ST) { s = 0; ph = 1; }
            for (long long g = g0 + pre; g < g1; ++g) {
                const int t = (int)(g / KB), kb = (int)(g - (long long)t * KB);
                mbar_wait(empty0 + 8 * s, ph ^ 1);
                const u32 fb = full0 + 8 * s, sA = base + s * STAGE;
                mbar_expect_tx(fb, STAGE);
                tma_load_2d(sA, tmW, fb, kb * 128, t * 64 * MH);
                tma_load_2d(sA + A_BYTES, tmX, fb, kb * 128, 0);
                if (++s == ST) { s = 0; ph ^= 1; }
            }
        }
        return;
    }

    // ---------------- consumers: one warpgroup ----------------
    pdl_wait();  // sx is the split kernel's output
    const int g = lane >> 2, q = lane & 3;
    float acc[MH][J][2];
    float pa[MH][R];             // one unit's partial sums
    float sc[J], sn[J];          // activation scales of the unit being promoted and of the next one
    int s = 0;
    u32 ph = 0;
    // this k-block's activation scale of token 4 j + q (0 past M: padding rows are zero anyway), times the weight
    // block's scale in mode "block" (the tile's rows lie in one 128-row block: 64 MH divides 128)
    auto load_scales = [&](float (&d)[J], long long u) {
        const int t = (int)(u / KB), kb = (int)(u - (long long)t * KB);
        const float wb = BLOCK ? __ldg(wscale + (size_t)((t * 64 * MH) >> 7) * KB + kb) : 1.f;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int tok = 4 * j + q;
            const float v = __ldg(sx + (size_t)(tok < M ? tok : 0) * KB + kb);  // no branch: wgmma may be in flight
            d[j] = tok < M ? v * wb : 0.f;
        }
    };
    auto issue = [&](float (&p)[MH][R], int st) {
        const u32 sA = base + st * STAGE, sB = sA + A_BYTES;
        const u64 db = make_desc(sB);
#pragma unroll
        for (int h = 0; h < MH; ++h) fence_regs(p[h]);
        wgmma_fence();
#pragma unroll
        for (int h = 0; h < MH; ++h) {
            const u64 da = make_desc(sA + h * (64 * 128));
#pragma unroll
            for (int k = 0; k < 4; ++k) wgmma_nb<NB>(p[h], da + 2 * k, db + 2 * k, k > 0);
        }
        wgmma_commit();
    };
    auto promote = [&](float (&p)[MH][R]) {
#pragma unroll
        for (int h = 0; h < MH; ++h) fence_regs(p[h]);
#pragma unroll
        for (int h = 0; h < MH; ++h)
#pragma unroll
            for (int j = 0; j < J; ++j) {
                acc[h][j][0] = fmaf(fmaf(p[h][4 * j + 1], 0.0625f, p[h][4 * j]), sc[j], acc[h][j][0]);
                acc[h][j][1] = fmaf(fmaf(p[h][4 * j + 3], 0.0625f, p[h][4 * j + 2]), sc[j], acc[h][j][1]);
            }
    };
    auto zero_acc = [&]() {
#pragma unroll
        for (int h = 0; h < MH; ++h)
#pragma unroll
            for (int j = 0; j < J; ++j) acc[h][j][0] = acc[h][j][1] = 0.f;
    };
    // The end of this CTA's piece of tile t: store (one piece) or fix up (several), then zero the accumulators.
    auto finish = [&](int t) {
        constexpr int NA = MH * J * 2;
        float* a = &acc[0][0][0];
        const long long u0 = (long long)t * KB;
        const int first = v6_owner(u0, U, P), np = v6_owner(u0 + KB - 1, U, P) - first + 1;
        bool store = np == 1;
        if (np > 1) {
            const int piece = (int)c - first;
            float* mine = ws + ((size_t)t * maxp + piece) * (NA * 128) + tid;
#pragma unroll
            for (int i = 0; i < NA; ++i) __stcg(mine + i * 128, a[i]);
            named_sync(1, 128);  // every thread's slot writes, ordered before thread 0's release
            bool last = false;
            if (tid == 0) {
                last = arrive_release(reinterpret_cast<int*>(cnt) + t) == np - 1;
                if (last) {
                    acquire_after_arrival();  // every other piece's slots are visible to this CTA from here
                    cnt[t] = 0u;              // the next launch finds it zero
                }
            }
            store = named_sync_or(1, 128, last);
            if (store) {  // the slots in piece order (the same bits whichever piece came last), 4 loads in flight
                const float* slots = ws + (size_t)t * maxp * (NA * 128) + tid;
#pragma unroll
                for (int i = 0; i < NA; ++i) a[i] = 0.f;
                for (int p0 = 0; p0 < np; p0 += 4) {
                    float v[4][NA];
#pragma unroll
                    for (int k = 0; k < 4; ++k)
#pragma unroll
                        for (int i = 0; i < NA; ++i)
                            v[k][i] = p0 + k < np ? __ldcg(slots + (size_t)(p0 + k) * (NA * 128) + i * 128) : 0.f;
#pragma unroll
                    for (int k = 0; k < 4; ++k)
#pragma unroll
                        for (int i = 0; i < NA; ++i) a[i] += v[k][i];
                }
            }
        }
        if (store) {
#pragma unroll
            for (int h = 0; h < MH; ++h) {
                const int row = t * 64 * MH + h * 64 + warp * 16 + g;
                const float w0 = BLOCK ? 1.f : __ldg(wscale + row), w8 = BLOCK ? 1.f : __ldg(wscale + row + 8);
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    const int tok = 4 * j + q;
                    if (tok < M) {
                        y[(size_t)tok * N + row] = f32_to_bf16(acc[h][j][0] * w0);
                        y[(size_t)tok * N + row + 8] = f32_to_bf16(acc[h][j][1] * w8);
                    }
                }
            }
        }
        zero_acc();
    };
    auto ends_piece = [&](long long u) { return u == g1 - 1 || (u + 1) % KB == 0; };

    zero_acc();
    if (g0 < g1) load_scales(sn, g0);
    for (long long u = g0; u < g1; ++u) {
#pragma unroll
        for (int j = 0; j < J; ++j) sc[j] = sn[j];
        if (u + 1 < g1) load_scales(sn, u + 1);  // in flight while this unit waits and multiplies
        mbar_wait(full0 + 8 * s, ph);
        issue(pa, s);
        wgmma_wait<0>();
        if (lane == 0) mbar_arrive(empty0 + 8 * s);
        if (++s == ST) { s = 0; ph ^= 1; }
        promote(pa);
        if (ends_piece(u)) finish((int)(u / KB));
    }
}

// One kernel per (mode, NB, MH, ST); the list is gemv_v6.KERNELS (-DFP8LAB_GEMV_V6=GEMV6(0,8,2,4)...).
#define GEMV6(BL, NB, MH, ST)                                                                                          \
    extern "C" __global__ void __launch_bounds__(160) gemv6_##BL##_n##NB##_m##MH##_s##ST(                             \
        const __grid_constant__ TmaDesc tmW, const __grid_constant__ TmaDesc tmX, const float* __restrict__ sx,       \
        const float* __restrict__ wscale, u16* __restrict__ y, int M, int N, int K, float* __restrict__ ws,          \
        unsigned* __restrict__ cnt, int maxp) {                                                                        \
        gemv6_body<BL, NB, MH, ST>(&tmW, &tmX, sx, wscale, y, M, N, K, ws, cnt, maxp);                                 \
    }
#ifdef FP8LAB_GEMV_V6
FP8LAB_GEMV_V6
#endif
