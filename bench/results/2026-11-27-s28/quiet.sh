#!/bin/bash
# session 28's A/B (about 15 minutes on a quiet 2-core VM): the project prompts (all 28) and
# the copy-heavy ones (all 16), duo against duo as before and duo-nolookup; the change it
# measures is reverted: from the repository, `git apply bench/results/2026-11-27-s28/*.patch` first
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-27-s28
PY=".venv/bin/python $D/ab.py"
ARMS=duo,duo@old,duo-nolookup PER=4 TOK=128 OUT=$D/project.json $PY > $D/project.log 2>&1
Q=bench/copy_prompts.jsonl ARMS=duo,duo@old,duo-nolookup PER=4 TOK=256 OUT=$D/copy.json $PY \
  > $D/copy.log 2>&1
