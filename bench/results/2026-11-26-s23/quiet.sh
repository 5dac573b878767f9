#!/bin/bash
# Session 23's quiet batch (nothing else running), default options (the draft alone on
# every core where that measured faster) against the draft kept on its share alone too
# (`@one`, as before), arms interleaved: the project's prompts (21, 128 tokens) with duo,
# duo@one, sps, sps@one and vanilla; the copy-heavy prompts (15, 256 tokens) with duo,
# duo@one, duo-nolookup, sps and vanilla; gemma-smol's project prompts (14, 128 tokens)
# with duo, duo@one, sps and vanilla; gemma-smol's copy-heavy prompts (15, 128 tokens) with
# duo, duo@one, duo-nolookup and vanilla (run after the others). ~45 min.
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-26-s23
Q=bench/prompts.jsonl PER=3 TOK=128 ARMS=duo,duo@one,sps,sps@one,vanilla \
  OUT=$D/project.json .venv/bin/python $D/ab.py > $D/project.log 2>&1
Q=bench/copy_prompts.jsonl PER=3 TOK=256 ARMS=duo,duo@one,nolookup,sps,vanilla \
  OUT=$D/copy.json .venv/bin/python $D/ab.py > $D/copy.log 2>&1
PAIR=gemma-smol Q=bench/prompts.jsonl PER=2 TOK=128 ARMS=duo,duo@one,sps,vanilla \
  OUT=$D/gemma-project.json .venv/bin/python $D/ab.py > $D/gemma-project.log 2>&1
PAIR=gemma-smol Q=bench/copy_prompts.jsonl PER=3 TOK=128 ARMS=duo,duo@one,nolookup,vanilla \
  OUT=$D/gemma-copy.json .venv/bin/python $D/ab.py > $D/gemma-copy.log 2>&1
