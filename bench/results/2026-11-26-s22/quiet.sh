#!/bin/bash
# Session 22's quiet batch (nothing else running), default options (the target on packed
# weights) against the same target unpacked (`@unpacked`, --target-pack off), arms
# interleaved: the project's prompts (21, 128 tokens) with duo, duo@unpacked, duo on the
# eager path (`auto` compiled it here: issue 29's first goal), duo-nolookup, sps and vanilla;
# the copy-heavy prompts (15, 256 tokens) with duo, duo@unpacked, duo-nolookup and vanilla;
# gemma-smol's copy-heavy (15, 128 tokens) and project prompts (14, 128 tokens). ~45 min.
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-26-s22
Q=bench/prompts.jsonl PER=3 TOK=128 OUT=$D/project.json \
  ARMS=duo,duo@unpacked,duo@eager,nolookup,sps,vanilla \
  .venv/bin/python $D/ab.py > $D/project.log 2>&1
Q=bench/copy_prompts.jsonl PER=3 TOK=256 ARMS=duo,duo@unpacked,nolookup,vanilla \
  OUT=$D/copy.json .venv/bin/python $D/ab.py > $D/copy.log 2>&1
PAIR=gemma-smol Q=bench/copy_prompts.jsonl PER=3 TOK=128 \
  ARMS=duo,duo@unpacked,nolookup,vanilla OUT=$D/gemma-copy.json \
  .venv/bin/python $D/ab.py > $D/gemma-copy.log 2>&1
PAIR=gemma-smol Q=bench/prompts.jsonl PER=2 TOK=128 \
  ARMS=duo,duo@unpacked,duo@eager,sps,vanilla OUT=$D/gemma-project.json \
  .venv/bin/python $D/ab.py > $D/gemma-project.log 2>&1
