#!/bin/bash
# Issue 29: duo with the default options against duo on each forced target path, back to back,
# the 21 project prompts at 128 tokens (quiet machine, about 6 minutes).
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-26-s17
for mode in auto off on; do
  .venv/bin/python scripts/benchmark.py --figure1-lengths= --pair smol-self \
    --questions bench/prompts.jsonl --limit-per-category 3 --max-new-tokens 128 \
    --methods duo --target-compile $mode --out $D/paths-$mode > $D/paths-$mode.log 2>&1
done
