// attention_prefill.cu -- chunked prefill: a chunk of Mq query tokens (causal within the chunk) attending to a long
// cached prefix, over a bf16 or an FP8 E4M3 KV cache. FlashAttention-2's algorithm on mma.sync tensor cores.
//
//   out[b, hq, t, :] = softmax_j<=Lc+t (q[b, hq, t] . K[b, hq/G, j] * sm_scale) . V[b, hq/G, :]       t < Mq
//   the cache holds Lc prefix tokens and then the chunk's own Mq tokens (written before the attention runs);
//   K = decode(code) * k_scale, V likewise for FP8 (vLLM's convention), per tensor or per KV head.
//
// A block of NW warps owns BM = 16 NW rows of the (query token, query head) plane for one split of the keys: rows
// are token-major, PACK heads per token (PACK = 1: one query head per block, FlashAttention-2's grid; PACK = G: the
// G query heads that share a KV head ride in one block -- "GQA packing": for a chunk shorter than a block it fills
// rows that would otherwise be empty; for long chunks it changes nothing, every block of BM rows still loads and
// widens the tiles it reads, so the widening per flop is ~1/BM either way). Each warp holds 16 rows: Q in registers (A fragments, loaded once), S = Q.K^T and O += P.V with
// mma.sync.m16n8k16 and fp32 accumulation, an online softmax per row (FlashAttention-2: S's accumulators are P's A
// fragments as they sit in registers). K/V tiles of BN = 64 tokens come through shared memory:
//   bf16 cache: cp.async (16 bytes a thread) straight into a double-buffered, XOR-swizzled tile, ldmatrix (.trans
//     for V) into B fragments, bf16 MMAs;
//   FP8 cache: cp.async of the E4M3 bytes into a double-buffered staging tile, then EVERY thread widens its share
//     (cvt.rn.f16x2.e4m3x2, exact) into an f16 tile laid out like the bf16 one, then the same ldmatrix + f16 MMAs.
//     Q is prescaled per row by a power of two into f16 (decode kernels' trick); P in [0, 2**15] for f16.
// So the FP8 path does the bf16 path's work plus the widening: per 64-token tile and block, 2 * 64 * D conversions
// (CUDA cores) and a write + read of the widened tile in shared memory, against 4 * BM * 64 * D MMA flops: the ratio
// falls as BM grows (NW = 8 warps: BM = 128). Hopper runs FP8 attention on its FP8 tensor cores only through wgmma with Q in FP8 too
// (FlashAttention-3's FP8 path); the lab has no such path, so this kernel measures what widening costs.
//
// Causality: key j is masked for row t when j > Lc + t; tiles past the block's last row are not visited; keys past
// the block's last visible key are zero-filled by the copy (never read from memory). Splits of the key range (flash-decoding, for short chunks that would
// not fill the GPU) write (max, sum, unnormalized O) per row and decode_reduce merges them, as for decode.
// A row whose keys in a split are all masked writes max -inf, sum 0 and O = 0 (the merge gives it weight 0).
//
// No host code; NVRTC-compatible; built without fast math. sm_80+ (cp.async, ldmatrix, mma.sync) and the sm_89+
// cvt.rn.f16x2.e4m3x2: every listed arch builds it.
#include "attention_decode.cuh"  // attn::neg_inf / ex2 / mma, cp_async_z; decode_reduce

namespace prefill {

using attn::ex2;
using attn::neg_inf;
constexpr int BN = 64;  // keys per tile

// XOR swizzle of 16-byte chunks within a row of a widened (2-byte) tile: chunk ch of row n sits at ch ^ (n & 7),
// so the 8 rows an ldmatrix matrix reads hit 8 different bank groups.
template <int D>
__device__ __forceinline__ u32 tile_off(int n, int ch) { return (u32)(n * (2 * D) + ((ch ^ (n & 7)) << 4)); }

template <int D, bool FP8, int NW>
struct Smem {
    static constexpr int TILE16 = BN * D * 2;  // a widened (bf16 / f16) tile
    static constexpr int TILE8 = BN * D;       // an FP8 staging tile
    // bf16: K[2], V[2] widened tiles. FP8: Kw, Vw widened + K8[2], V8[2] staging.
    static constexpr int KW = 0;
    static constexpr int VW = FP8 ? TILE16 : 2 * TILE16;
    static constexpr int K8 = 2 * TILE16;
    static constexpr int V8 = K8 + 2 * TILE8;
    static constexpr int BYTES = FP8 ? 2 * TILE16 + 4 * TILE8 : 4 * TILE16;
};

template <int D, bool FP8, int NW, int PACK>
__device__ __forceinline__ void prefill_body(
    const u16* __restrict__ q,      // [B, Hq, Mq, D] bf16
    const u8* __restrict__ kc,      // [B, Hk, Lkv, D] bf16 (as bytes) or E4M3 codes
    const u8* __restrict__ vc,
    const float* __restrict__ k_scale, const float* __restrict__ v_scale, int scale_stride, float sm_scale,
    int Hq, int Hk, int Mq, int Lc, int Lkv, int S, int split_len,
    u16* __restrict__ out,          // [B, Hq, Mq, D] bf16 (S == 1)
    float* __restrict__ part_o,     // [B, Hq, Mq, S, D] fp32 (S > 1)
    float* __restrict__ part_ml) {  // [B, Hq, Mq, S, 2]
    constexpr int BM = 16 * NW;
    constexpr int NT = 32 * NW;
    constexpr int NCH = D / 16;     // k-chunks of Q.K^T
    constexpr int NDB = D / 8;      // n-blocks of O (8 dims each)
    constexpr int NKB = BN / 8;     // n-blocks of S (8 keys each)
    constexpr int CH = D / 8;       // 16-byte chunks in a widened row
    constexpr int ROWE = 2;         // bytes per element in the cache: bf16
    using SM = Smem<D, FP8, NW>;
    extern __shared__ uint4 dyn_smem[];
    u8* smem = reinterpret_cast<u8*>(dyn_smem);
    const u32 smem_s = smem_addr(smem);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, r = lane >> 2, c = lane & 3;
    const int G = Hq / Hk;
    const int mb = blockIdx.x, hg = blockIdx.y, b = blockIdx.z / S, s = blockIdx.z % S;
    constexpr int TPB = BM / PACK;  // query tokens per block
    const int tok0 = mb * TPB;
    const int kvh = (hg * PACK) / G;
    const int last_tok = min(tok0 + TPB, Mq) - 1;
    const int kv_lo = s * split_len;
    const int kv_hi = min(min((s + 1) * split_len, Lc + last_tok + 1), Lkv);
    const int ntiles = kv_hi > kv_lo ? (kv_hi - kv_lo + BN - 1) / BN : 0;

    // ---- this lane's two rows (r and r + 8 of the warp's 16) -----------------------------------------------
    int tok[2], head[2];
    bool ok[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int row = warp * 16 + r + 8 * i;
        tok[i] = tok0 + row / PACK;
        head[i] = hg * PACK + row % PACK;
        ok[i] = tok[i] < Mq;
    }
    const float ks = k_scale[kvh * scale_stride], vs = v_scale[kvh * scale_stride];

    // ---- Q fragments (A operand of Q.K^T): chunk j, a0/a2 row r (dims 16j + 2c.., 16j + 8 + 2c..), a1/a3 row r+8
    u32 qa[NCH][4];
    float sc[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const u16* qrow = q + (((size_t)b * Hq + head[i]) * Mq + (ok[i] ? tok[i] : 0)) * D;
        u32 raw[NCH][2];
        float amax = 0.f;
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            raw[j][0] = ok[i] ? *reinterpret_cast<const u32*>(qrow + 16 * j + 2 * c) : 0u;
            raw[j][1] = ok[i] ? *reinterpret_cast<const u32*>(qrow + 16 * j + 8 + 2 * c) : 0u;
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(bf16_lo(raw[j][0])), fabsf(bf16_hi(raw[j][0]))),
                                     fmaxf(fabsf(bf16_lo(raw[j][1])), fabsf(bf16_hi(raw[j][1])))));
        }
        float qs = 1.0f;
        if constexpr (FP8) {  // per-row power of two: max|q| * qs in [2**14, 2**15) (exact, no f16 overflow)
            amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
            amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
            int e = (int)((__float_as_uint(amax) >> 23) & 0xFF) - 126;
            int sh = 15 - e;
            sh = sh > 126 ? 126 : (sh < -126 ? -126 : sh);
            if (amax > 0.f && amax == amax) qs = __uint_as_float((u32)(127 + sh) << 23);
        }
        sc[i] = sm_scale * ks * attn::LOG2E / qs;
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            u32 e01 = raw[j][0], e23 = raw[j][1];
            if constexpr (FP8) {
                e01 = f16x2_rn(bf16_lo(e01) * qs, bf16_hi(e01) * qs);
                e23 = f16x2_rn(bf16_lo(e23) * qs, bf16_hi(e23) * qs);
            }
            qa[j][i] = e01;
            qa[j][2 + i] = e23;
        }
    }

    float o[NDB][4];
#pragma unroll
    for (int i = 0; i < NDB; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};

    const size_t kv_base = ((size_t)b * Hk + kvh) * Lkv;
    // ---- copy tile t (keys kv0 .. kv0 + 63) into stage `st`. Keys at or past kv_hi are zero-filled, never read: no
    // row of this block sees them (causality, or the next split), and the cache there may hold anything -- a NaN in V
    // times a P of 0 would still be NaN.
    auto issue = [&](int t, int st) {
        const int kv0 = kv_lo + t * BN;
        if constexpr (FP8) {
            constexpr int CH8 = D / 16;  // 16-byte chunks of an E4M3 row
#pragma unroll
            for (int it = 0; it < BN * CH8 / NT; ++it) {
                const int id = tid + it * NT, n = id / CH8, ch = id % CH8;
                const bool in = kv0 + n < kv_hi;
                const size_t off = (kv_base + (in ? kv0 + n : 0)) * D + ch * 16;
                attn::cp_async_z<16>(smem_s + SM::K8 + st * SM::TILE8 + n * D + ch * 16, kc + off, in);
                attn::cp_async_z<16>(smem_s + SM::V8 + st * SM::TILE8 + n * D + ch * 16, vc + off, in);
            }
        } else {
#pragma unroll
            for (int it = 0; it < BN * CH / NT; ++it) {
                const int id = tid + it * NT, n = id / CH, ch = id % CH;
                const bool in = kv0 + n < kv_hi;
                const size_t off = ((kv_base + (in ? kv0 + n : 0)) * D + ch * 8) * ROWE;
                attn::cp_async_z<16>(smem_s + SM::KW + st * SM::TILE16 + tile_off<D>(n, ch), kc + off, in);
                attn::cp_async_z<16>(smem_s + SM::VW + st * SM::TILE16 + tile_off<D>(n, ch), vc + off, in);
            }
        }
        cp_async_commit();
    };
    // ---- FP8: widen staging tile `st` into the f16 tiles, 8 elements (one 16-byte chunk) per step -------------
    auto widen = [&](int st) {
#pragma unroll
        for (int it = 0; it < BN * CH / NT; ++it) {
            const int id = tid + it * NT, n = id / CH, ch = id % CH;
#pragma unroll
            for (int kv = 0; kv < 2; ++kv) {
                const uint2 x = *reinterpret_cast<const uint2*>(smem + (kv ? SM::V8 : SM::K8) + st * SM::TILE8 + n * D + ch * 8);
                const uint4 y = make_uint4(e4m3x2_to_f16x2(x.x), e4m3x2_to_f16x2(x.x >> 16), e4m3x2_to_f16x2(x.y),
                                           e4m3x2_to_f16x2(x.y >> 16));
                *reinterpret_cast<uint4*>(smem + (kv ? SM::VW : SM::KW) + tile_off<D>(n, ch)) = y;
            }
        }
    };

    if (ntiles > 0) issue(0, 0);
    for (int t = 0; t < ntiles; ++t) {
        const int cur = t & 1;
        if (t + 1 < ntiles) issue(t + 1, cur ^ 1);
        else cp_async_commit();  // an empty group: wait_group<1> then always means "tile t has landed"
        cp_async_wait<1>();
        __syncthreads();  // tile t is in shared memory for every thread
        u32 kt, vt;       // shared-memory addresses of the widened tiles to read
        if constexpr (FP8) {
            widen(cur);
            __syncthreads();  // the widened tiles are complete
            kt = smem_s + SM::KW;
            vt = smem_s + SM::VW;
        } else {
            kt = smem_s + SM::KW + cur * SM::TILE16;
            vt = smem_s + SM::VW + cur * SM::TILE16;
        }
        const int kv0 = kv_lo + t * BN;

        // ---- S = Q . K^T: ldmatrix.x4 gives B fragments of two 8-key n-blocks for one 16-dim k-chunk ----------
        float sacc[NKB][4];
#pragma unroll
        for (int nb = 0; nb < NKB; ++nb) sacc[nb][0] = sacc[nb][1] = sacc[nb][2] = sacc[nb][3] = 0.f;
        const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
        for (int j = 0; j < NCH; ++j)
#pragma unroll
            for (int nb = 0; nb < NKB; nb += 2) {
                const int key = 8 * nb + rr + 8 * (mi >> 1);
                u32 bk[4];
                ldmatrix_x4(bk, kt + tile_off<D>(key, 2 * j + (mi & 1)));
                attn::mma<FP8>(sacc[nb], qa[j], bk[0], bk[1]);
                attn::mma<FP8>(sacc[nb + 1], qa[j], bk[2], bk[3]);
            }

        // ---- online softmax per row; mask keys past the row's causal limit --------------------------------------
        u32 pa[BN / 16][4];
        float al[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int lim = Lc + tok[i];  // the last key this row sees
            float x[NKB][2];
            float mx = neg_inf();
#pragma unroll
            for (int nb = 0; nb < NKB; ++nb)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int key = kv0 + 8 * nb + 2 * c + e;
                    x[nb][e] = key <= lim ? sacc[nb][2 * i + e] * sc[i] : neg_inf();
                    mx = fmaxf(mx, x[nb][e]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
            const float mn = fmaxf(m[i], mx);
            const bool none = mn == neg_inf();  // every key so far masked for this row (possible in a split)
            al[i] = m[i] == neg_inf() ? 0.f : ex2(m[i] - mn);
            m[i] = mn;
            const float mo = none ? 0.f : mn - 15.0f;  // P in [0, 2**15]
            float sum = 0.f;
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                float p[4];
                p[0] = ex2(x[2 * kk][0] - mo); p[1] = ex2(x[2 * kk][1] - mo);
                p[2] = ex2(x[2 * kk + 1][0] - mo); p[3] = ex2(x[2 * kk + 1][1] - mo);
                sum += (p[0] + p[1]) + (p[2] + p[3]);
                if constexpr (FP8) { pa[kk][i] = f16x2_rn(p[0], p[1]); pa[kk][2 + i] = f16x2_rn(p[2], p[3]); }
                else { pa[kk][i] = bf16x2_rn(p[0], p[1]); pa[kk][2 + i] = bf16x2_rn(p[2], p[3]); }
            }
            l[i] = l[i] * al[i] + sum;
        }
#pragma unroll
        for (int nd = 0; nd < NDB; ++nd) { o[nd][0] *= al[0]; o[nd][1] *= al[0]; o[nd][2] *= al[1]; o[nd][3] *= al[1]; }

        // ---- O += P . V: ldmatrix.x4.trans gives B fragments of two 8-dim n-blocks for one 16-key k-chunk -------
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
            for (int nd = 0; nd < NDB; nd += 2) {
                const int key = 16 * kk + rr + 8 * (mi & 1);
                u32 bv[4];
                ldmatrix_x4_trans(bv, vt + tile_off<D>(key, nd + (mi >> 1)));
                attn::mma<FP8>(o[nd], pa[kk], bv[0], bv[1]);
                attn::mma<FP8>(o[nd + 1], pa[kk], bv[2], bv[3]);
            }
        __syncthreads();  // every warp is done with this tile's buffers before they are refilled / rewidened
    }
    cp_async_wait<0>();

    // ---- finish: row sums over the quad, then write --------------------------------------------------------
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xFFFFFFFFu, l[i], 1);
        l[i] += __shfl_xor_sync(0xFFFFFFFFu, l[i], 2);
        if (!ok[i]) continue;
        const size_t row = ((size_t)b * Hq + head[i]) * Mq + tok[i];
        if (S == 1) {
            const float f = vs / l[i];
#pragma unroll
            for (int nd = 0; nd < NDB; ++nd)
                *reinterpret_cast<u32*>(out + row * D + 8 * nd + 2 * c) = bf16x2_rn(o[nd][2 * i] * f, o[nd][2 * i + 1] * f);
        } else {
#pragma unroll
            for (int nd = 0; nd < NDB; ++nd)
                *reinterpret_cast<float2*>(part_o + (row * S + s) * D + 8 * nd + 2 * c) = make_float2(o[nd][2 * i] * vs, o[nd][2 * i + 1] * vs);
            if (c == 0) {
                part_ml[(row * S + s) * 2 + 0] = m[i];
                part_ml[(row * S + s) * 2 + 1] = l[i];
            }
        }
    }
}

}  // namespace prefill

// grid = (ceil(Mq * PACK / BM), Hq / PACK, B * S), block = 32 NW, dynamic shared memory = prefill::Smem<...>::BYTES.
#define ATTN_PF_KV_bf16 false
#define ATTN_PF_KV_fp8 true
#define PREFILL(KV, D, NW, PACK)                                                                                     \
    extern "C" __global__ void __launch_bounds__(32 * NW) prefill_##KV##_d##D##_w##NW##_p##PACK(                     \
        const u16* q, const u8* kc, const u8* vc, const float* k_scale, const float* v_scale, int scale_stride,      \
        float sm_scale, int Hq, int Hk, int Mq, int Lc, int Lkv, int S, int split_len, u16* out, float* part_o,      \
        float* part_ml) {                                                                                            \
        prefill::prefill_body<D, ATTN_PF_KV_##KV, NW, PACK>(q, kc, vc, k_scale, v_scale, scale_stride, sm_scale, Hq,  \
                                                            Hk, Mq, Lc, Lkv, S, split_len, out, part_o, part_ml);    \
    }

DECODE_REDUCE_KERNEL

// The configurations: attention_prefill.py KERNELS, passed as -DFP8LAB_ATTN_PREFILL=PREFILL(fp8,128,4,1)...
#ifndef FP8LAB_ATTN_PREFILL
#error "compile attention_prefill.cu through fp8lab.kernels._cuda (it passes the instantiation list)"
#endif
FP8LAB_ATTN_PREFILL
