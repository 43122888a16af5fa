// gemv_v3_common.cuh -- what the decode GEMV versions 3 (gemv_v3.cu, a register ring of plain loads) and 4
// (gemv_v4.cu, a shared-memory ring filled by the bulk copy engine) share: the packed stream's widening, one
// chunk on the tensor cores, the epilogues, the stream-K owner arithmetic and fix-up, and the fused RMSNorm
// staging. gemv_v3.cu's header explains the packing, the bit moves and the work split; gemv_v3.py packs.
#pragma once

#include "gemv_common.cuh"  // zero_tiles (and fp8_decode.cuh)

#define V3_FP8C 0   // FP8, per-channel scales (applied at the end)
#define V3_FP8B 1   // FP8, 128x128 block scales (fp32 promotion every 128 k)
#define V3_NVFP4 2  // NVFP4
#define V3_EPI_STORE 0
#define V3_EPI_RESIDUAL 1
#define V3_EPI_SILU_MUL 2

// ---- widening ----------------------------------------------------------------------------------------------
// Four pre-scrambled E4M3 codes -> (e0, e1) and (e2, e3) as exact bf16x2 (point 3 of gemv_v3.cu's header).
__device__ __forceinline__ void v3_e4m3x4(u32 w, u32& p01, u32& p23) {
    const u32 a = w & 0x87F087F0u;
    const u32 b = ((w & 0x080F080Fu) << 4) | ((w >> 4) & 0x07000700u);
    p01 = bf16x2_mul(a, FP8LAB_BF16X2_E4M3_UNBIAS);
    p23 = bf16x2_mul(b, FP8LAB_BF16X2_E4M3_UNBIAS);
}

// ---- one chunk on the tensor cores ---------------------------------------------------------------------------
// FP8: chunk c of the unit, row tile r: weight loads wg (rows g) and w8 (rows g + 8), 16 bytes each; activations
// xa[nt][2] (16 consecutive bf16 of token nt*8 + g). 4 MMA steps per token tile.
template <int NT>
__device__ __forceinline__ void v3_fp8_chunk(float (&d)[NT][4], const uint4& wg, const uint4& w8, const uint4 (&xa)[NT][2]) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        u32 a0, a1, a2, a3;
        v3_e4m3x4(word_of(wg, s), a0, a2);
        v3_e4m3x4(word_of(w8, s), a1, a3);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const uint4& x = xa[nt][s >> 1];
            const u32 b0 = (s & 1) ? x.z : x.x, b1 = (s & 1) ? x.w : x.y;
            mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);
        }
    }
}

// NVFP4: half q (steps 4q .. 4q + 3) of chunk c, row tile r: 16 bytes w (one word per step, rows g and g + 8),
// the bf16x2 scale pair sc = (scale of row g, scale of row g + 8) * 2**118 of this 16-block, activations xa[nt][4]
// (four 16-byte loads; loads 2q and 2q + 1, the 16 consecutive bf16 of this half's block, belong to this half).
template <int NT>
__device__ __forceinline__ void v3_nvfp4_half(float (&d)[NT][4], const uint4& w, u32 sc, int q, const uint4 (&xa)[NT][4]) {
    const u32 sg = bcast_lo(sc), s8 = bcast_hi(sc);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        u32 p[4];
        e2m1x8_to_bf16(word_of(w, s), p);  // (row g k0,k1) (row g+8 k0,k1) (row g k2,k3) (row g+8 k2,k3)
        const u32 a0 = bf16x2_mul(p[0], sg), a1 = bf16x2_mul(p[1], s8);
        const u32 a2 = bf16x2_mul(p[2], sg), a3 = bf16x2_mul(p[3], s8);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const uint4& x = xa[nt][2 * q + (s >> 1)];
            const u32 b0 = (s & 1) ? x.z : x.x, b1 = (s & 1) ? x.w : x.y;
            mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);
        }
    }
}

// ---- the epilogue's arithmetic ---------------------------------------------------------------------------------
struct V3Out {
    const float* cs;   // FP8 channel: scale per packed row; NVFP4: [global scale]; FP8 block: unused
    const u16* res;    // residual [M, nout] (EPI_RESIDUAL)
    u16* y;
    int M, nout;
};

// The finished value of packed row `row`, token m: scale it (per channel or global); block scales were promoted.
template <int FMT>
__device__ __forceinline__ float v3_scaled(const V3Out& o, int row, float v) {
    if (FMT == V3_FP8C) return v * __ldg(o.cs + row);
    if (FMT == V3_NVFP4) return v * (__ldg(o.cs) * __uint_as_float(FP8LAB_POW2_BITS(FP8LAB_E2M1_GEMV_SHIFT)));
    return v;
}

__device__ __forceinline__ float v3_silu(float g) { return g / (1.f + expf(-g)); }

// Store a finished tile (this lane's fragment). Rows: group * 16R + 16r + g + 8(i >> 1); tokens nt*8 + 2t + (i & 1).
template <int FMT, int R, int NT, int EPI>
__device__ __forceinline__ void v3_store(const V3Out& o, const float (&v)[R][NT][4], int grp, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int row0 = (grp * R + r) * 16 + g;
            if (EPI == V3_EPI_SILU_MUL) {  // row g: gate row j, row g + 8: up row j, j = (grp R + r) * 8 + g
                const int col = (grp * R + r) * 8 + g;
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int m = nt * 8 + 2 * t + i;
                    const float gate = v3_scaled<FMT>(o, row0, v[r][nt][i]);
                    const float up = v3_scaled<FMT>(o, row0 + 8, v[r][nt][i + 2]);
                    if (col < o.nout && m < o.M) o.y[(size_t)m * o.nout + col] = f32_to_bf16(v3_silu(gate) * up);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int row = row0 + 8 * (i >> 1), m = nt * 8 + 2 * t + (i & 1);
                    if (row < o.nout && m < o.M) {
                        float val = v3_scaled<FMT>(o, row, v[r][nt][i]);
                        if (EPI == V3_EPI_RESIDUAL) val += bf16_lo(o.res[(size_t)m * o.nout + row]);
                        o.y[(size_t)m * o.nout + row] = f32_to_bf16(val);
                    }
                }
            }
        }
}

// Warp wg's range of units [u0, u1): the U units cut into grains of `gran` units, grain ranges split evenly over the
// Wt warps. gran = 1: stream-K (any unit boundary; row groups split between warps are finished by v3_finish's fix-up);
// gran = KU: whole row groups per warp (no group is ever split: no workspace, no fence, no atomic); gran = KU / S:
// split-K in S segments per row group (the fix-up finishes each group from its segments' warps).
__device__ __forceinline__ void v3_range(int wg, int Wt, int U, int gran, long long& u0, long long& u1) {
    const long long NG = U / gran;
    u0 = (long long)wg * NG / Wt * gran;
    u1 = (long long)(wg + 1) * NG / Wt * gran;
}

// The warp whose range holds unit u: the largest w with floor(w NG / Wt) <= u / gran, NG = U / gran grains (gran = 1:
// stream-K). Every warp must hold >= 1 grain (Wt <= NG, the Python side's grid): an empty warp between a group's
// owners would be counted as a contributor and never arrive.
__device__ __forceinline__ int v3_owner(long long u, int U, int Wt, int gran) {
    return (int)(((u / gran + 1) * Wt - 1) / (U / gran));
}

// Group `grp` ends in this warp's range: store it, or (split between warps) the stream-K fixup. `span`: the index of
// the span of KU units whose owners share the group (the group itself in versions 3 and 4; version 5's band of row
// groups, whose units are interleaved).
template <int FMT, int R, int NT, int EPI>
__device__ __forceinline__ void v3_finish_span(const V3Out& o, const float (&acc)[R][NT][4], int grp, int span,
                                               long long u0, long long u1, int KU, int U, int Wt, int wg, int lane,
                                               float* __restrict__ ws, int* __restrict__ cnt, int smax, int gran) {
    constexpr int NV = R * NT * 4;
    const long long gs = (long long)span * KU, ge = gs + KU;
    if (u0 <= gs && u1 >= ge) {  // the whole group is ours
        v3_store<FMT, R, NT, EPI>(o, acc, grp, lane);
        return;
    }
    const int first = v3_owner(gs, U, Wt, gran), n = v3_owner(ge - 1, U, Wt, gran) - first + 1;
    float* mine = ws + ((size_t)grp * smax + (wg - first)) * NV * 32 + lane;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) __stcg(mine + ((r * NT + nt) * 4 + i) * 32, acc[r][nt][i]);
    __syncwarp();  // every lane's partial sums, ordered before lane 0's release (ptx.cuh arrive_release)
    int prev = 0;
    if (lane == 0) {
        prev = arrive_release(cnt + grp);
        if (prev == n - 1) acquire_after_arrival();  // the last contributor: every other one's slots are visible
    }
    prev = __shfl_sync(0xFFFFFFFFu, prev, 0);
    if (prev != n - 1) return;  // not the last contributor
    __syncwarp();  // lane 0's acquire, ordered before every lane's reads of the slots (read through L2: __ldcg)
    float v[R][NT][4];
    zero_tiles(v);
    const float* base = ws + (size_t)grp * smax * NV * 32 + lane;
    for (int s = 0; s < n; ++s)  // slot order: the same sum whichever warp finishes last
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) v[r][nt][i] += __ldcg(base + ((size_t)s * NV + (r * NT + nt) * 4 + i) * 32);
    if (lane == 0) cnt[grp] = 0;  // ready for the next call (every contributor has counted)
    v3_store<FMT, R, NT, EPI>(o, v, grp, lane);
}

template <int FMT, int R, int NT, int EPI>
__device__ __forceinline__ void v3_finish(const V3Out& o, const float (&acc)[R][NT][4], int grp, long long u0, long long u1,
                                          int KU, int U, int Wt, int wg, int lane, float* __restrict__ ws, int* __restrict__ cnt,
                                          int smax, int gran) {
    v3_finish_span<FMT, R, NT, EPI>(o, acc, grp, grp, u0, u1, KU, U, Wt, wg, lane, ws, cnt, smax, gran);
}

// ---- one unit of the packed stream -------------------------------------------------------------------------------
// Lane (g, t)'s activations of a chunk start 16t past the chunk (the row pointers xrow carry it); its v-th 16-byte
// load of them lies v3_xoff(v) past that. FP8 (64 k): k 16t .. 16t + 15, two loads. NVFP4 (128 k): half q is the
// 16-block t + 4q, so loads 2q and 2q + 1 read k 64q + 16t .. + 15. Either way the four lanes of a group read
// 16-byte pieces of one 128-byte line per token row and load instruction (an NVFP4 order of 32t + .. read two).
template <bool NV>
__device__ __forceinline__ int v3_xoff(int v) { return NV ? (v >> 1) * 64 + (v & 1) * 8 : v * 8; }

// activations: 16 bytes through L1 (global), or from the CTA's normalized copy (shared, NORM = 1)
template <int NORM>
__device__ __forceinline__ uint4 v3_xload(const u16* p) {
    if constexpr (NORM) return *reinterpret_cast<const uint4*>(p);
    else return ld_cached16(p);
}

// Multiply one unit (C chunks of R row tiles) held in registers -- cur: this lane's 2 C R 16-byte weight loads,
// scur: its C R NVFP4 scale words -- into acc. k0: the unit's first k; grp, kk: its row group and unit within the
// group; S, KB: FP8 block scales (float2 [group][KB = Kp / 128][R]), read here, promoted per 128 k.
template <int FMT, int R, int NT, int C, int NORM>
__device__ __forceinline__ void v3_unit(float (&acc)[R][NT][4], const uint4 (&cur)[2 * C * R],
                                        const u32 (&scur)[FMT == V3_NVFP4 ? C * R : 1], const u16* const (&xrow)[NT],
                                        int k0, const void* __restrict__ S, int grp, int kk, int KB) {
    constexpr bool NV = FMT == V3_NVFP4;
    constexpr int CK = NV ? 128 : 64;        // k per chunk
    constexpr int XV = NV ? 4 : 2;           // 16-byte activation loads per lane per chunk per token tile
    static_assert(FMT != V3_FP8B || C % 2 == 0, "128x128 block scales: units of whole 128-k blocks");
    if constexpr (FMT == V3_FP8B) {
        // each 128-k block's products in `part`, promoted with its scale (DeepGEMM's FP32 promotion)
#pragma unroll
        for (int cb = 0; cb < C / 2; ++cb) {
            float part[R][NT][4];
            zero_tiles(part);
#pragma unroll
            for (int c2 = 0; c2 < 2; ++c2) {
                const int c = cb * 2 + c2;
                uint4 xa[NT][2];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int v = 0; v < 2; ++v) xa[nt][v] = v3_xload<NORM>(xrow[nt] + k0 + c * 64 + v * 8);
#pragma unroll
                for (int r = 0; r < R; ++r)
                    v3_fp8_chunk<NT>(part[r], cur[(c * R + r) * 2], cur[(c * R + r) * 2 + 1], xa);
            }
            const int kb = kk * (C / 2) + cb;
#pragma unroll
            for (int r = 0; r < R; ++r) {  // (scale of rows 0-7, scale of rows 8-15) of this tile
                const float2 sc = __ldg(reinterpret_cast<const float2*>(S) + ((size_t)grp * KB + kb) * R + r);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    acc[r][nt][0] = fmaf(part[r][nt][0], sc.x, acc[r][nt][0]);
                    acc[r][nt][1] = fmaf(part[r][nt][1], sc.x, acc[r][nt][1]);
                    acc[r][nt][2] = fmaf(part[r][nt][2], sc.y, acc[r][nt][2]);
                    acc[r][nt][3] = fmaf(part[r][nt][3], sc.y, acc[r][nt][3]);
                }
            }
        }
    } else {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            uint4 xa[NT][XV];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int v = 0; v < XV; ++v) xa[nt][v] = v3_xload<NORM>(xrow[nt] + k0 + c * CK + v3_xoff<NV>(v));
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if constexpr (NV) {
                    const u32 sw = scur[c * R + r];  // (g, blk t) (g+8, t) (g, t+4) (g+8, t+4)
                    v3_nvfp4_half<NT>(acc[r], cur[(c * R + r) * 2], scale2_bf16x2(sw & 0xFFFFu), 0, xa);
                    v3_nvfp4_half<NT>(acc[r], cur[(c * R + r) * 2 + 1], scale2_bf16x2(sw >> 16), 1, xa);
                } else {
                    v3_fp8_chunk<NT>(acc[r], cur[(c * R + r) * 2], cur[(c * R + r) * 2 + 1], xa);
                }
            }
        }
    }
}

// After unit u of the warp's range [u0, u1): where the row group ends here (or the range does), store it or run the
// stream-K fix-up, and start the next group.
template <int FMT, int R, int NT, int EPI>
__device__ __forceinline__ void v3_after_unit(const V3Out& o, float (&acc)[R][NT][4], int& grp, int& kk, long long u,
                                              long long u0, long long u1, int KU, int U, int Wt, int wg, int lane,
                                              float* __restrict__ ws, int* __restrict__ cnt, int smax, int gran) {
    if (++kk == KU || u + 1 == u1) {
        v3_finish<FMT, R, NT, EPI>(o, acc, grp, u0, u1, KU, U, Wt, wg, lane, ws, cnt, smax, gran);
        zero_tiles(acc);
        kk = 0;
        ++grp;
    }
}

// ---- the kernels' names and parameters (versions 3 and 4 take the same arguments) ----------------------------------
#define V3_FMT_NAME_0 fp8c
#define V3_FMT_NAME_1 fp8b
#define V3_FMT_NAME_2 nvfp4
#define V3_CAT2(a, b) a##b
#define V3_CAT(a, b) V3_CAT2(a, b)
#define V3_PARAMS                                                                                                   \
    const u8* __restrict__ W, const void* __restrict__ S, const float* __restrict__ CS, const u16* __restrict__ X,  \
        u16* __restrict__ Y, const u16* __restrict__ RES, float* __restrict__ WS, int* __restrict__ CNT, int M,   \
        int nout, int Kp, int KU, int U, int smax, const u16* __restrict__ G, float eps, int Kn, int gran
#define V3_ARGS W, S, CS, X, Y, RES, WS, CNT, M, nout, Kp, KU, U, smax, G, eps, Kn, gran
// One extern "C" kernel: NAME its full name, BODY its templated body in parentheses (the template's commas).
#define V3_DEFINE_KERNEL(NAME, BODY) \
    extern "C" __global__ void __launch_bounds__(256) NAME(V3_PARAMS) { BODY(V3_ARGS); }

// ---- the fused RMSNorm -------------------------------------------------------------------------------------------
// NORM = 1: the activations are RMS-normalized once per CTA into shared memory (row stride Kp + 8: the 16-byte pad
// keeps the 8 token rows of a warp's loads in different banks), y = bf16(x * rsqrt(mean(x^2) + eps) * gamma), exactly
// decode_layer.cu's rmsnorm_bf16 arithmetic; the GEMV then reads its B fragments from there. This fuses the decode
// layer's RMSNorm into the QKV and gate|up GEMVs (one launch fewer each). Dynamic shared memory: M (Kp + 8) 2 bytes.
template <int M_MAX>
__device__ __forceinline__ void v3_stage_normed(const u16* __restrict__ X, const u16* __restrict__ G, float eps, int M,
                                                int Kp, int Kn, u16* xs) {
    __shared__ float part[M_MAX][8];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int m = 0; m < M; ++m) {
        float ss = 0.f;
        for (int i = threadIdx.x * 8; i < Kp; i += blockDim.x * 8) {
            const uint4 v = *reinterpret_cast<const uint4*>(X + (size_t)m * Kp + i);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const u32 p = word_of(v, j);
                ss = fmaf(bf16_lo(p), bf16_lo(p), ss);
                ss = fmaf(bf16_hi(p), bf16_hi(p), ss);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, o);
        if (lane == 0) part[m][warp] = ss;
    }
    __syncthreads();
    for (int m = 0; m < M; ++m) {
        float tot = 0.f;
        for (int w = 0; w < nw; ++w) tot += part[m][w];
        const float inv = f_div(1.f, sqrtf(f_add(f_div(tot, (float)Kn), eps)));
        for (int i = threadIdx.x * 8; i < Kp; i += blockDim.x * 8) {
            const uint4 v = *reinterpret_cast<const uint4*>(X + (size_t)m * Kp + i);
            const uint4 gg = i < Kn ? *reinterpret_cast<const uint4*>(G + i) : make_uint4(0u, 0u, 0u, 0u);
            uint4 o;
            u32* op = reinterpret_cast<u32*>(&o);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const u32 p = word_of(v, j), q = word_of(gg, j);
                op[j] = bf16x2_rn(f_mul(f_mul(bf16_lo(p), inv), bf16_lo(q)), f_mul(f_mul(bf16_hi(p), inv), bf16_hi(q)));
            }
            *reinterpret_cast<uint4*>(xs + (size_t)m * (Kp + 8) + i) = o;
        }
    }
    __syncthreads();
}
