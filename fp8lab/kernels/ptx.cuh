// ptx.cuh -- the PTX helpers every fp8lab kernel shares: streaming loads, byte permutes, bf16/f16 packing,
// mma.sync, cp.async, ldmatrix and mbarrier. One copy of each (DeepGEMM / CUTLASS keep theirs in one include/
// folder the same way); a kernel file holds only what is particular to it.
//
// Plain NVRTC code: no CUDA headers; bf16, f16 and fp8 are raw bits (u16 / u8). Everything here exists on
// sm_80 and later (bf16 arithmetic and mma.sync bf16 arrived with sm_80), so a kernel built only from these
// helpers compiles for sm_89, sm_90, sm_120 and sm_121 alike. Arch-specific instructions (wgmma, setmaxnreg)
// stay in the kernel files that need them, which declare it in fp8lab/kernels/sources.py.
#pragma once

#include "formats.cuh"

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned long long u64;

// ---- global loads ---------------------------------------------------------------------------------------
// Weights are read exactly once: keep them out of L1, ask L2 for the whole 256-byte line.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
// Two streamed bytes (NVFP4 block-scale codes).
__device__ __forceinline__ u32 ld_stream_u16(const void* p) {
    u16 v;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
// Activations are shared by every row of a GEMV: let them live in L1.
__device__ __forceinline__ uint4 ld_cached16(const void* p) {
    uint4 r;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// ---- arrival counters ------------------------------------------------------------------------------------
// The "last one to arrive finishes the job" pattern, in the PTX memory model's own terms:
//   writer: its writes, then (through a preceding __syncwarp / __syncthreads, its group's writes) arrive_release():
//           release semantics order them before the add (SASS: MEMBAR.ALL.GPU + ATOMG). Unlike __threadfence() +
//           atomicAdd (MEMBAR.SC.GPU and CCTL.IVALL, which invalidates the SM's L1 and with it every warp's cached
//           data), nothing is invalidated;
//   reader: the one who drew the last count calls acquire_after_arrival() right after its add (the add is the
//           strong read, the fence makes it an acquire pattern), then a __syncwarp / __syncthreads hands that on to
//           its group. Only then are the other contributors' writes guaranteed visible: a cache operator such as
//           ld.global.cg is a performance hint and orders nothing. The fence compiles to MEMBAR.ALL.GPU + CCTL.IVALL,
//           paid once per counter by its last arrival, not by every contributor.
__device__ __forceinline__ int arrive_release(int* counter) {
    int prev;
    asm volatile("atom.add.release.gpu.global.s32 %0, [%1], 1;" : "=r"(prev) : "l"(counter) : "memory");
    return prev;
}

__device__ __forceinline__ void acquire_after_arrival() {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// ---- fp32 arithmetic that never flushes subnormals ---------------------------------------------------------
// CuPy appends -ftz=true to every NVRTC compile (cupy/cuda/compiler.py, _compile_with_cache_cuda), so plain
// C++ float arithmetic flushes subnormal inputs and results to zero; the CPU reference does not. These are
// single PTX instructions without .ftz: IEEE semantics whatever the compile flags (and `.rn` on mul/add also
// forbids contraction into an FMA). Each compiles to the one SASS instruction one expects.
#define F32_INF_BITS 0x7F800000u
__device__ __forceinline__ float f_mul(float a, float b) { float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float f_add(float a, float b) { float r; asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float f_fma(float a, float b, float c) {
    float r; asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c)); return r;
}
__device__ __forceinline__ float f_sub(float a, float b) { float r; asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
// Unary minus in C++ becomes neg.ftz.f32 under -ftz=true: an extra FADD.FTZ that also flushes subnormals.
// neg.f32 without .ftz is exact, and ptxas folds it into the consuming FFMA as a free operand modifier.
__device__ __forceinline__ float f_neg(float a) { float r; asm("neg.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
__device__ __forceinline__ float f_div(float a, float b) { float r; asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float f_rcp(float a) { float r; asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
__device__ __forceinline__ float f_abs(float x) { return __uint_as_float(__float_as_uint(x) & 0x7FFFFFFFu); }
// s > 0 exactly (subnormals count as positive, NaN does not): the reference's `scale > 0` test.
__device__ __forceinline__ bool f_pos(float s) { return (__float_as_uint(s) - 1u) < F32_INF_BITS; }

// ---- bytes and halves -------------------------------------------------------------------------------------
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
// B bytes (16, 8 or 4; B-aligned) of shared memory into the B/4 consecutive registers dst[0..B/4).
template <int B>
__device__ __forceinline__ void ld_words(u32* dst, const void* p) {
    static_assert(B == 16 || B == 8 || B == 4, "16, 8 or 4 bytes");
    if constexpr (B == 16) {
        const uint4 x = *reinterpret_cast<const uint4*>(p);
        dst[0] = x.x; dst[1] = x.y; dst[2] = x.z; dst[3] = x.w;
    } else if constexpr (B == 8) {
        const uint2 x = *reinterpret_cast<const uint2*>(p);
        dst[0] = x.x; dst[1] = x.y;
    } else {
        dst[0] = *reinterpret_cast<const u32*>(p);
    }
}
// Word i of a 16-byte vector (i a compile-time constant after unrolling: no local-memory indexing).
__device__ __forceinline__ u32 word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// bf16 is the top half of an fp32: widening is exact (a shift).
__device__ __forceinline__ float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(u32 w) { return __uint_as_float(w & 0xFFFF0000u); }

// fp32 -> bf16, round to nearest even (cvt.rn.bf16.f32).
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
// Two fp32 -> two narrow values in one cvt, `lo` in the low half (byte), round to nearest even:
//   BF16 (F2FP.BF16.F32.PACK_AB, NaN -> 0x7FFF), F16; E4M3 / E5M2 with .satfinite (overflow and Inf -> +-max;
//   sm_89+; NaN inputs are canonicalized by the quantization kernels' callers).
enum Pack2 { PACK_BF16, PACK_F16, PACK_E4M3, PACK_E5M2 };
template <Pack2 P>
__device__ __forceinline__ u32 cvt2_rn(float lo, float hi) {
    u32 r;
    u16 h;
    if constexpr (P == PACK_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else if constexpr (P == PACK_F16) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else if constexpr (P == PACK_E4M3) { asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(hi), "f"(lo)); r = h; }
    else { asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(h) : "f"(hi), "f"(lo)); r = h; }
    return r;
}
__device__ __forceinline__ u32 bf16x2_rn(float lo, float hi) { return cvt2_rn<PACK_BF16>(lo, hi); }
__device__ __forceinline__ u32 f16x2_rn(float lo, float hi) { return cvt2_rn<PACK_F16>(lo, hi); }

// a * b on bf16x2, one rounding. Written as fma.rn.bf16x2 with a -0.0 addend: the sm_80+ form of
// mul.rn.bf16x2 (which needs sm_90), bit-identical for every input: a*b + (-0) rounds the exact product
// once, and -0 leaves every result alone, +0 and -0 products included (+0 + -0 = +0, -0 + -0 = -0).
__device__ __forceinline__ u32 bf16x2_mul(u32 a, u32 b) {
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}

// ---- mma.sync (fp32 accumulate) ---------------------------------------------------------------------------
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// The FP8 instruction: native (QMMA) on sm_89 / sm_120 / sm_121, emulated by ptxas on sm_90 (F2FP + HMMA).
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- shared memory, cp.async, ldmatrix ------------------------------------------------------------------------
__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
// 16 bytes global -> shared, bypassing L1 and registers; L2 fetches the whole 256-byte line (streams).
__device__ __forceinline__ void cp_async16_l2(void* smem_dst, const void* gsrc) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(smem_addr(smem_dst)), "l"(gsrc) : "memory");
}
// 16 bytes global -> shared at a shared address; pred = false zero-fills them (rows past the matrix end).
__device__ __forceinline__ void cp_async16_zfill(u32 dst, const void* src, bool pred) {
    const int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
// 4 bytes global -> shared (through L1: .ca is the only form below 16 bytes); pred = false writes a zero.
__device__ __forceinline__ void cp_async4_zfill(u32 dst, const void* src, bool pred) {
    const int n = pred ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ float ld_shared_f32(u32 addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// Generic-proxy writes (cp.async, st.shared) -> visible to the async proxy (wgmma, TMA) of this CTA.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- mbarriers (sm_80+; the arrive-on-cp.async form too) --------------------------------------------------
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred P1;\nLAB_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1 bra DONE;\nbra LAB_WAIT;\nDONE:\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
// Arrives on the mbarrier once all of this thread's earlier cp.async have landed (asynchronously).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// ==== added for the v3 decode GEMV and the decode layer (gemv_v3.cu, decode_layer.cu) ========================
// A streamed 4-byte word (the NVFP4 block-scale codes of a packed unit): read once, kept out of L1.
__device__ __forceinline__ u32 ld_stream_u32(const void* p) {
    u32 v;
    asm("ld.global.nc.L1::no_allocate.b32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
// Programmatic dependent launch (sm_90+; PTX griddepcontrol). A kernel launched with the programmatic-stream-
// serialization attribute may start while the previous kernel in the stream still runs: everything before
// pdl_wait() must not read what that kernel writes (weights may be streamed in; activations may not).
// pdl_launch_dependents() lets the next such kernel start its own prologue early. Both are no-ops when the kernel
// was launched normally, and compile to nothing on sm_89 (no PDL there).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- added for the attention kernels (attention_prefill.cu) -------------------------------------------------------
// ldmatrix with the transpose: thread (g, t) receives elements (rows 2t, 2t+1; column g) of each 8x8 b16 matrix,
// which is mma.sync's B fragment of a row-major [k][n] tile (V stored [key][dim] in P.V).
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
