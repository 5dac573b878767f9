#!/bin/bash
# issue 30's other goals under the priced schedule (about 15 minutes on a quiet 2-core VM):
# the project prompts with and without lookup, gemma-smol copy-heavy, replay with an edit
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-27-s27
PY=".venv/bin/python $D/ab.py"
ARMS=duo,duo-nolookup PER=3 TOK=128 OUT=$D/project-lookup.json $PY > $D/project-lookup.log 2>&1
PAIR=gemma-smol Q=bench/copy_prompts.jsonl ARMS=duo,duo-nolookup PER=3 TOK=128 \
  OUT=$D/gemma-copy.json $PY > $D/gemma-copy.log 2>&1
.venv/bin/python scripts/benchmark.py --pair smol-self --questions bench/copy_prompts.jsonl \
  --methods duo --limit-per-category 1 --max-new-tokens 128 --figure1-lengths= --replay \
  --out $D/replay > $D/replay.log 2>&1
