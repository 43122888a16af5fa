"""Version 3 decode attention at one context over its configs and split counts (a diagnosis, not a result).

    python3 tools/gpu/attn_probe.py 16384 [rounds] [splits, e.g. auto,16,20]

B = 8, 32 q / 8 kv heads, D = 128, contiguous FP8 (cvt; every compiled config with COPY 1 or 2) and bf16 caches,
rotated over enough sets to defeat the L2; every variant validated against the float32 reference, then timed (CUDA
graph) in interleaved rounds; prints the median and [min, max] per variant, and the fraction of copy bandwidth.
"""
import sys

import torch

from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels import harness
from fp8lab.kernels.bench_attention import B, _kv_bytes, errors, make_sets, reference, sdpa_call

L = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SPLITS = tuple(None if x == "auto" else int(x) for x in sys.argv[3].split(",")) if len(sys.argv) > 3 else (None, 12, 16, 20)
D = 128
n16, n8 = harness.sets_for_l2(_kv_bytes("bf16", L, D)), harness.sets_for_l2(_kv_bytes("fp8cvt", L, D))
q, bf, f8, _ = make_sets(L, D, n16, n8, 0, seed=L + D)
lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
ref8, ref16 = reference(q, *f8[0]), reference(q, bf[0][0], bf[0][1])
copy = harness.copy_bandwidth_gbps()
variants = {}
cfgs8 = sorted({k[3:] for k in att.V3_KERNELS if k[:3] == ("fp8cvt", D, "g8") and k[4] in (1, 2)})
for cfg in cfgs8:
    for S in SPLITS:
        for merge in (True, False) if S is None else (True,):
            name = f"fp8 {cfg} S={S} merge={merge}"
            variants[name] = ([att.prepare(q, kc, vc, lens, k_scale=ks, v_scale=vs, version=3, config=cfg, num_splits=S,
                                           merge=merge, max_seq_len=L) for kc, vc, ks, vs in f8], ref8, "fp8cvt")
for cfg in sorted({k[3:] for k in att.V3_KERNELS if k[:3] == ("bf16", D, "g8") and k[4] == 1}):
    variants[f"bf16 {cfg}"] = ([att.prepare(q, k, v, lens, version=3, config=cfg, max_seq_len=L) for k, v in bf], ref16,
                               "bf16")
variants["torch sdpa"] = ([sdpa_call(q[:, :, None, :], k, v) for k, v in bf], ref16, "torch")
ok = {}
for name, (ls, ref, fmt) in variants.items():
    if fmt != "torch":
        harness.poison_(ls[0].out)  # validated on a poisoned output, before any timing
    out = ls[0]()
    if fmt == "torch":
        out = out[:, :, 0]
    e = errors(out, ref)
    ok[name] = e["valid"]
    if not e["valid"]:
        print("INVALID", name, e)
times = harness.interleave({n: (lambda ls=variants[n][0]: harness.graph_time_us(ls)) for n in variants if ok[n]}, ROUNDS)
for n, t in sorted(times.items(), key=lambda kv: kv[1].median):
    ls, _, fmt = variants[n]
    m = t.median
    info = getattr(ls[0], "info", {})
    xcopy = _kv_bytes("bf16" if fmt == "torch" else fmt, L, D) / (m * 1e-6) / (copy * 1e9)
    print(f"{n:40s} {m:8.1f} us [{t.min:.1f}, {t.max:.1f}] xcopy {xcopy:.3f} splits {info.get('num_splits')} "
          f"smem {info.get('smem')} regs {getattr(ls[0], 'main', None) and ls[0].main.attributes['num_regs']}")
