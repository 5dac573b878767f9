#!/usr/bin/env bash
# The GPU checks in one call, inside a deadline of SECONDS (480 by default, about
# 15 minutes' work in all): the environment, `make test-gpu` (its tests in parallel: they assert
# behaviour, not time; each failure's report lands in $OUT/failures.txt as it happens), then
# `make gpu-report` parts one after another (timed alone), as many as the deadline allows.
# On the GPU machine, after ../shared/gpu's steps:  bash scripts/gpu_checks.sh SECONDS
export PYTHONPATH=/tmp/site DUO_CACHE_DIR=/tmp/g/cache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/g/out}; W=/tmp/g/work; mkdir -p "$OUT" $W
T0=$(date +%s); BUDGET=${1:-480}; RESERVE=20
left() { echo $(( BUDGET - RESERVE - ($(date +%s) - T0) )); }
at() { echo "+$(( $(date +%s) - T0 )) s"; }
finish() { cp $W/r/report.md $W/r/report.json "$OUT"/ 2>/dev/null
           tar czf "$OUT"/work.tgz -C $W . 2>/dev/null; echo "gpu_checks done at $(at)"; }
trap finish EXIT
{ nproc; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"
  python3 -c "import torchao; print('torchao', torchao.__version__)"
  python3 -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__)"; } > "$OUT"/env.txt 2>&1
# SIGINT, not TERM: pytest then still prints its summary of what failed
set -o pipefail
DUO_FAILURE_LOG="$OUT"/failures.txt PYTEST_ADDOPTS="-n ${WORKERS:-6} --dist load -rsx -vv --durations=20" \
  timeout -s INT -k 20 $(( $(left) * ${TEST_SHARE:-50} / 100 )) make test-gpu RUNPY=python3 2>&1 \
  | tee "$OUT"/test_gpu.log | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed"
echo "test-gpu exit $? at $(at)"
part() {  # PART [gpu_report args]
  local t; t=$(left); [ "$t" -gt 30 ] || { echo "no time left for $1"; return; }
  echo "== $1 (up to $t s) at $(at)"
  timeout $t make gpu-report RUNPY=python3 ARGS="--part $1 --out $W/r ${*:2}" 2>&1 \
    | tee -a "$OUT"/report.log | grep -v "Loading weights" | tail -3
}
for p in ${PARTS:-env methods forward8b graphs forward-smol}; do
  case $p in
    methods) part methods --prompts "${PROMPTS:-14}" ;;
    forward8b) part forward --models llama8b --quants none,int4,int8 --paths compiled ;;
    forward-smol) part forward --models smol-self --quants none --paths eager,compiled ;;
    *) part $p ;;
  esac
done
