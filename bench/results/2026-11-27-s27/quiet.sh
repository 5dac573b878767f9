#!/bin/bash
# the batch (about 20 minutes on a quiet 2-core VM): project, copy-heavy, gemma-smol project
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-27-s27
PY=".venv/bin/python $D/ab.py"
ARMS=duo,duo-overlap,sps,vanilla PER=3 TOK=128 OUT=$D/project.json $PY > $D/project.log 2>&1
Q=bench/copy_prompts.jsonl ARMS=duo,duo-overlap,duo-nolookup,vanilla PER=3 TOK=256 \
  OUT=$D/copy.json $PY > $D/copy.log 2>&1
PAIR=gemma-smol ARMS=duo,duo-overlap,sps,vanilla PER=2 TOK=128 OUT=$D/gemma.json $PY \
  > $D/gemma.log 2>&1
