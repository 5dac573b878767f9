#!/bin/bash
# The tenth suite-cut session's quiet batch (nothing else running), default options: duo,
# duo-nolookup, sps and vanilla on the project's prompts (21, 128 tokens), then duo,
# duo-nolookup and vanilla on the copy-heavy prompts (15, 256 tokens), arms interleaved prompt
# by prompt (the same scripts as 2026-11-26-s18, run again after the suite's cuts).
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-26-s19
Q=bench/prompts.jsonl PER=3 TOK=128 ARMS=local,nolookup,sps,vanilla OUT=$D/project.json \
  .venv/bin/python bench/results/2026-11-26-s17/local_ab.py > $D/project.log 2>&1
PER=3 TOK=256 ARMS=local,nolookup,vanilla OUT=$D/copy.json \
  .venv/bin/python bench/results/2026-11-26-s17/local_ab.py > $D/copy.log 2>&1
