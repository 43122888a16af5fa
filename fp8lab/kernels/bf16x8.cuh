// bf16x8.cuh -- element-wise arithmetic on 8 bf16 (one 16-byte load) that decode_layer.cu's small kernels and
// gemv_v3.cu's fused RMSNorm share, so that the fused and the unfused layer round the same way:
//
//   sumsq_bf16x8(v, ss)        ss + sum of x^2 over the 8 elements, fp32 FMAs in element order
//   rms_inv(tot, n, eps)       1 / sqrt(tot / n + eps), IEEE division and sqrt (not MUFU.RSQ: closer to the reference)
//   rmsnorm_bf16x8(x, w, inv)  bf16(x * inv * w), each product rounded to fp32 in that order
//   zip_words(a, b, f)         the 4 words f(a_j, b_j): one bf16x2 result per pair of bf16x2 words
//
// No host code; NVRTC-compatible.
#pragma once

#include "ptx.cuh"

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
