"""Exploratory (not a recorded result): decode attention version 3's in-kernel merge with the release-add arrival
(the working tree) against the __threadfence() one it replaced (patched back in), FP8 (cvt) and bf16, D = 128, the
bench's B = 8, Hq = 32, Hk = 8; torch SDPA timed in the same rounds. Both must give the same bits."""
import statistics
import sys

import torch

from fp8lab.kernels import _cuda, harness
from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels import bench_attention as ba

PATCH = att.THREADFENCE_MERGE_PATCH  # the __threadfence() pair patched back in
CONTEXTS = [int(a) for a in sys.argv[1:]] or [1024, 4096, 16384, 32768, 131072]
D = 128


def main():
    print(torch.cuda.get_device_name(), flush=True)
    for L in CONTEXTS:
        n16 = harness.sets_for_l2(ba._kv_bytes("bf16", L, D))
        n8 = harness.sets_for_l2(ba._kv_bytes("fp8cvt", L, D))
        q, bf, f8, _ = ba.make_sets(L, D, n16, n8, 0, seed=L)
        lens = torch.full((ba.B,), L, dtype=torch.int32, device="cuda")

        def mk():
            return {"bf16": [att.prepare(q, k, v, lens, version=3, max_seq_len=L) for k, v in bf],
                    "fp8": [att.prepare(q, kc, vc, lens, k_scale=ks, v_scale=vs, version=3, max_seq_len=L)
                            for kc, vc, ks, vs in f8]}
        new = mk()
        for ls in new.values():
            ls[0]()
        with _cuda.patched_sources(PATCH):
            old = mk()
            for ls in old.values():
                ls[0]()
        timers = {}
        for fmt in ("bf16", "fp8"):
            ref = new[fmt][0]().clone()
            ok = 0
            for ls in (new[fmt], old[fmt]):
                for _ in range(5):
                    harness.poison_(ls[0].out)
                    ok += torch.equal(ls[0]().view(torch.int16), ref.view(torch.int16))
            print(f"L={L} {fmt}: {ok}/10 poisoned calls (new, old) equal to the new kernel's bits; "
                  f"splits {new[fmt][0].info['num_splits']} kernel {new[fmt][0].info['kernel']}", flush=True)
            if ok != 10:
                continue
            timers[f"{fmt} new"] = lambda ls=new[fmt]: harness.graph_time_us(ls)[0]
            timers[f"{fmt} old"] = lambda ls=old[fmt]: harness.graph_time_us(ls)[0]
        q4 = q[:, :, None, :]
        sd = [ba.sdpa_call(q4, k, v) for k, v in bf]
        timers["sdpa"] = lambda: harness.graph_time_us(sd)[0]
        res = {k: [] for k in timers}
        for _ in range(5):
            for k, f in timers.items():
                res[k].append(f())
        med = {k: statistics.median(v) for k, v in res.items()}
        for k, v in res.items():
            print(f"  {k:9s} {med[k]:8.2f} us  spread {(max(v) - min(v)) / med[k] * 100:4.1f} %", flush=True)
        for w in ("new", "old"):
            if f"fp8 {w}" in med and f"bf16 {w}" in med:
                print(f"  {w}: fp8/bf16 {med[f'bf16 {w}'] / med[f'fp8 {w}']:.3f}  fp8/sdpa {med['sdpa'] / med[f'fp8 {w}']:.3f}"
                      f"  new/old fp8 {med['fp8 old'] / med['fp8 new']:.3f} bf16 {med['bf16 old'] / med['bf16 new']:.3f}",
                      flush=True)
        del q, bf, f8, new, old, sd
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
