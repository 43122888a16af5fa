// gemv_v6.cu -- W8A16 decode GEMV, version 6: the weights never leave shared memory; the FP8 tensor cores do the work.
//
//   y[m, n] = scale[n] * sum_k x[m, k] * e4m3(w[n, k])        x bf16 [M, K] (M = 1..16), w e4m3 [N, K], y bf16 [M, N]
//
// Versions 1-5 widen every weight byte to bf16 in registers (loads, conversions, mma.sync: ~1.75 instructions per
// 16-byte code word on top of the loads), which on the H200 keeps them short of `_scaled_mm` tensorwise: cuBLASLt's
// FP8 GEMM copies weights to shared memory with TMA and multiplies them there (wgmma), with no per-byte instruction.
// Hopper's FP8 wgmma needs BOTH operands in FP8, so version 6 writes the bf16 activations as two E4M3 terms:
//
//   per token m and 128-wide k-block:  e = ceil(log2 amax) - 8 (fp8lab.scaling.mx_scale_exponent, rule "ceil", on
//   the group's finite amax; a power of two, so q = x / 2**e is exact and q <= 256 never saturates),
//   hi = e4m3(q) (RNE),  lo = e4m3(16 (q - hi)) (RNE; q - hi is exact),  x ~= 2**e (hi + lo / 16)
//
// hi + lo / 16 keeps 8 significant bits where q is a normal E4M3 number (|q| >= 2**-6): the precision of bf16
// itself, so the error is about one more bf16 rounding of x (fp8lab.kernels.gemv_v6 measures it against the exact
// W8A16 answer). Below that, the split's absolute error is <= 2**-14 * 2**e (both terms subnormal).
//
//   split_group4       the split of one (token, k-block) group by one warp, four elements per lane: shared by the
//                      two paths below, so the bit-exact test of gemv6_split covers the fused one too.
//   gemv6_split        x -> X8 [NB, K] e4m3 (row 2m = hi of token m, row 2m + 1 = lo; rows 2M.. stay zero) and
//                      sx [M, K / 128] fp32 (2**e). One warp per (k-block, token). Launches its dependents at once
//                      (PDL): the GEMV's weight copies start while it runs.
//   gemv6_<mode>_n<NB>_m<MH>_s<ST>_x<FX>
//                      the GEMV: a persistent stream-K grid over units (row tile of 64 MH rows, k-block), or one CTA per
//                      whole tile; per CTA a producer thread keeps ST stages of weights in flight (TMA boxes of
//                      64 MH x 128 bytes on the stage's full barrier) and one consumer warpgroup issues, per stage and
//                      m64 sub-tile, four m64n<NB>k32 e4m3 wgmma (A = weights, B = the NB activation rows), then
//                      promotes the k-block's fp32 partial sums: acc += (p_hi + p_lo / 16) * 2**e (* the weight
//                      block's scale in mode "block"). FX = 0: the X8 rows come by TMA from gemv6_split's output (two
//                      kernels); FX = 1: the consumers split x themselves, one unit ahead, while the tensor cores
//                      multiply the current one (one kernel, x read as bf16). A tile cut between CTAs writes one slot
//                      per piece; the last piece to arrive sums the slots in piece order (the same bits whichever CTA
//                      finishes last), as gemm_w8a8_tma.cu does.
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

// ---- the split: one (token, k-block) group of 128 bf16 -> hi and lo E4M3 codes and the group's exponent ---------------
__device__ __forceinline__ float f16_to_f32(u32 h) {
    float f;
    asm("{ .reg .b16 t; cvt.u16.u32 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "r"(h));
    return f;
}
// 2**e of scaling.mx_scale_exponent(amax, E4M3, "ceil"): e = ceil(log2 amax) - emax on the bits, clamped to
// [-127, 127 - emax]; amax == 0 -> -127. Returns e.
__device__ __forceinline__ int ceil_scale_exponent(float amax) {
    const u32 b = __float_as_uint(amax), E = b >> 23, m = b & 0x7FFFFFu;
    const int fl = E ? (int)E - 127 : 31 - __clz(m) - 149;        // floor(log2 amax) (subnormals on their bits)
    const int ce = fl + (E ? (m != 0) : ((m & (m - 1)) != 0));    // up unless a power of two
    const int e = b == 0 ? -127 : ce - FP8LAB_E4M3_EMAX;
    return min(max(e, -127), 127 - FP8LAB_E4M3_EMAX);
}
// 2**e as an fp32, e in [-127, 127] (2**-127 is subnormal: its bit pattern directly)
__device__ __forceinline__ float pow2f(int e) { return __uint_as_float(e > -127 ? (u32)(127 + e) << 23 : 0x00400000u); }
// Lane l holds elements 4l .. 4l + 3 of the group (raw: four bf16); every lane of the warp takes part. Returns the
// lane's four hi codes and four lo codes (byte i = element 4l + i) and the group's e. NaN elements give the NaN code
// in both terms (the "propagate" policy: amax ignores them); +-Inf saturates to +-448 (formats.encode, saturate=True).
__device__ __forceinline__ void split_group4(uint2 raw, u32& hi4, u32& lo4, int& e) {
    const float v[4] = {bf16_lo(raw.x), bf16_hi(raw.x), bf16_lo(raw.y), bf16_hi(raw.y)};
    float a = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) a = absmax_finite(a, v[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = max_nonneg(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    e = ceil_scale_exponent(a);
    const float inv = __uint_as_float((u32)(127 - e) << 23);      // 2**-e (normal: 127 - e in [8, 254])
    float q[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = f_mul(v[i], inv);           // exact: a power of two
    const u32 h01 = e4m3x2_hw(q[1], q[0]), h23 = e4m3x2_hw(q[3], q[2]);
    const u32 d01 = e4m3x2_to_f16x2(h01), d23 = e4m3x2_to_f16x2(h23);
    const float hv[4] = {f16_to_f32(d01 & 0xFFFFu), f16_to_f32(d01 >> 16), f16_to_f32(d23 & 0xFFFFu), f16_to_f32(d23 >> 16)};
    float r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = f_mul(f_sub(q[i], hv[i]), 16.0f);  // q - hi is exact; * 16 exact
    const u32 l01 = e4m3x2_hw(r[1], r[0]), l23 = e4m3x2_hw(r[3], r[2]);
    hi4 = (h01 & 0xFFFFu) | (h23 << 16);
    lo4 = (l01 & 0xFFFFu) | (l23 << 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // the contract's NaN code (the hardware's NaN byte is not promised)
        const u32 nan = q[i] != q[i] ? (u32)FP8LAB_E4M3_NAN_CODE << (8 * i) : 0u, keep = q[i] != q[i] ? ~(0xFFu << (8 * i)) : ~0u;
        hi4 = (hi4 & keep) | nan;
        lo4 = (lo4 & keep) | nan;
    }
}
// The four bf16 of lane `lane` in token m's group kb (m clamped to a real token: the caller zeroes padding rows)
__device__ __forceinline__ uint2 load_group4(const u16* __restrict__ x, int m, int kb, int K, int lane) {
    return __ldg(reinterpret_cast<const uint2*>(x + (size_t)m * K + (kb << 7) + 4 * lane));
}

extern "C" __global__ void __launch_bounds__(128) gemv6_split(const u16* __restrict__ x, u8* __restrict__ x8,
                                                              float* __restrict__ sx, int M, int K) {
    pdl_launch_dependents();  // the GEMV may start now: its weight copies do not read what this kernel writes
    const int kb = blockIdx.x, lane = threadIdx.x & 31, m = blockIdx.y * 4 + (threadIdx.x >> 5), KB = K >> 7;
    if (m >= M) return;
    u32 hi4, lo4;
    int e;
    split_group4(load_group4(x, m, kb, K, lane), hi4, lo4, e);
    *reinterpret_cast<u32*>(x8 + (size_t)(2 * m) * K + (kb << 7) + 4 * lane) = hi4;
    *reinterpret_cast<u32*>(x8 + (size_t)(2 * m + 1) * K + (kb << 7) + 4 * lane) = lo4;
    if (lane == 0) sx[(size_t)m * KB + kb] = pow2f(e);
}

// ---- the GEMV -------------------------------------------------------------------------------------------------------
// The CTA that owns unit u of U units cut into P equal ranges (range c = [c U / P, (c + 1) U / P)): the stream-K owner
// of gemv_v3_common.cuh's v3_owner (grains of one unit) and gemm_w8a8_tma.cu's streamk_owner; gemv_v6.grid_plan is its
// Python side (through gemv_v3.streamk_plan).
__device__ __forceinline__ int v6_owner(long long u, long long U, long long P) { return (int)(((u + 1) * P - 1) / U); }

template <int BLOCK, int NB, int MH, int ST, int FX>
__device__ __forceinline__ void gemv6_body(const TmaDesc* tmW, const TmaDesc* tmX, const u16* __restrict__ x,
                                           const float* __restrict__ sx,
                                           const float* __restrict__ wscale, u16* __restrict__ y, int M, int N, int K,
                                           float* __restrict__ ws, unsigned* __restrict__ cnt, int maxp) {
    static_assert(NB == 8 || NB == 16 || NB == 32, "NB: 8, 16 or 32 activation rows (2 per token)");
    constexpr int A_BYTES = MH * 64 * 128, B_BYTES = NB * 128, STAGE = A_BYTES + B_BYTES;
    constexpr int TX = FX ? A_BYTES : STAGE;  // the bytes TMA brings per stage (FX: the weights only)
    constexpr int R = NB / 2;      // partial sums per thread per m64 sub-tile
    constexpr int J = NB / 8;      // n8 column groups: tokens 4 j + q
    extern __shared__ __align__(1024) u8 smem_v6[];
    __shared__ __align__(8) u64 bars[2 * ST];
    __shared__ float xscale[FX ? ST : 1][NB / 2];  // FX: 2**e of each token's group, per stage
    const u32 base = (smem_addr(smem_v6) + 1023u) & ~1023u;
    const u32 full0 = smem_addr(&bars[0]), empty0 = smem_addr(&bars[ST]);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int KB = K >> 7, T = N / (64 * MH);
    const long long U = (long long)T * KB, P = gridDim.x, c = blockIdx.x;
    const long long g0 = c * U / P, g1 = (c + 1) * U / P;

    if (tid == 128) {
        tma_prefetch_desc(tmW);
        if (!FX) tma_prefetch_desc(tmX);
        for (int s = 0; s < ST; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 4);  // one arrival per consumer warp
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (warp == 4) {  // ---------------- producer: one thread issues every copy ----------------
        if (lane == 0) {
            int s = 0;
            u32 ph = 0;
            if (FX) {  // weights only: nothing here depends on the previous kernel
                for (long long g = g0; g < g1; ++g) {
                    const int t = (int)(g / KB), kb = (int)(g - (long long)t * KB);
                    mbar_wait(empty0 + 8 * s, ph ^ 1);
                    const u32 fb = full0 + 8 * s;
                    mbar_expect_tx(fb, TX);
                    tma_load_2d(base + s * STAGE, tmW, fb, kb * 128, t * 64 * MH);
                    if (++s == ST) { s = 0; ph ^= 1; }
                }
                return;
            }
            // The first ST weight boxes go out before the split kernel has finished (PDL); their X8 boxes after it.
            const long long pre = min(g1 - g0, (long long)ST);
            for (long long g = g0; g < g0 + pre; ++g) {
                const int t = (int)(g / KB), kb = (int)(g - (long long)t * KB);
                const u32 fb = full0 + 8 * s, sA = base + s * STAGE;
                mbar_expect_tx(fb, TX);
                tma_load_2d(sA, tmW, fb, kb * 128, t * 64 * MH);
                ++s;
            }
            pdl_wait();
            s = 0;
            for (long long g = g0; g < g0 + pre; ++g) {
                const int kb = (int)(g % KB);
                tma_load_2d(base + s * STAGE + A_BYTES, tmX, full0 + 8 * s, kb * 128, 0);
                ++s;
            }
            if (s == ST) { s = 0; ph = 1; }
            for (long long g = g0 + pre; g < g1; ++g) {
                const int t = (int)(g / KB), kb = (int)(g - (long long)t * KB);
                mbar_wait(empty0 + 8 * s, ph ^ 1);
                const u32 fb = full0 + 8 * s, sA = base + s * STAGE;
                mbar_expect_tx(fb, TX);
                tma_load_2d(sA, tmW, fb, kb * 128, t * 64 * MH);
                tma_load_2d(sA + A_BYTES, tmX, fb, kb * 128, 0);
                if (++s == ST) { s = 0; ph ^= 1; }
            }
        }
        return;
    }

    // ---------------- consumers: one warpgroup ----------------
    pdl_wait();  // x (FX) or sx and X8 are the previous kernel's output
    const int g = lane >> 2, q = lane & 3;
    float acc[MH][J][2];
    float pa[MH][R];             // one unit's partial sums
    float sc[J], sn[J];          // activation scales of the unit being promoted and of the next one
    int s = 0;
    u32 ph = 0;
    // this k-block's activation scale of token 4 j + q (0 past M: padding rows are zero anyway), times the weight
    // block's scale in mode "block" (the tile's rows lie in one 128-row block: 64 MH divides 128)
    auto load_scales = [&](float (&d)[J], long long u, int st) {
        const int t = (int)(u / KB), kb = (int)(u - (long long)t * KB);
        const float wb = BLOCK ? __ldg(wscale + (size_t)((t * 64 * MH) >> 7) * KB + kb) : 1.f;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int tok = 4 * j + q;
            // no branch: wgmma may be in flight
            const float v = FX ? xscale[st][tok] : __ldg(sx + (size_t)(tok < M ? tok : 0) * KB + kb);
            d[j] = tok < M ? v * wb : 0.f;
        }
    };
    // FX: split unit u's x group into stage st (B rows, swizzled as the TMA would write them, and xscale[st]).
    // Warp w takes tokens w, w + 4, ...; lane l elements 4l .. 4l + 3. Tokens past M are written as zeros.
    uint2 xr[NB / 8];
    auto load_x = [&](long long u) {
        const int kb = (int)(u % KB);
#pragma unroll
        for (int i = 0; i < NB / 8; ++i) {
            const int m = warp + 4 * i;
            xr[i] = load_group4(x, m < M ? m : 0, kb, K, lane);
        }
    };
    auto split_into = [&](int st) {
        const u32 sB = base + st * STAGE + A_BYTES;
#pragma unroll
        for (int i = 0; i < NB / 8; ++i) {
            const int m = warp + 4 * i;
            u32 hi4, lo4;
            int e;
            split_group4(xr[i], hi4, lo4, e);
            const bool real = m < M;
            const int rh = 2 * m, rl = 2 * m + 1, ch = lane >> 2;
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(sB + rh * 128 + ((ch ^ (rh & 7)) << 4) + (lane & 3) * 4),
                         "r"(real ? hi4 : 0u) : "memory");
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(sB + rl * 128 + ((ch ^ (rl & 7)) << 4) + (lane & 3) * 4),
                         "r"(real ? lo4 : 0u) : "memory");
            xscale[st][m] = real ? pow2f(e) : 0.f;  // every lane stores the same value: no branch
        }
        fence_proxy_async();  // these generic-proxy writes, before the wgmma (async proxy) reads them
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
    if (FX) {
        if (g0 < g1) {
            load_x(g0);
            split_into(0);
            if (g0 + 1 < g1) load_x(g0 + 1);
        }
        for (long long u = g0; u < g1; ++u) {
            mbar_wait(full0 + 8 * s, ph);
            named_sync(2, 128);  // unit u's B rows and scales (written by all four warps) are complete
            load_scales(sc, u, s);
            issue(pa, s);
            const int sn1 = s + 1 == ST ? 0 : s + 1;
            if (u + 1 < g1) {  // the next unit's split, while this one multiplies (its stage's B rows are free: the
                split_into(sn1);  // wgmma that last read them finished ST - 1 units ago)
                if (u + 2 < g1) load_x(u + 2);
            }
            wgmma_wait<0>();
            if (lane == 0) mbar_arrive(empty0 + 8 * s);
            s = sn1;
            if (s == 0) ph ^= 1;
            promote(pa);
            if (ends_piece(u)) finish((int)(u / KB));
        }
        return;
    }
    if (g0 < g1) load_scales(sn, g0, 0);
    for (long long u = g0; u < g1; ++u) {
#pragma unroll
        for (int j = 0; j < J; ++j) sc[j] = sn[j];
        if (u + 1 < g1) load_scales(sn, u + 1, 0);  // in flight while this unit waits and multiplies
        mbar_wait(full0 + 8 * s, ph);
        issue(pa, s);
        wgmma_wait<0>();
        if (lane == 0) mbar_arrive(empty0 + 8 * s);
        if (++s == ST) { s = 0; ph ^= 1; }
        promote(pa);
        if (ends_piece(u)) finish((int)(u / KB));
    }
}

// One kernel per (mode, NB, MH, ST, FX); the list is gemv_v6.KERNELS (-DFP8LAB_GEMV_V6=GEMV6(0,8,2,4,1)...).
#define GEMV6(BL, NB, MH, ST, FX)                                                                                      \
    extern "C" __global__ void __launch_bounds__(160) gemv6_##BL##_n##NB##_m##MH##_s##ST##_x##FX(                     \
        const __grid_constant__ TmaDesc tmW, const __grid_constant__ TmaDesc tmX, const u16* __restrict__ x,          \
        const float* __restrict__ sx,                                                                                  \
        const float* __restrict__ wscale, u16* __restrict__ y, int M, int N, int K, float* __restrict__ ws,          \
        unsigned* __restrict__ cnt, int maxp) {                                                                        \
        gemv6_body<BL, NB, MH, ST, FX>(&tmW, &tmX, x, sx, wscale, y, M, N, K, ws, cnt, maxp);                                 \
    }
#ifdef FP8LAB_GEMV_V6
FP8LAB_GEMV_V6
#endif
