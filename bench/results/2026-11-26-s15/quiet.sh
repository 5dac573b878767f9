#!/bin/bash
# quiet A/B: the compiled target's forward (static / padded / exact), then duo/vanilla/sps
# before (88dcec0) and after, defaults, 7 project prompts, 128 tokens, interleaved
cd /work/main
for r in 1 2; do for v in static padded exact; do timeout 900 .venv/bin/python /tmp/dyn/ab.py $v 2>&1 | grep graphs; done; done > /tmp/dyn/micro.log
for arm in before after; do
  d=/work/main; [ $arm = before ] && d=/tmp/before
  (cd $d && timeout 1200 /work/main/.venv/bin/python scripts/benchmark.py --pair smol-self --methods vanilla,sps,duo \
     --questions bench/prompts.jsonl --limit-per-category 1 --max-new-tokens 128 --figure1-lengths= --out /tmp/dyn/e2e-$arm > /tmp/dyn/e2e-$arm.log 2>&1)
done
