#!/usr/bin/env bash
# The recording run of every GPU result the lab commits (outputs/kernels/*.json, outputs/accumulation/), in two parts
# that each fit one device call (<= 10 min), from a clean commit:
#
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 1     # GPU tests, then the quant bench           (~2 min)
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 2     # gemm (decode, SASS), attention, prefill attention, layer,
#                                                          # accumulation (~8 min)
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 3     # gemm: the prefill climb and grid, the W8A8 gate (<= 9 min)
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 3g    # the prefill gap: TMA GPU tests, leave-one-out run, the
#                                                          # order run (~5 min)
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 2m    # the decode gap: version 3 with its arithmetic cut away
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 2l    # the decode timeline: version 3 stamped per warp (~1 min)
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 2d    # part 2's decode path only: GEMV + layer GPU tests, the
#                                                          # decode gemm bench and the layer bench (~6 min)
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 2g    # the GEMVs alone: their GPU tests and the decode gemm
#                                                          # bench (~6 min)
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 2t    # the attention alone: its GPU tests, sweep and bench
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 2y    # the decode layer alone: its GPU tests and the layer bench
#   FP8LAB_GIT_COMMIT=<sha> bash tools/gpu/record.sh 2a    # part 2's attention path only: attention + layer GPU
#                                                          # tests, the attention sweep and bench, the layer bench (~5 min)
#
# Parts 2 and 3 each write a gemm file (gemm.json, gemm_prefill.json); join them here with
#   python -c "from fp8lab.kernels import harness; harness.merge_runs(['gemm.json', 'gemm_prefill.json'],
#              'outputs/kernels/gemm.json', 'merge_runs(record.sh 2 gemm.json, record.sh 3 gemm_prefill.json)')"
# (each record keeps its run's commit and its own same-run anchors).
#
# Tests run first (every kernel validated against its CPU/float64 reference, outputs poisoned) and never beside a
# timing: the GPU is shared by nothing while a benchmark runs. Each stage is bounded by `timeout`; a stage that fails
# is recorded and the next one runs. Everything lands in $OUT/record<part>.tgz (unpack at the repository root).
set -u
PART=${1:?part 1 or 2}
export PYTHONPATH=$PWD
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-$PWD/.cupy_cache}     # kept on a warm machine between the two parts
OUT=${OUT:-/tmp/record_out}
S=$OUT/stage
mkdir -p "$S/outputs/kernels" "$S/outputs/accumulation" "$S/logs"
K=$S/outputs/kernels
L=$S/logs
T0=$(date +%s)
stage() { echo "== $1 at $(( $(date +%s) - T0 )) s" | tee -a "$L/steps_$PART.txt"; }
# the decode benches, shared by parts 2 and 2d: the GEMVs (versions 1-5, anchors, SASS), then the decode layer
decode_gemm() {
  stage "gemm bench (anchors, decode v1-v5, SASS)"
  timeout 330 python3 -m fp8lab.kernels.bench gemm --no-pytest --only decode,sass --budget-s 280 --out "$K/gemm.json" > "$K/gemm_bench_log.txt" 2>&1; echo "gemm rc=$?" >> "$L/steps_$PART.txt"
}
decode_layer() {
  stage "decode layer bench"
  timeout 130 python3 -m fp8lab.kernels.bench layer --budget-s 100 --out "$K/layer.json" > "$L/layer.log" 2>&1; echo "layer rc=$?" >> "$L/steps_$PART.txt"
}
# the decode attention's GPU tests, sweep and bench, shared by parts 2a and 2t: attention_path <tests timeout> <sweep
# timeout> <bench timeout> <bench budget> [more test files]
attention_path() {
  local t_tests=$1 t_sweep=$2 t_bench=$3 budget=$4; shift 4
  stage "GPU tests: decode attention${1:+ and $*}"
  timeout "$t_tests" python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/test_kernels_attention.py \
      tests/test_kernels_attention_nvfp4.py "$@" > "$L/pytest_attention.log" 2>&1; echo "rc=$?" >> "$L/pytest_attention.log"
  cp "$L/pytest_attention.log" "$K/gpu_tests_attention.log"
  stage "attention sweep (every compiled configuration at 16k and 32k, D = 128)"
  timeout "$t_sweep" python3 -m fp8lab.kernels.bench attention --sweep --contexts 16384,32768 --out "$K/attention_sweep.json" > "$L/attention_sweep.log" 2>&1; echo "attention sweep rc=$?" >> "$L/steps_$PART.txt"
  stage "attention bench"
  timeout "$t_bench" python3 -m fp8lab.kernels.bench attention --budget-s "$budget" --pytest-log "$L/pytest_attention.log" \
      --out "$K/attention.json" > "$L/attention.log" 2>&1; echo "attention rc=$?" >> "$L/steps_$PART.txt"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$L/nvidia_smi_$PART.txt" 2>&1

if [ "$PART" = 1 ]; then
  stage "GPU tests (six processes)"
  run_t() { local name=$1; shift; timeout 170 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider "$@" > "$L/pytest_$name.log" 2>&1; echo "rc=$?" >> "$L/pytest_$name.log"; }
  run_t quant tests/test_kernels_quant.py tests/test_scaling_cuda.py tests/test_accumulation.py tests/test_sweep_gpu.py tests/test_distributed.py &
  run_t gemm tests/test_kernels_gemm.py &
  run_t layer tests/test_decode_layer.py &
  run_t tma tests/test_kernels_gemm_tma.py &
  run_t attention tests/test_kernels_attention.py &
  run_t attention_more tests/test_kernels_attention_nvfp4.py tests/test_kernels_attention_prefill.py tests/test_kernels_gb10.py &
  wait
  cat "$L"/pytest_*.log > "$K/gpu_tests.log"
  stage "quant bench"
  timeout 100 python3 -m fp8lab.kernels.bench quant --out "$K/quant.json" > "$K/quant_bench.log" 2>&1; echo "quant rc=$?" >> "$L/steps_1.txt"
elif [ "$PART" = 2 ]; then
  stage "GPU test of the accumulation bench"
  timeout 40 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/test_accumulation.py > "$L/pytest_accumulation.log" 2>&1; echo "rc=$?" >> "$L/pytest_accumulation.log"
  decode_gemm
  stage "attention bench"
  timeout 130 python3 -m fp8lab.kernels.bench attention --budget-s 100 --out "$K/attention.json" > "$L/attention.log" 2>&1; echo "attention rc=$?" >> "$L/steps_2.txt"
  stage "prefill attention bench"
  timeout 90 python3 -m fp8lab.kernels.bench prefill_attn --budget-s 65 --out "$K/prefill_attention.json" > "$L/prefill_attention.log" 2>&1; echo "prefill_attn rc=$?" >> "$L/steps_2.txt"
  decode_layer
  stage "accumulation (torch._scaled_mm fast accumulation)"
  timeout 50 python3 -m fp8lab.accumulation --gpu --out "$S/outputs/accumulation/scaled_mm_fast_accum.json" > "$L/accumulation.log" 2>&1; echo "accumulation rc=$?" >> "$L/steps_2.txt"
elif [ "$PART" = 2d ]; then
  # the decode path alone (the GEMVs and the decode layer re-recorded after a GEMV change; the attention, prefill
  # attention and accumulation files of part 2 stay as recorded): its GPU tests, then the two benches
  stage "GPU tests: GEMVs and the decode layer"
  timeout 150 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -k "gemv or v3 or v4 or decode" tests/test_kernels_gemm.py \
      tests/test_decode_layer.py > "$L/pytest_decode.log" 2>&1; echo "rc=$?" >> "$L/pytest_decode.log"
  cp "$L/pytest_decode.log" "$K/gpu_tests_decode.log"
  decode_gemm
  decode_layer
elif [ "$PART" = 2g ]; then
  # the GEMVs alone (a GEMV version added or changed that the decode layer does not use): their GPU tests and the
  # decode gemm bench; join the result to the committed file's prefill run (harness.run_of + merge_runs, see above)
  stage "GPU tests: GEMVs"
  timeout 120 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -k "gemv or v3 or v4" tests/test_kernels_gemm.py \
      > "$L/pytest_decode.log" 2>&1; echo "rc=$?" >> "$L/pytest_decode.log"
  cp "$L/pytest_decode.log" "$K/gpu_tests_decode.log"
  decode_gemm
elif [ "$PART" = 2a ]; then
  # the decode attention re-recorded after an attention change (the layer's attention is the default kernel, so the
  # layer too; the GEMV, prefill attention and accumulation files of part 2 stay as recorded)
  attention_path 200 90 140 110 tests/test_decode_layer.py
  decode_layer
elif [ "$PART" = 2y ]; then
  # the decode layer alone (its kernels' tests and the layer bench; the GEMV and attention files stay as recorded):
  # after a change that those files' own parts recorded, or on a GPU that has none of it yet (~2.5 min)
  stage "GPU tests: the decode layer"
  timeout 120 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/test_decode_layer.py \
      > "$L/pytest_layer.log" 2>&1; echo "rc=$?" >> "$L/pytest_layer.log"
  cp "$L/pytest_layer.log" "$K/gpu_tests_layer.log"
  decode_layer
elif [ "$PART" = 2t ]; then
  # the decode attention alone (a change that leaves the layer's kernels as they were: e.g. a sweep-only config):
  # its GPU tests, the sweep and the bench (~3 min)
  attention_path 110 75 100 85
elif [ "$PART" = 3g ]; then
  # where the prefill gap goes (its own file, outputs/kernels/prefill_gap.json): the TMA GPU tests of the kernels it
  # times, then the leave-one-out run (gemm_prefill.bench_gap)
  stage "GPU tests: TMA kernels"
  timeout 150 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/test_kernels_gemm_tma.py \
      > "$L/pytest_tma.log" 2>&1; echo "rc=$?" >> "$L/pytest_tma.log"
  cp "$L/pytest_tma.log" "$K/gpu_tests_tma.log"
  stage "is the SASS offline the SASS CuPy runs? (the gap run's edits start from the offline cubin)"
  timeout 120 python3 tools/check_cupy_options.py gemm_w8a8_tma.cu > "$K/check_cupy_options_tma.log" 2>&1
  echo "check_cupy_options rc=$?" >> "$K/check_cupy_options_tma.log"
  stage "gemm bench: the prefill gap (leave-one-out, staggered consumers, control-bit edits) and the order run"
  timeout 360 python3 -m fp8lab.kernels.bench gemm --no-pytest --no-smoke --only gap,order --budget-s 320 --out "$K/prefill_gap.json" > "$K/prefill_gap_log.txt" 2>&1; echo "gap rc=$?" >> "$L/steps_3g.txt"
elif [ "$PART" = 2m ]; then
  # where the decode GEMV's time goes (its own file, outputs/kernels/decode_gap.json): version 3 at its defaults with its
  # arithmetic cut away (gemm_decode.bench_decode_gap), beside the shipped kernel and the anchors (~3 min)
  stage "gemm bench: the decode gap (version 3 with its arithmetic cut away)"
  timeout 300 python3 -m fp8lab.kernels.bench gemm --no-pytest --no-smoke --only decode_gap --budget-s 260 --out "$K/decode_gap.json" > "$K/decode_gap_log.txt" 2>&1; echo "decode gap rc=$?" >> "$L/steps_2m.txt"
elif [ "$PART" = 2l ]; then
  # version 3's call warp by warp (its own file, outputs/kernels/decode_timeline.json): the clock read four times per
  # warp in an instrumented copy, beside the shipped kernel and the anchors (gemv_timeline.bench_decode_timeline, ~1 min)
  stage "gemm bench: the decode timeline (version 3 stamped per warp)"
  timeout 240 python3 -m fp8lab.kernels.bench gemm --no-pytest --no-smoke --only decode_timeline --budget-s 200 --out "$K/decode_timeline.json" > "$K/decode_timeline_log.txt" 2>&1; echo "decode timeline rc=$?" >> "$L/steps_2l.txt"
elif [ "$PART" = 3 ]; then
  stage "gemm bench (prefill climb and grid, W8A8 gate)"
  timeout 560 python3 -m fp8lab.kernels.bench gemm --no-pytest --no-smoke --only prefill,gate --budget-s 480 --out "$K/gemm_prefill.json" > "$K/gemm_prefill_bench_log.txt" 2>&1; echo "gemm prefill rc=$?" >> "$L/steps_3.txt"
fi
stage "done"
tar czf "$OUT/record$PART.tgz" -C "$S" .
cp "$L/steps_$PART.txt" "$OUT/" 2>/dev/null; SUMMARY_LOGS=$(ls "$L"/pytest_*.log 2>/dev/null)
echo "---- summary part $PART ($(( $(date +%s) - T0 )) s)"
cat "$L/steps_$PART.txt"
for f in $SUMMARY_LOGS; do [ -f "$f" ] && echo "$(basename $f): $(grep -E '[0-9]+ (passed|failed)' $f | tail -1) $(tail -1 $f)"; done 2>/dev/null
grep -hE "^FAILED|^ERROR" $SUMMARY_LOGS /dev/null 2>/dev/null | head -12
rm -rf "$S"     # only the tarball comes back
