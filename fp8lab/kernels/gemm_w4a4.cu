// gemm_w4a4.cu -- the W4A4 NVFP4 GEMM on the GB10's own FP4 tensor-core instruction (sm_120a / sm_121a only):
//
//   mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3
//   (SASS OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X)
//
// The packed E2M1 nibbles go to the tensor core as loaded, and so do the E4M3 block scales: one UE4M3 code per 16
// elements of K for each operand, four per MMA. No nibble is decoded and no scale is multiplied on the CUDA cores;
// the only floating-point work outside the tensor core is the epilogue's global scale (alpha = gsa * gsb).
// Skeleton, fragment and scale layouts: gemm_w4a4_common.cuh and ptx_sm120a.cuh. The portable twin with the same
// skeleton is gemm_w4a4_emu.cu, whose H200 results check everything here except the instruction itself.
//
// Launch: grid = (ceil(M / 128), N / 128), block = 256, dynamic shared memory = 2 * 36 KB + 1 KB.
// Offline check: python -m fp8lab.kernels.sass --source gemm_w4a4.cu --arch sm_121 --kernel w4a4_omma
#include "gemm_w4a4_common.cuh"
#include "ptx_sm120a.cuh"

struct MmaNvf4 {
    __device__ static void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1, u32 sfa, u32 sfb) {
        mma_nvf4_16864(d, a, b0, b1, sfa, sfb);
    }
};

W4A4_ENTRY(w4a4_omma, MmaNvf4)
