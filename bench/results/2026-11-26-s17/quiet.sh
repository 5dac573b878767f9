#!/bin/bash
# The session's quiet batch (nothing else running), default options: the bands' calibration
# A/B (local against carried) with duo-nolookup, sps and vanilla on the project's and the
# copy-heavy prompts (smol-self), gemma-smol's copy-heavy, then replay with an edit.
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-26-s17
P=".venv/bin/python $D/local_ab.py"
Q=bench/prompts.jsonl PER=3 TOK=128 ARMS=local,carried,nolookup,sps,vanilla OUT=$D/project.json $P > $D/project.log 2>&1
PER=3 TOK=256 ARMS=local,carried,nolookup,vanilla OUT=$D/copy.json $P > $D/copy.log 2>&1
PAIR=gemma-smol PER=1 TOK=128 ARMS=local,carried,nolookup OUT=$D/gemma-copy.json $P > $D/gemma-copy.log 2>&1
.venv/bin/python scripts/benchmark.py --pair smol-self --figure1-lengths= --questions bench/copy_prompts.jsonl \
  --limit-per-category 1 --max-new-tokens 128 --methods duo --replay --out $D/replay > $D/replay.log 2>&1
