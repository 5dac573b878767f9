"""A/B of the draft's attention kernel (models/draft/attention.py): smol-self loaded with the
default options (`auto` took the plain kernel on this machine), the arms interleaved prompt by
prompt, each on its own learning, the lookup memory emptied before each run: `local` (duo as
shipped), `flash` (duo with a drafter on llama.cpp's flash attention, as before this change),
`nolookup` (duo-nolookup), `sps`, `vanilla`; every arm but `flash` drafts with the default
kernel. Prints each prompt's walls, then per arm the median of (arm / local) walls overall
and per category, and writes OUT (json). Env: Q, PER, TOK, ARMS, PAIR, OUT."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from measure.ab import warm_run_summarize  # noqa: E402
from models.draft.format import q8_copy  # noqa: E402
from models.draft.llama import LlamaDrafter  # noqa: E402
from models.draft.prefill import CopyPrefill  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "local,flash,nolookup,vanilla").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"), "--questions", os.environ.get("Q", "bench/copy_prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "256"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
print("draft attention:", pair.attention_choice.reason, flush=True)
shipped = pair.drafter
flash = LlamaDrafter(pair.draft_format.path, n_threads=shipped.n_threads, n_ctx=shipped.n_ctx,
                     attention="flash")
flash.vocab = shipped.vocab
if shipped.prefill is not None:
    flash.prefill = CopyPrefill(q8_copy(pair.draft_format.path), shipped.n_ctx, attention="flash")
method = {"local": "duo", "flash": "duo", "nolookup": "duo-nolookup", "sps": "sps",
          "vanilla": "vanilla"}
cfgs = {arm: method_config(args, method[arm]) for arm in ARMS}


def patch(arm: str) -> None:
    pair.drafter = flash if arm == "flash" else shipped


warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, "local", ARMS, os.environ.get("OUT", "/tmp/ab.json"))
