# The lab's entry points. Each installs what it needs first (CPU machine, Python >= 3.10).
#   make sweep   -> python -m fp8lab.sweep --plot   the default quality sweep into runs/default (git-ignored);
#                   reuses the cells already there and says what it computed and what it reused (~9 min fresh)
#   make test    -> python -m pytest                tests, including every notebook, on the CPU
#   make lab     -> installs JupyterLab and opens the notebooks
#   make record  -> re-records the committed reference sweep in outputs/ (from a clean commit only; ~9 min);
#                   record-sweep-more, record-kv, record-kv-8k, record-overhead re-record the others
PY ?= python3

install:
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .

sweep: install
	$(PY) -m fp8lab.sweep --plot

test: install
	$(PY) -m pytest -q

lab: install
	$(PY) -m pip install -q -r requirements-lab.txt
	cd notebooks && $(PY) -m jupyter lab

# ---- re-recording the committed results (outputs/) -------------------------------------------------------
# Each target replaces its reference (--fresh; the old files stay in git history) and writes with --record. They
# refuse to run on a tree with uncommitted changes: a committed result must name the clean commit that made it
# (the runs record the commit before they touch any file), so commit each one's outputs before the next.
# Times on the lab's 2-core CPU.
KV_MORE = bf16,e4m3-kv,e4m3-kv-tok,e4m3-kv-perchannel,e4m3-kv-uncal,e4m3-kv-cal256,e4m3-kv-cal256-channel,e5m2-kv,e5m2-kv-tok,nvfp4-w,mxfp4-w,w8a8-block,int8-w

clean-tree:
	@test -z "$$(git status --porcelain)" || { echo "make record needs a clean tree: commit or stash first" >&2; exit 2; }

record-sweep: install clean-tree           # ~9 min
	$(PY) -m fp8lab.sweep --record --fresh --plot --quiet

record-sweep-more: install clean-tree      # ~8 min
	$(PY) -m fp8lab.sweep --record --fresh --out outputs/sweep_more --recipes $(KV_MORE) --tasks ppl --plot --quiet

record-kv: install clean-tree              # ~9 min
	$(PY) -m fp8lab.kv_drift --windows 8 --seq-len 2048 --record --quiet

record-kv-8k: install clean-tree           # ~30 min
	$(PY) -m fp8lab.kv_drift --seq-len 8192 --windows 4 --configs baseline,e4m3-uncal,e4m3-cal256,e4m3-dyn --record --out outputs/kv_drift_8k --quiet

record-overhead: install clean-tree        # ~4 min
	$(PY) -m fp8lab.sweep --bench-overhead --record

record: record-sweep

.PHONY: install sweep test lab clean-tree record record-sweep record-sweep-more record-kv record-kv-8k record-overhead
