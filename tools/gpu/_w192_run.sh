set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.sm --format=csv
timeout 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_kernels_gemm_tma.py -k "w192 or all_versions or tensor_map" 2>&1 | tail -15
timeout 330 python3 -m fp8lab.kernels.gemm_prefill --tune --shapes 4096x7168x7168,8192x4096x4096,2048x14336x4096,4096x4096x14336,4096x18944x3584 --kernels wgmma_tma_e_ss_tmastore,wgmma_tma_w192_ss_tmastore,wgmma_tma_w192_ss_s5,wgmma_tma --rounds 5 --out $OUT/tune.json > $OUT/tune.log 2>&1; echo tune rc=$?
python3 - <<'PY'
import json,os,statistics
d=json.load(open(os.environ['OUT']+'/tune.json'))
print({k:v.get('passed') for k,v in d['validation'].items() if not v.get('passed')})
rows=d['results']
by={}
for r in rows:
    by.setdefault(r.get('shape'),[]).append(r)
for sh,rs in by.items():
    bw=[r for r in rs if 'blockwise' in r['kernel']]
    b=bw[0]['time_us'] if bw else None
    print(sh)
    for r in rs:
        print(f"   {r['kernel'][:60]:60s} {r['time_us']:8.1f} us  spread {r.get('spread_us')}  x_blockwise {b/r['time_us'] if b else 0:.3f}")
PY
