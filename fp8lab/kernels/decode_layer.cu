// decode_layer.cu -- the small kernels of one decode layer (decode_layer.py); the GEMVs are gemv_v3.cu, the attention
// attention_fp8kv.cu.
//
//   rmsnorm        y[b] = bf16(x[b] * rsqrt(mean(x[b]^2) + eps) * w)                    one CTA per token
//   rope_append    q' = rope(q) (bf16); k' = rope(k), v appended to the KV cache at position pos[b]:
//                  FP8: code = e4m3(bf16(k') / k_scale[head]) (saturating, round to nearest even), or bf16
//   silu_mul       a = bf16(silu(g) * u)        (the unfused layer; the fused one does it in the gate/up epilogue)
//   add            y = bf16(a + b)              (the unfused layer's residual adds)
//
// All arithmetic in fp32, every stored value rounded once to bf16 (or E4M3), as decode_layer.reference does in
// float64. RoPE is Llama's rotate-half form: for pair i < D/2, angle pos * theta**(-2i/D) (the host builds the
// cos / sin table in float64 and rounds it to fp32):
//     out[i] = x[i] cos - x[i + D/2] sin,    out[i + D/2] = x[i + D/2] cos + x[i] sin
// Each kernel calls pdl_wait() before its first read (ptx.cuh): launched with programmatic dependent launch it
// may start while the previous kernel finishes.
#include "ptx.cuh"

// ---- arithmetic on 8 bf16 (one 16-byte load) -----------------------------------------------------------------
// sumsq_bf16x8: ss + sum of x^2, fp32 FMAs in element order; rms_inv: 1 / sqrt(tot / n + eps), IEEE (not MUFU.RSQ);
// rmsnorm_bf16x8: bf16(x * inv * w); zip_words(a, b, f): the 4 words f(a_j, b_j). (gemv_v3.cu's fused RMSNorm does
// the same arithmetic written out: as these helpers, ptxas allocates its sm_121 registers differently.)
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

__device__ __forceinline__ float sumsq_bf16x8(const uint4& v, float ss) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const u32 p = word_of(v, j);
        ss = fmaf(bf16_lo(p), bf16_lo(p), ss);
        ss = fmaf(bf16_hi(p), bf16_hi(p), ss);
    }
    return ss;
}

__device__ __forceinline__ float rms_inv(float tot, float n, float eps) { return f_div(1.f, sqrtf(f_add(f_div(tot, n), eps))); }

template <class F>
__device__ __forceinline__ uint4 zip_words(const uint4& a, const uint4& b, F f) {
    uint4 o;
    u32* op = reinterpret_cast<u32*>(&o);
#pragma unroll
    for (int j = 0; j < 4; ++j) op[j] = f(word_of(a, j), word_of(b, j));
    return o;
}

__device__ __forceinline__ uint4 rmsnorm_bf16x8(const uint4& x, const uint4& w, float inv) {
    return zip_words(x, w, [&](u32 p, u32 q) {
        return bf16x2_rn(f_mul(f_mul(bf16_lo(p), inv), bf16_lo(q)), f_mul(f_mul(bf16_hi(p), inv), bf16_hi(q)));
    });
}

// grid = B, block = 256; H % 8 == 0. The rsqrt is IEEE (1 / sqrt), not MUFU.RSQ, to match the reference closely.
extern "C" __global__ void __launch_bounds__(256) rmsnorm_bf16(const u16* __restrict__ x, const u16* __restrict__ w,
                                                               u16* __restrict__ y, int H, float eps) {
    __shared__ float part[8];
    pdl_launch_dependents();
    pdl_wait();
    const u16* xr = x + (size_t)blockIdx.x * H;
    float ss = 0.f;
    for (int i = threadIdx.x * 8; i < H; i += blockDim.x * 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(xr + i);  // one 16-byte load (a reference would split it)
        ss = sumsq_bf16x8(v, ss);
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
    for (int i = 0; i < (int)(blockDim.x >> 5); ++i) tot += part[i];
    const float inv = rms_inv(tot, (float)H, eps);
    for (int i = threadIdx.x * 8; i < H; i += blockDim.x * 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(xr + i);
        const uint4 g = *reinterpret_cast<const uint4*>(w + i);
        *reinterpret_cast<uint4*>(y + (size_t)blockIdx.x * H + i) = rmsnorm_bf16x8(v, g, inv);
    }
}

// grid = (B, n), block = 256: n blocks share a sequence's ((Hq + Hk) D/2 + Hk D) items (decode_layer.rope_grid: one
// item per thread). qkv [B, (Hq + 2 Hk) D] bf16 (q heads, then k heads, then v heads); cs [maxpos][D/2] float2
// (cos, sin); caches [B, Hk, L, D]; scales per KV head (FP8 only).
template <bool FP8>
__device__ __forceinline__ void rope_append_body(const u16* __restrict__ qkv, const int* __restrict__ pos,
                                                 const float2* __restrict__ cs, u16* __restrict__ q_out,
                                                 void* __restrict__ kc, void* __restrict__ vc, const float* __restrict__ ks,
                                                 const float* __restrict__ vs, int Hq, int Hk, int D, int L) {
    pdl_launch_dependents();
    pdl_wait();
    const int b = blockIdx.x, half = D >> 1, p = pos[b];
    const u16* row = qkv + (size_t)b * (Hq + 2 * Hk) * D;
    const float2* c = cs + (size_t)p * half;
    // One item per thread over the blocks of grid.y (the host sizes it so): the q and k pairs (i, i + D/2), then the
    // v elements. (The first version looped over all of a sequence's items in one block of 256 threads: ~14 rounds of
    // dependent loads at the Llama shape, 5.4 us of a 1k-context step that reads a few KB.)
    const int nqk = (Hq + Hk) * half, nall = nqk + Hk * D;
    for (int idx = blockIdx.y * blockDim.x + threadIdx.x; idx < nall; idx += gridDim.y * blockDim.x) {
        if (idx < nqk) {
            const int h = idx / half, i = idx - h * half;
            const float x1 = bf16_lo(row[h * D + i]), x2 = bf16_lo(row[h * D + i + half]);
            const float2 r = c[i];
            const float o1 = f_sub(f_mul(x1, r.x), f_mul(x2, r.y)), o2 = f_add(f_mul(x2, r.x), f_mul(x1, r.y));
            const u16 b1 = f32_to_bf16(o1), b2 = f32_to_bf16(o2);
            if (h < Hq) {
                q_out[((size_t)b * Hq + h) * D + i] = b1;
                q_out[((size_t)b * Hq + h) * D + i + half] = b2;
            } else {
                const int hk = h - Hq;
                const size_t at = (((size_t)b * Hk + hk) * L + p) * D;
                if (FP8) {
                    const float s = ks[hk];
                    u8* k8 = reinterpret_cast<u8*>(kc);
                    k8[at + i] = (u8)cvt2_rn<PACK_E4M3>(f_div(bf16_lo(b1), s), 0.f);
                    k8[at + i + half] = (u8)cvt2_rn<PACK_E4M3>(f_div(bf16_lo(b2), s), 0.f);
                } else {
                    u16* k16 = reinterpret_cast<u16*>(kc);
                    k16[at + i] = b1;
                    k16[at + i + half] = b2;
                }
            }
        } else {  // v: copied (bf16) or quantized (FP8)
            const int j = idx - nqk, hk = j / D, d = j - hk * D;
            const u16 v = row[(Hq + Hk + hk) * D + d];
            const size_t at = (((size_t)b * Hk + hk) * L + p) * D + d;
            if (FP8) reinterpret_cast<u8*>(vc)[at] = (u8)cvt2_rn<PACK_E4M3>(f_div(bf16_lo(v), vs[hk]), 0.f);
            else reinterpret_cast<u16*>(vc)[at] = v;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) rope_append_fp8(const u16* qkv, const int* pos, const float2* cs,
                                                                  u16* q_out, void* kc, void* vc, const float* ks,
                                                                  const float* vs, int Hq, int Hk, int D, int L) {
    rope_append_body<true>(qkv, pos, cs, q_out, kc, vc, ks, vs, Hq, Hk, D, L);
}
extern "C" __global__ void __launch_bounds__(256) rope_append_bf16(const u16* qkv, const int* pos, const float2* cs,
                                                                   u16* q_out, void* kc, void* vc, const float* ks,
                                                                   const float* vs, int Hq, int Hk, int D, int L) {
    rope_append_body<false>(qkv, pos, cs, q_out, kc, vc, ks, vs, Hq, Hk, D, L);
}

// Elementwise, 8 bf16 per thread (n % 8 == 0), grid-stride: y = f(a, b) word by word (bf16x2 pairs).
template <class F>
__device__ __forceinline__ void elementwise_body(const u16* __restrict__ a, const u16* __restrict__ b, u16* __restrict__ y,
                                                 int n, F f) {
    pdl_launch_dependents();
    pdl_wait();
    for (int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n; i += gridDim.x * blockDim.x * 8) {
        const uint4 av = *reinterpret_cast<const uint4*>(a + i), bv = *reinterpret_cast<const uint4*>(b + i);
        *reinterpret_cast<uint4*>(y + i) = zip_words(av, bv, f);
    }
}

extern "C" __global__ void __launch_bounds__(256) silu_mul_bf16(const u16* __restrict__ g, const u16* __restrict__ u,
                                                                u16* __restrict__ a, int n) {
    elementwise_body(g, u, a, n, [](u32 gp, u32 up) {
        const float g0 = bf16_lo(gp), g1 = bf16_hi(gp);
        return bf16x2_rn(g0 / (1.f + expf(-g0)) * bf16_lo(up), g1 / (1.f + expf(-g1)) * bf16_hi(up));
    });
}

extern "C" __global__ void __launch_bounds__(256) add_bf16(const u16* __restrict__ a, const u16* __restrict__ b,
                                                           u16* __restrict__ y, int n) {
    elementwise_body(a, b, y, n, [](u32 ap, u32 bp) {
        return bf16x2_rn(f_add(bf16_lo(ap), bf16_lo(bp)), f_add(bf16_hi(ap), bf16_hi(bp)));
    });
}
