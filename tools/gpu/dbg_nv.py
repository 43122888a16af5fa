import sys, zlib, torch
sys.path.insert(0, "tests")
import test_kernels_attention_nvfp4 as T
from fp8lab.kernels import attention_nvfp4kv as nv
D, layout, page, dist, per_head = 64, "contig", 0, "wide", True
kw, ref, vmax = T.case(B=5, Hq=8, Hk=2, D=D, lens=(1, 13, 65, 333, 1001), dist=dist, per_head=per_head, layout=layout,
                       page=16, seed=zlib.crc32(repr((D, layout, page, dist, per_head)).encode()) % 1000)
print("ref finite", torch.isfinite(ref).all().item(), "ref absmax", ref.abs().max().item())
for ver, merge in ((2, None), (3, False), (3, True)):
    for rep in range(4):
        out = T.run_kernel(kw, version=ver, merge=merge).double()
        bad = ~torch.isfinite(out)
        idx = bad.nonzero()
        rows = sorted({(int(b), int(h)) for b, h, _ in idx.tolist()})
        err = (out - ref.double()).abs()[~bad].max().item() if (~bad).any() else None
        print(ver, merge, rep, "nonfinite", int(bad.sum()), "rows", rows[:8], "vals", out[bad][:4].tolist(), "maxerr", err)
fn = nv.prepare(**{k: (v.to("cuda") if isinstance(v, (torch.Tensor, nv.NVFP4Cache)) else v) for k, v in kw.items()}, version=3)
print(fn.info["num_splits"], fn.info["split_len"], fn.info["merge"], fn.info["config"])
