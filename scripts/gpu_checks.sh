#!/usr/bin/env bash
# The GPU check in one device call: env, methods, emulate, forward, tests, tuned, passed, in
# that order; each part under its own cap (never past the call's deadline), its files packed
# into $OUT the moment it ends, every output line stamped with the seconds since the start.
#   bash scripts/gpu_checks.sh [SECONDS] [PARTS]   on a CUDA machine (PY=.venv/bin/python in a venv)
#   DRY=1 bash scripts/gpu_checks.sh [SECONDS]     on a CPU: the same parts on tiny shapes
# $OUT holds at most 8 files (what a device call brings back): log.txt (every part's output
# as it goes), env.txt, summary.md, and methods/emulate/forward/tests.tgz.
set -u
DRY=${DRY:-}
PY=${PY:-python3}
# a machine set up by ../shared/gpu keeps the project's libraries in /tmp/site
if [ -z "$DRY" ] && [ -d /tmp/site ]; then
  export PYTHONPATH=/tmp/site DUO_CACHE_DIR=${DUO_CACHE_DIR:-/tmp/g/cache}
fi
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
OUT=${OUT:-/tmp/g/out}; W=${WORK:-/tmp/g/work}
mkdir -p "$OUT" "$W"
BUDGET=${1:-540}; PARTS=${2:-${PARTS:-env methods emulate forward tests tuned passed}}
RESERVE=${RESERVE:-10}  # seconds kept for the last copies
LOG=$OUT/log.txt; CACHE=${DUO_CACHE_DIR:-$HOME/.cache/duodecoding}
T0=$SECONDS
# caps in seconds (a part gets its cap or what is left, whichever is less): env to forward
# fill a 540 s call, the tests a second one (docs/gpu.md)
CAP_ENV=${CAP_ENV:-20} CAP_METHODS=${CAP_METHODS:-200} CAP_PROFILE=${CAP_PROFILE:-90}
CAP_SHADOW=${CAP_SHADOW:-150} CAP_FORWARD=${CAP_FORWARD:-120} CAP_TESTS=${CAP_TESTS:-240}
CAP_TUNED=${CAP_TUNED:-90} CAP_PASSED=${CAP_PASSED:-180}
if [ -n "$DRY" ]; then  # tiny shapes: one prompt, a few tokens, the eager target on the CPU
  PROMPTS=1 TOKENS=8 CTX=512 ON_DEVICE="--device cpu --target-compile off" ORACLE=$ON_DEVICE
  EMULATED=vanilla,duo SHAPE="--emulate-shape tiny"
  FORWARD="--tiny --quants int8 --paths static --depths 1,2" TUNED=$FORWARD
else
  PROMPTS=8 TOKENS=128 CTX=1024 ON_DEVICE="--target-compile on" EMULATED=vanilla,sps,duo SHAPE=""
  ORACLE="--target-compile off"  # the emulation's real target only gives the oracle's tokens
  FORWARD="--models llama8b --quants none,int8,int4 --paths compiled --depths 2,4"
  TUNED="--models llama8b --quants int8 --paths compiled --depths 2,4"
fi

left() { echo $(( BUDGET - RESERVE - (SECONDS - T0) )); }
stamp() {  # LABEL: stdin's lines, each with the seconds since the start and the label
  local line
  while IFS= read -r line; do printf '%5ds %-15s %s\n' $((SECONDS - T0)) "$1" "$line"; done
}
say() { echo "$2" | stamp "$1" | tee -a "$LOG"; }
run() {  # LABEL CAP CMD...: CMD under min(CAP, time left), its output stamped into the log
  local label=$1 cap=$2 t rc; shift 2
  t=$(left)
  if [ "$t" -lt 5 ]; then say "$label" "not run: no time left"; return 124; fi
  [ "$cap" -le "$t" ] || cap=$t
  say "$label" "start (cap $cap s)"
  # SIGINT first: pytest still prints its summary, a benchmark keeps the prompts it finished
  timeout -s INT -k 15 "$cap" "$@" 2>&1 | stamp "$label" | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  say "$label" "end: exit $rc$( [ "$rc" = 124 ] && echo ', cut at its cap')"
  echo -e "$label\t$rc\t$((SECONDS - T0))" >> "$W/parts.tsv"
  return "$rc"
}
pack() {  # PART: its folder into $OUT/PART.tgz, now
  tar czf "$OUT/$1.tgz" -C "$W" "$1" 2>/dev/null
  say "$1" "packed $OUT/$1.tgz"
}
bench() {  # LABEL CAP DIR ARGS...: scripts/benchmark.py on smol-self
  local label=$1 cap=$2 dir=$3; shift 3
  run "$label" "$cap" "$PY" scripts/benchmark.py --pair smol-self \
    --max-new-tokens "$TOKENS" --ctx-size "$CTX" --compile-buckets 1,8,32 --target-quant none \
    --figure1-lengths '' --out "$dir" "$@"
}
pytest_gpu() {  # LABEL CAP NODE...: the GPU tests in one process (compiles use every core)
  local label=$1 cap=$2; shift 2
  mkdir -p "$W/tests"
  run "$label" "$cap" env TORCHINDUCTOR_CUDAGRAPH_OR_ERROR=1 \
    TORCHINDUCTOR_COMPILE_THREADS="$(nproc)" DUO_FAILURE_LOG="$W/tests/failures.txt" \
    "$PY" -m pytest -m gpu -p no:cacheprovider -rA -v --durations=20 \
    --junitxml="$W/tests/$label.xml" "$@"
}

env_facts() {  # the CPU (the draft's speed depends on it), the GPU, the libraries
  date -u; nproc; lscpu
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" scripts/gpu_report.py --part env --out "$W/env" && cat "$W/env/report.md"
}
part_env() {
  mkdir -p "$W/env"
  export -f env_facts; export PY W
  run env "$CAP_ENV" bash -c env_facts > "$W/env/env.txt"
  cp "$W/env/env.txt" "$OUT/env.txt"
}
part_methods() {
  local d=$W/methods
  mkdir -p "$d"
  "$PY" scripts/gpu_report.py --write-questions "$PROMPTS" --out "$d"
  bench methods "$CAP_METHODS" "$d" --questions "$d/questions.jsonl" --methods vanilla,sps,duo \
    $ON_DEVICE
  # the draft's times per thread count and the budget's profiles on this machine
  for f in draft_threads profiles draft_attention draft_prefill target_paths; do
    cp "$CACHE/$f.json" "$d/" 2>/dev/null
  done
  pack methods
}
part_emulate() {
  local d=$W/emulate q=(--questions bench/prompts.jsonl --limit-per-category 1)
  mkdir -p "$d"
  [ -z "$DRY" ] || q=(--questions "$W/methods/questions.jsonl")
  # the profile clock first: it computes the oracle (kept on disk) that the shadow then reads
  bench emulate-profile "$CAP_PROFILE" "$d/profile" "${q[@]}" --methods "$EMULATED" $ORACLE \
    --emulate h100-llama8b-bf16 --emulate-clock profile
  bench emulate-shadow "$CAP_SHADOW" "$d/shadow" "${q[@]}" --methods "$EMULATED" $ORACLE \
    --emulate h100-llama8b-bf16 --emulate-clock shadow $SHAPE
  pack emulate
}
part_forward() {  # int8, int4 and bf16 at two depths, projected to the 8B's 32 layers
  run forward "$CAP_FORWARD" "$PY" scripts/gpu_report.py --part forward $FORWARD \
    --out "$W/forward"
  pack forward
}
part_tuned() {  # int8 again with torchao's coordinate-descent tuning, beside the untuned row
  run tuned "$CAP_TUNED" "$PY" scripts/gpu_report.py --part forward $TUNED --quant-tuning on \
    --out "$W/forward"
  pack forward
}
part_tests() {  # the GPU tests not yet passed on cuda (the owner thread's file: one, gpu-marked)
  pytest_gpu tests "$CAP_TESTS" \
    tests/test_owner_thread.py \
    tests/test_gpu.py::test_quantized_target_loads_and_duo_equals_vanilla \
    tests/test_gpu.py::test_int8_target_runs_within_its_estimate_under_a_cap
  pack tests
}
part_passed() {  # the ones that passed on cuda before: one shared compiled target
  pytest_gpu passed "$CAP_PASSED" \
    tests/test_gpu.py::test_cuda_graphs_engage_across_rollbacks \
    tests/test_gpu.py::test_compiled_static_argmax_equals_eager_in_float32 \
    tests/test_gpu.py::test_crossing_spans_compiles_and_records_nothing_after_the_first_time \
    tests/test_gpu.py::test_one_dynamic_graph_serves_every_chunk_length \
    tests/test_gpu.py::test_a_sampled_round_runs_the_head_once
  pack tests
}

say start "budget $BUDGET s, parts: $PARTS${DRY:+ (dry run on the CPU)}"
for p in $PARTS; do
  case $p in
    env|methods|emulate|forward|tests|tuned|passed) "part_$p" ;;
    *) say start "unknown part $p" ;;
  esac
done
"$PY" scripts/gpu_summary.py "$W" > "$OUT/summary.md" 2>> "$LOG"
say done "summary in $OUT/summary.md"
