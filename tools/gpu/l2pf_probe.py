"""Exploratory (not a recorded result): at batch 1 the decode layer's attention reads a few MB and leaves HBM mostly
idle for microseconds; a kernel that only issues bulk L2 prefetches (cp.async.bulk.prefetch.L2) of the next GEMV's
weights, inserted into the PDL chain, could fill that idle time so the O projection (and the start of gate|up) read
from L2. The prefetch kernel issues its prefetches, lets dependents launch, then waits for its predecessor (so the
chain's ordering is kept: a kernel after it that waits, waits for everything before). Validated, then timed."""
import statistics
import sys

import torch

from fp8lab.kernels import _cuda, harness, launch_ex
from fp8lab.kernels import decode_layer as DL

SRC = r"""
extern "C" __global__ void l2_prefetch(const char* a, int a16, const char* b, int b16, int chunk16) {
    const int tid = blockIdx.x * blockDim.x + threadIdx.x, nth = gridDim.x * blockDim.x;
    for (long long c = tid; c * chunk16 < a16; c += nth) {
        const int n = min((long long)chunk16, a16 - c * chunk16) * 16;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(a + c * chunk16 * 16), "r"(n) : "memory");
    }
    for (long long c = tid; c * chunk16 < b16; c += nth) {
        const int n = min((long long)chunk16, b16 - c * chunk16) * 16;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(b + c * chunk16 * 16), "r"(n) : "memory");
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
}
"""


class Prefetch:
    def __init__(self, fn, a: torch.Tensor, a_bytes: int, b: torch.Tensor | None, b_bytes: int, pdl: bool, chunk=4096):
        import numpy as np
        cp = _cuda._cupy()
        self.fn, self.pdl = fn, pdl
        self.keep = (a, b)
        bb = b if b is not None else a
        self.args = (_cuda.as_cupy(a.view(torch.uint8)), np.int32(a_bytes // 16), _cuda.as_cupy(bb.view(torch.uint8)),
                     np.int32(b_bytes // 16 if b is not None else 0), np.int32(chunk // 16))
        self.grid = (132,)

    def __call__(self):
        stream = torch.cuda.current_stream().cuda_stream
        launch_ex.launch(self.fn, self.grid, (128,), self.args, 0, stream, pdl=self.pdl)


def nbytes(t):
    return t.numel() * t.element_size()


def main():
    cp = _cuda._cupy()
    fn = cp.RawModule(code=SRC, options=("-std=c++17",)).get_function("l2_prefetch")
    print(torch.cuda.get_device_name(), flush=True)
    shape = DL.LayerShape.from_config(DL.CONFIG)
    master = DL.make_master(shape)
    points = [(1, 1024), (1, 8192), (8, 1024)]
    for B, ctx in points:
        wcache = {}
        for v in ("fp8_fused_pdl", "nvfp4_fused_pdl", "fp8_fused_norm_pdl"):
            layers = {}
            base = DL.DecodeLayer(shape, master, v, B, ctx, max_context=ctx, weight_cache=wcache)
            layers["base"] = base
            P = base.P
            o, gu = P["o"], P["gate_up"]
            for name in ("o@attn", "o@rope", "o+gu16@rope", "o+gu32@rope"):
                L = DL.DecodeLayer(shape, master, v, B, ctx, max_context=ctx, weight_cache=wcache)
                i_att = next(i for i, s in enumerate(L.steps) if hasattr(s, "pdl_main"))
                at = i_att if name.endswith("@attn") else i_att - 1  # before attention, or before rope_append
                gub = {"o@attn": 0, "o@rope": 0, "o+gu16@rope": 16 << 20, "o+gu32@rope": 32 << 20}[name]
                L.steps.insert(at, Prefetch(fn, o.data, nbytes(o.data), gu.data if gub else None,
                                            min(gub, nbytes(gu.data)), L.pdl))
                layers[name] = L
            timers = {}
            ref = base.reference()
            for name, L in layers.items():
                ok, rel = L.validate(ref)
                if not ok:
                    print(f"B={B} ctx={ctx} {v} {name}: INVALID rel_rms {rel}", flush=True)
                    continue
                timers[name] = lambda L=L: harness.graph_time_us([L.step], min_calls=16, rep=20)[0]
            res = {k: [] for k in timers}
            for _ in range(5):
                for k, f in timers.items():
                    res[k].append(f())
            med = {k: statistics.median(x) for k, x in res.items()}
            ceil = DL.ceiling_us(DL.layer_bytes(v, B, ctx)["total"], 4000.0)
            print(f"B={B} ctx={ctx} {v}: (ceiling at 4.0 TB/s {ceil:.1f} us)", flush=True)
            for k, x in res.items():
                print(f"  {k:14s} {med[k]:7.2f} us  spread {(max(x) - min(x)) / med[k] * 100:4.1f} %  "
                      f"base/this {med['base'] / med[k]:.3f}", flush=True)
            del layers, timers
            torch.cuda.empty_cache()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
