"""The decode layer's attention alone (B = 1, 32 q / 8 kv heads, D = 128, FP8 cache, 1k tokens) at several split
counts: where a short context's call time goes (a diagnosis, not a result). python3 tools/gpu/attn_small_probe.py"""
import statistics
import sys

import torch

from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels import harness

L = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
B, Hq, Hk, D = 1, 32, 8, 128
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(B, Hq, D, device="cuda", generator=g).to(torch.bfloat16)
sets = [(torch.randint(0, 0x70, (B, Hk, L, D), device="cuda", dtype=torch.uint8, generator=g),
         torch.randint(0, 0x70, (B, Hk, L, D), device="cuda", dtype=torch.uint8, generator=g)) for _ in range(4)]
lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
ref = att.reference_decode_attention(q.cpu(), sets[0][0].cpu(), sets[0][1].cpu(), 0.01, 0.01, seq_lens=[L] * B)
var = {}
for S in (None, 8, 32, 64):
    for merge in (True, False):
        ls = [att.prepare(q, k, v, lens, k_scale=0.01, v_scale=0.01, version=3, num_splits=S, merge=merge) for k, v in sets]
        out = ls[0]().float().cpu()
        err = float((out - ref).abs().max())
        var[f"S={ls[0].info['num_splits']} merge={ls[0].info['merge']}"] = (ls, err)
times = {n: [] for n in var}
for _ in range(5):
    for n, (ls, _) in var.items():
        times[n].append(harness.graph_time_us(ls)[0])
for n, ts in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
    print(f"{n:28s} {statistics.median(ts):6.2f} us [{min(ts):.2f}, {max(ts):.2f}] max err {var[n][1]:.2e}")
