#!/bin/bash
# issue 30's goals at the session's end (about 15 minutes on a quiet 2-core VM): the project
# prompts twice through with and without the lookup (and a twin arm of duo-nolookup: the
# A/B's own noise), and the copy-heavy prompts beside vanilla and the prompt-lookup peers
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-27-s28
PY=".venv/bin/python $D/ab.py"
ARMS=duo,duo-nolookup,duo-nolookup@twin PER=4 REPS=2 TOK=128 OUT=$D/parity.json $PY \
  > $D/parity.log 2>&1
.venv/bin/python scripts/benchmark.py --pair smol-self --questions bench/copy_prompts.jsonl \
  --methods duo,hf-pld,llamacpp-lookup,vanilla --limit-per-category 3 --max-new-tokens 256 \
  --figure1-lengths= --out $D/peers > $D/peers.log 2>&1
