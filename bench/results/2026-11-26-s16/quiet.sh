#!/bin/bash
# The session's quiet batch (nothing else running): solo rounds A/B on the copy-heavy and the
# project's prompts (smol-self), then gemma-smol's copy-heavy, default options.
cd "$(dirname "$0")/../../.." || exit 1
D=bench/results/2026-11-26-s16
P=".venv/bin/python $D/solo_ab.py"
PER=3 TOK=256 OUT=$D/copy.json $P > $D/copy.log 2>&1
Q=bench/prompts.jsonl PER=3 TOK=128 ARMS=solo,beside,nolookup OUT=$D/project.json $P > $D/project.log 2>&1
PAIR=gemma-smol PER=1 TOK=128 ARMS=solo,beside,nolookup OUT=$D/gemma-copy.json $P > $D/gemma-copy.log 2>&1
