"""Session 22's A/B runs: the pair loaded with the default options (its CPU target on packed
weights, models/target/packed.py), and beside it the same target loaded another way, swapped
in for an arm's runs: `@unpacked` (--target-pack off), `@eager` (--target-compile off),
`@compiled` (--target-compile on). An arm is a method, or a method@variant: duo, sps,
vanilla, nolookup (duo-nolookup). Arms interleaved prompt by prompt, each on its own learning
(and its own budget profile: the profiles are keyed by the target), the lookup memory emptied
before each run; walls against the first arm's, per prompt, medians.
Env: Q, PER, TOK, ARMS, PAIR, OUT."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from models.target.choice import load_target  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "duo,duo@unpacked,vanilla").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"),
              "--questions", os.environ.get("Q", "bench/prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "128"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
METHODS = {"nolookup": "duo-nolookup"}
VARIANTS = {"unpacked": {"pack": "off"}, "eager": {"compile": "off"},
            "compiled": {"compile": "on"}}


def other_target(variant: str):
    """The default target's arguments with one of them changed (models/loader.py)."""
    (model_dir, device, dtype, n_ctx, compile, buckets, say, quant, group,
     pack) = pair._target_args
    kw = {"compile": compile, "pack": pack, **VARIANTS[variant]}
    return load_target(model_dir, device, dtype, n_ctx, kw["compile"], buckets, say, quant,
                       group, kw["pack"], threads=pair._duo_share)


targets = {"": pair.target}
for arm in ARMS:
    variant = arm.partition("@")[2]
    if variant and variant not in targets:
        targets[variant] = other_target(variant)
        print(variant, targets[variant].path, targets[variant].pack_choice, flush=True)
print("default", pair.target.path, pair.target.compile_choice, pair.target.pack_choice, flush=True)
cfgs = {arm: method_config(args, METHODS.get(arm.partition("@")[0], arm.partition("@")[0]))
        for arm in ARMS}


def patch(arm: str) -> None:
    target = targets[arm.partition("@")[2]]
    if pair.target is not target:
        pair.target = target
        pair._placement = None  # the compiled path keeps its thread count: placed again


for arm in ARMS:  # each target's profile measured (or read), its first run done, before
    patch(arm)  # the timed runs
    run_one(pair, pair.prompt_ids("Warm up: say one word."), cfgs[arm])
warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, ARMS[0], ARMS, os.environ.get("OUT", "/tmp/ab.json"))
