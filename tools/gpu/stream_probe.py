"""How fast a kernel can READ a large buffer on this GPU, by the way its bytes arrive (a diagnosis, not a result).

    python3 tools/gpu/stream_probe.py                 # 64 MiB and 256 MiB buffers, every variant of stream_probe.cu
    python3 tools/gpu/stream_probe.py 32 56 64        # other sizes (MiB per call), e.g. the decode goals' weights

Read-only streams over buffers rotated past the L2 (harness.sets_for_l2), each timed as a CUDA graph in interleaved
rounds (median, [min, max]); GB/s counts the bytes each variant actually reads. Beside them: the copy bandwidth of
the same run (read + write counted, harness.copy_bandwidth_gbps) and bf16 cuBLAS at M = 1 (F.linear), the anchors the
decode kernels are held to. The question: do larger bulk copies (a block-wide ring) stream closer to the memory
limit than per-warp rings of 2 KB units (gemv_v4, attention version 3) or plain 16-byte loads?
"""
import sys
from pathlib import Path

import torch

from fp8lab.kernels import _cuda, harness

HERE = Path(__file__).resolve().parent
cp = _cuda._cupy()
# the package's options for a source with no defines of its own (the format constants ptx.cuh needs)
OPTIONS = _cuda.compile_options("decode_layer.cu", "sm_90a")
mod = cp.RawModule(code=(HERE / "stream_probe.cu").read_text(), options=OPTIONS, backend="nvrtc")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
out = torch.zeros(4, dtype=torch.int32, device="cuda")


def variant(name, bufs, nbytes):
    """(calls, bytes read per call)"""
    fn = mod.get_function(name)
    if name.startswith("read_ldg"):
        grid, block, smem = SMS * 8, 256, 0
        per, total = None, nbytes
    elif name.startswith("read_warp"):
        _, _, wb, ns = name.split("_")
        wb, ns = int(wb), int(ns)
        smem = 4 * ns * (wb + 8)
        _cuda.allow_dynamic_smem(fn, smem)
        from fp8lab.kernels.launch_ex import resident_ctas
        grid, block = SMS * resident_ctas(fn, 128, smem), 128
        per = (nbytes // (grid * 4)) // wb * wb
        total = per * grid * 4
    else:
        _, _, sb, ns = name.split("_")
        sb, ns = int(sb), int(ns)
        smem = ns * sb + 8 * ns
        _cuda.allow_dynamic_smem(fn, smem)
        from fp8lab.kernels.launch_ex import resident_ctas
        grid, block = SMS * resident_ctas(fn, 256, smem), 256
        per = (nbytes // grid) // sb * sb
        total = per * grid
    o = _cuda.as_cupy(out)

    def call(a):  # a: the buffer's CuPy view, made once (a DLPack conversion inside a graph capture breaks it)
        stream = torch.cuda.current_stream().cuda_stream
        with cp.cuda.ExternalStream(stream):
            if per is None:
                fn((grid,), (block,), (a, cp.uint64(nbytes // 16), o))
            else:
                fn((grid,), (block,), (a, cp.uint64(per), o), shared_mem=smem)
    views = [_cuda.as_cupy(b) for b in bufs]
    return [lambda a=a: call(a) for a in views], total, f"grid {grid} x {block}"


def main(sizes=(64, 256)):
    copy = harness.copy_bandwidth_gbps()
    print(f"copy bandwidth {copy:.0f} GB/s (read + write)")
    names = ["read_ldg4", "read_ldg8", "read_warp_2048_3", "read_warp_2048_6", "read_warp_4096_4", "read_cta_8192_4",
             "read_cta_16384_4", "read_cta_32768_3", "read_cta_65536_3"]
    for mib in sizes:
        nbytes = mib * 2**20
        nsets = harness.sets_for_l2(nbytes)
        bufs = [torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda") for _ in range(nsets)]
        vs = {n: variant(n, bufs, nbytes) for n in names}
        K = nbytes // 2 // 4096  # bf16 F.linear at M = 1 reading the same bytes: [K x 4096] weights
        w = [torch.randn(K, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(nsets)]
        x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
        vs["cublas_bf16_gemv"] = ([lambda w=w_: torch.nn.functional.linear(x, w) for w_ in w], K * 4096 * 2, "F.linear M=1")
        ts = harness.interleave({n: (lambda calls=calls: harness.graph_time_us(calls)) for n, (calls, _, _) in vs.items()})
        print(f"\n{mib} MiB per call, {nsets} buffers rotated")
        for n, t in sorted(ts.items(), key=lambda kv: kv[1].median):
            gbps = vs[n][1] / (t.median * 1e3)
            print(f"  {n:20s} {t.median:8.2f} us [{t.min:.2f}, {t.max:.2f}] {gbps:6.0f} GB/s  {gbps / copy:.3f} of copy   "
                  f"{vs[n][2]}  ({t.how})")
        del bufs, w
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(tuple(int(a) for a in sys.argv[1:]) or (64, 256)))
