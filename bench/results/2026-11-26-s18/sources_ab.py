"""A/B of the lookup's sources learned apart (issue 30): `duo` as shipped (split: the context's
and the memory's bands apart, the better-priced proposal taken) against one set of bands for
both (shared: the longer match taken, as before), on the replay with an edit: pass 1 over the
copy-heavy prompts, then pass 2 over the same prompts edited, each arm with its own memory and
its own learning, the arms interleaved prompt by prompt in both passes. Default options.
Prints each prompt's walls; per pass the median of (shared / split) walls; per arm the median
of pass 1 / pass 2 walls (the replay's speed-up). Env: PER, TOK, OUT."""
import bisect
import os
import statistics
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from core import budget as B, suffix as S  # noqa: E402
from core.suffix import SuffixMemory  # noqa: E402
from measure.ab import run_arms  # noqa: E402
from measure.replay import edited  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import load_options, load_questions, method_config, parse, run_one  # noqa

ARMS = ("split", "shared")
args = parse(["--pair", "smol-self", "--questions", "bench/copy_prompts.jsonl",
              "--max-new-tokens", os.environ.get("TOK", "256"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
cfg = method_config(args, "duo")
memories = {arm: SuffixMemory(pair.lookup_memory.cap_tokens) for arm in ARMS}
split_band, split_propose = B.LookupBands.band, S.ContextLookup.propose


def shared_band(conf, source="context"):
    return bisect.bisect_right(B.BAND_EDGES, conf)


def shared_propose(self, max_len, pending=(), score=None):
    return split_propose(self, max_len, pending)


def patch(arm: str) -> None:
    B.LookupBands.band = staticmethod(split_band if arm == "split" else shared_band)
    S.ContextLookup.propose = split_propose if arm == "split" else shared_propose
    pair.lookup_memory = memories[arm]  # the arm's own, kept between the passes


run_one(pair, pair.prompt_ids("Warm up: say one word."), cfg)
questions = load_questions(args.questions, int(os.environ.get("PER", "3")))
second = [dict(q, prompt=edited(q["prompt"])) for q in questions]
store: dict = {}
rows = {}
for name, qs in (("pass1", questions), ("pass2", second)):
    print(name, flush=True)
    rows[name] = run_arms(pair, qs, {arm: cfg for arm in ARMS}, run_one, patch, "split", store,
                          forget_memory=False)
out = {"rows": rows}
for name in rows:
    r = statistics.median(x["shared"]["wall_s"] / x["split"]["wall_s"] for x in rows[name])
    print(f"{name}: shared / split wall (median) {r:.3f}", flush=True)
    out[f"{name}_shared_over_split"] = r
for arm in ARMS:
    r = statistics.median(a[arm]["wall_s"] / b[arm]["wall_s"]
                          for a, b in zip(rows["pass1"], rows["pass2"]))
    print(f"{arm}: pass 1 / pass 2 wall (median) {r:.3f}", flush=True)
    out[f"{arm}_replay"] = r
print("identical", all(x["identical"] for v in rows.values() for x in v), flush=True)
import json  # noqa: E402
json.dump(out, open(os.environ.get("OUT", "/tmp/sources_ab.json"), "w"), indent=1)
