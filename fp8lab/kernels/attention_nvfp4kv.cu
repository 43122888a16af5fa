// attention_nvfp4kv.cu -- decode attention over an NVFP4 KV cache (E2M1 nibbles, an E4M3 scale per 16 elements
// along the head dim, an fp32 global scale per tensor or per KV head), contiguous or paged, GQA.
//
//   K = e2m1(nibble) * e4m3(block scale) * k_global,  V likewise          (fp8lab.scaling's NVFP4, dequantized)
//   out[b, h*G+g, :] = softmax(q[b, h*G+g] . K[b, h]^T * sm_scale) . V[b, h]     (bf16 out, fp32 softmax)
//
// The kernel is version 2 of the decode attention (attention_decode.cuh: shared-memory ring per warp, tensor-core
// MMAs, online softmax, flash-decoding splits merged by decode_reduce) with the NVFP4 K and V layouts that header
// describes: the nibbles widen to bf16 AT THE MMA BOUNDARY (in registers, just before each mma.sync), exactly --
// e2m1 * e4m3 * 2**-8 is a normal bf16 -- and 2**8 * global joins the fp32 score multiplier and the output scale.
//
// Why it can approach 3.56x a bf16 cache: a token's K (or V) row is D/2 + D/16 bytes instead of 2 D (0.5625 bytes
// per element instead of 2). The price is arithmetic per byte: a byte of nibbles is 2 elements, each widened by
// ~11/8 integer ops plus half a bf16x2 multiply, so the kernel must hide about twice the FP8 kernel's work per byte
// under the loads. Sm_90 has no E2M1 conversion instruction (cvt ... e2m1x2 is sm_100a / sm_120a): bit moves.
//
// The compiled configurations are the Python list attention_nvfp4kv.py KERNELS, passed by the loader as
// -DFP8LAB_ATTN_NVFP4=DECODE_V2(nvfp4,128,g8,1,4,1,4)... (one list).
#include "attention_decode.cuh"

DECODE_REDUCE_KERNEL

#ifndef FP8LAB_ATTN_NVFP4
#error "compile attention_nvfp4kv.cu through fp8lab.kernels._cuda (it passes the instantiation list)"
#endif
FP8LAB_ATTN_NVFP4
