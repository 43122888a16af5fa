// attention_decode_v2.cu -- decode attention VERSION 2 over a bf16 or FP8 E4M3 KV cache, contiguous or paged, GQA.
//
//   out[b, h*G+g, :] = softmax(q[b, h*G+g] . K[b, h]^T * sm_scale) . V[b, h]     (bf16 out, fp32 softmax)
//   K = decode(code) * k_scale[h],  V = decode(v_code) * v_scale[h]          (vLLM's convention)
//
// The kernel body, its design and what version 1 (attention_fp8kv.cu, kept beside it) taught: attention_decode.cuh.
// This file only instantiates it. The configurations are the Python list attention_fp8kv.py V2_KERNELS, passed by the
// loader as -DFP8LAB_ATTN_V2=DECODE_V2(fp8cvt,128,g8,1,3,1,4)... (one list, so the two sides cannot drift); a separate
// source from version 1 so that the two compile in parallel.
#include "attention_decode.cuh"

DECODE_REDUCE_KERNEL

#ifndef FP8LAB_ATTN_V2
#error "compile attention_decode_v2.cu through fp8lab.kernels._cuda (it passes the instantiation list)"
#endif
FP8LAB_ATTN_V2
