// formats.cuh -- the number-format constants on the GPU side, and nothing typed by hand.
//
// Every FP8LAB_* value below is a compile-time define that fp8lab/kernels/_cuda.py passes to NVRTC, generated
// from fp8lab.formats' FloatFormat objects (fp8lab/kernels/reference.py, cuda_defines()): one format
// description for the CPU reference, the tests and the kernels. For example, on the command line:
//     -DFP8LAB_E4M3_MAN_BITS=3 -DFP8LAB_E4M3_BIAS=7 -DFP8LAB_E4M3_MAX=0x1.cp+8f -DFP8LAB_E4M3_MAX_BITS=0x43e00000u
//     -DFP8LAB_E2M1_MIDS=0x3e800000u,0x3f400000u,...   (the 7 midpoints of E2M1's grid, as fp32 bits)
//     -DFP8LAB_E2M1_TIES_DOWN=0x55u                    (bit i: midpoint i rounds DOWN at a tie, RNE's even code)
// Compiling a kernel by hand: `python -m fp8lab.kernels.sass --source quant.cu --arch sm_90 --ptxas-v`
// passes the same defines (see that module).
#pragma once

#ifndef FP8LAB_FORMATS_DEFINED
#error "fp8lab kernels take their format constants from fp8lab.formats: compile through fp8lab.kernels._cuda (load_module, or python -m fp8lab.kernels.sass)"
#endif

// 2**e as an fp32 bit pattern (normal range): the scale factors of the bit-move conversions.
#define FP8LAB_POW2_BITS(e) ((unsigned int)(127 + (e)) << 23)

// The 7 midpoints of the E2M1 magnitude grid {0, .5, 1, 1.5, 2, 3, 4, 6} and their tie rule.
__device__ constexpr unsigned int E2M1_MIDS[7] = {FP8LAB_E2M1_MIDS};
__device__ __forceinline__ constexpr bool e2m1_tie_down(int i) { return (FP8LAB_E2M1_TIES_DOWN >> i) & 1u; }
