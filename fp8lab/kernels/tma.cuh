// tma.cuh -- Hopper's bulk tensor copy engine (TMA), transaction-counting mbarriers, thread-block clusters and
// register reallocation: the sm_90 pieces a warp-specialized GEMM is made of (DeepGEMM and CUTLASS keep the same
// set in their include/ folders). Each helper is one PTX instruction or a short fixed sequence of them.
//
//   TmaDesc                 the 128-byte CUtensorMap, encoded on the host (fp8lab/kernels/tma.py) and passed by
//                           value as a `const __grid_constant__` kernel parameter: the copy engine reads it from the
//                           parameter space, so its address (&desc) is what the instructions take.
//   tma_load_2d             box of a 2-D tensor -> shared memory; the bytes count against an mbarrier's
//                           transaction count (complete_tx), so a consumer waits on the barrier, not on the copy.
//   tma_load_2d_mc          the same box written to the same offset in every CTA of `mask` (cluster multicast):
//                           one L2 read feeds two SMs.
//   tma_store_2d            shared memory -> a box of a 2-D tensor; rows/columns outside the tensor are clipped.
//   mbar_expect_tx          arrive once and announce the bytes the copies will deliver in this phase.
//   mbar_arrive_cluster     arrive on the barrier at the same offset in another CTA of the cluster (mapa).
//   cluster_sync            barrier.cluster arrive(release) + wait(acquire) over every thread of the cluster.
//   setmaxnreg_inc / _dec   move registers between warpgroups (needs __launch_bounds__(threads, 1)).
//
//   bulk_load_1d            a contiguous byte run -> shared memory (no tensor map), counted on an mbarrier.
//
// Needs sm_90 (TMA, clusters) and sm_90a (setmaxnreg, multicast): gemm_w8a8_tma.cu includes it (sources.py);
// gemv_v4.cu uses only bulk_load_1d, l2_evict_first and the mbarrier helpers, which sm_120 / sm_121 have too.
#pragma once

#include "ptx.cuh"

struct __align__(64) TmaDesc {
    u64 opaque[16];
};

__device__ __forceinline__ u64 desc_addr(const TmaDesc* d) { return reinterpret_cast<u64>(d); }

// Pull the descriptor into the copy engine's descriptor cache before the first copy needs it.
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* d) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(desc_addr(d)) : "memory");
}

// ---- loads: global -> shared, completing on an mbarrier -----------------------------------------------------
// c0 = innermost coordinate (elements along the contiguous dimension), c1 = row. Out-of-range parts of the box
// are zero-filled, and still counted in the transaction bytes (a box always delivers its full size).
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaDesc* d, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        ::"r"(dst), "l"(desc_addr(d)), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
// Multicast: the box lands at offset `dst` of every CTA whose rank bit is set in `mask`, and each of those CTAs'
// mbarrier at offset `bar` receives the byte count.
__device__ __forceinline__ void tma_load_2d_mc(u32 dst, const TmaDesc* d, u32 bar, int c0, int c1, u16 mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%4, %5}], [%2], %3;"
        ::"r"(dst), "l"(desc_addr(d)), "r"(bar), "h"(mask), "r"(c0), "r"(c1) : "memory");
}

// A contiguous run of `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared, no tensor map:
// the 1-D bulk copy (sm_90+, also sm_120 / sm_121). `policy` is an L2 cache policy (l2_evict_first()).
__device__ __forceinline__ void bulk_load_1d(u32 dst, const void* src, u32 bytes, u32 bar, u64 policy) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy) : "memory");
}
// An L2 policy for bytes read once (streamed weights): evicted first, so they do not push out what is reused.
__device__ __forceinline__ u64 l2_evict_first() {
    u64 p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

// ---- stores: shared -> global (bulk groups) -----------------------------------------------------------------
// The shared memory was written by ordinary stores (generic proxy): each writing thread runs fence_proxy_async()
// (ptx.cuh) and then a barrier orders them before the issuing thread's store.
__device__ __forceinline__ void tma_store_2d(const TmaDesc* d, u32 src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 ::"l"(desc_addr(d)), "r"(src), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N bulk groups of this thread still READ their shared memory (it may be overwritten then).
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory"); }
// Wait until at most N bulk groups of this thread are incomplete (the global writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory"); }

// ---- mbarriers with transaction counts ------------------------------------------------------------------------
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Make mbarrier.init visible to the other CTAs of the cluster and to the async proxy (the copy engine).
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// ---- clusters -------------------------------------------------------------------------------------------------
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Arrive on the mbarrier at shared offset `bar` of CTA `rank` of this cluster. The default semantics (release at
// CTA scope, as CUTLASS's ClusterBarrier::arrive) and not .release.cluster: the latter compiles to MEMBAR.ALL.GPU
// before every arrival (seen in the SASS), hundreds of cycles per k-block, and the only thing ordered here is
// this warp's finished wgmma reads before the peer's next copy into the same stage.
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 rank) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
// Predicated forms (one instruction, no branch): for code that runs while a wgmma batch is in flight, where ptxas
// serializes the wgmma pipeline if a lane-dependent branch (`if (lane == 0) ...`) sits between issue and wait.
__device__ __forceinline__ void mbar_arrive_if(u32 bar, bool pred) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n"
                 ::"r"(bar), "r"((u32)pred) : "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster_if(u32 bar, u32 rank, bool pred) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cluster.b64 _, [%0];\n}\n"
                 ::"r"(remote), "r"((u32)pred) : "memory");
}
// Every thread of every CTA of the cluster (not .aligned: callers may come from diverged code after __syncwarp).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// ---- named barriers (a warpgroup's 128 threads, id 1..15; id 0 is __syncthreads) ----------------------------------
__device__ __forceinline__ void named_sync(u32 id, u32 threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// bar.red.or over a named barrier: every one of `threads` threads waits and gets (pred of any of them).
__device__ __forceinline__ bool named_sync_or(u32 id, u32 threads, bool pred) {
    u32 r;
    asm volatile("{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}"
                 : "=r"(r) : "r"((u32)pred), "r"(id), "r"(threads) : "memory");
    return r != 0;
}

// ---- register reallocation (sm_90a) -----------------------------------------------------------------------------
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
