#!/bin/bash
# Session 21's quiet batch (nothing else running), default options: the project's prompts (21,
# 128 tokens) with duo, duo with the draft's prefill on every core as before (`serial`),
# duo-nolookup, sps and vanilla; the copy-heavy prompts (15, 256 tokens) with duo, serial,
# duo-nolookup and vanilla; gemma-smol copy-heavy (5, 128 tokens); the replay with an edit
# (5, 128 tokens, pass 2 against pass 1).
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-26-s21
Q=bench/prompts.jsonl PER=3 TOK=128 ARMS=local,serial,nolookup,sps,vanilla OUT=$D/project.json \
  .venv/bin/python $D/ab.py > $D/project.log 2>&1
Q=bench/copy_prompts.jsonl PER=3 TOK=256 ARMS=local,serial,nolookup,vanilla OUT=$D/copy.json \
  .venv/bin/python $D/ab.py > $D/copy.log 2>&1
PAIR=gemma-smol Q=bench/copy_prompts.jsonl PER=1 TOK=128 ARMS=local,serial,nolookup \
  OUT=$D/gemma-copy.json .venv/bin/python $D/ab.py > $D/gemma-copy.log 2>&1
.venv/bin/python scripts/benchmark.py --pair smol-self --figure1-lengths= --questions bench/copy_prompts.jsonl \
  --limit-per-category 1 --max-new-tokens 128 --methods duo --replay --out $D/replay > $D/replay.log 2>&1
# afterwards, the chunk padding alone (`exact`: as before it), 10 copy-heavy and 14 project prompts
Q=bench/copy_prompts.jsonl PER=2 TOK=256 ARMS=local,exact OUT=$D/pad-copy.json \
  .venv/bin/python $D/ab.py > $D/pad-copy.log 2>&1
Q=bench/prompts.jsonl PER=2 TOK=128 ARMS=local,exact OUT=$D/pad-project.json \
  .venv/bin/python $D/ab.py > $D/pad-project.log 2>&1
