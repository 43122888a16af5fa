"""Run the decode-attention kernels a few times each, for Nsight Compute (a diagnosis, not a result).

    ncu --kernel-name regex:decode_ --section SpeedOfLight --section WarpStateStats ... \
        python3 tools/gpu/ncu_attn.py 32768 128

One problem (B = 8, 32 q / 8 kv heads, context and head_dim from the command line, contiguous cache): version 1 FP8
(cvt) and bf16, version 2 FP8 (cvt, default config) and bf16, each called twice on the same inputs; ncu picks the
launches by kernel-name regex. Prints each launch's kernel name, split count and split length.
"""
import sys

import torch

from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels.bench_attention import make_sets

L = int(sys.argv[1]) if len(sys.argv) > 1 else 32768
D = int(sys.argv[2]) if len(sys.argv) > 2 else 128
versions = tuple(int(v) for v in sys.argv[3].split(",")) if len(sys.argv) > 3 else (1, 2)
q, bf, f8, _ = make_sets(L, D, 1, 1, 0, seed=0)
(k, v), (kc, vc, ks, vs) = bf[0], f8[0]
lens = torch.full((q.shape[0],), L, dtype=torch.int32, device="cuda")
launches = []
for ver in versions:
    launches.append(att.prepare(q, kc, vc, lens, k_scale=ks, v_scale=vs, conv="cvt", version=ver, max_seq_len=L))
    launches.append(att.prepare(q, k, v, lens, version=ver, max_seq_len=L))
for fn in launches:
    for _ in range(2):
        fn()
torch.cuda.synchronize()
for fn in launches:
    i = fn.info
    print("ran", i["kernel"], "splits", i["num_splits"], "split_len", i["split_len"], flush=True)
