"""Command-line options shared by scripts/generate.py, scripts/benchmark.py and app/main.py,
and the one-line error exit they all use."""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys

from core.config import LOOKUP_CHOICES
from core.engine import GenConfig
from core.sampling import SAMPLERS, SamplingConfig
from models.target.choice import check_ctx_size
from models.target.modes import COMPILE_CHOICES, QUANT_CHOICES

DEFAULT_PAIR = "smol-self"
TARGET_DTYPES = ("auto", "float32", "bfloat16", "float16")
DRAFT_PREFILLS = ("auto", "copy", "own")
DRAFT_ATTENTIONS = ("auto", "flash", "plain")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are the one-line `error: ...` exit (code 2) too."""

    def error(self, message: str):
        fail(message)


def number(text: str) -> float:
    """A finite float option (argparse's float takes 'nan' and 'inf')."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got '{text}'") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got '{text}'")
    return value


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=DEFAULT_PAIR, help="pair name (see download_models.py --list)")
    p.add_argument("--device", default=None, help="target device: cuda, cpu (default: cuda if present)")
    p.add_argument("--remeasure", action="store_true",
                   help="time this machine again: the draft's threads, attention kernel and "
                        "prompt prefill, and the draft budget's profile")
    p.add_argument("--target-dtype", default="auto",
                   help=f"target weights: {', '.join(TARGET_DTYPES)} (auto: bfloat16 on cuda, "
                        "float32 on the CPU; bfloat16 on a CPU with AVX512-BF16 is faster; only float32 "
                        "on the CPU keeps greedy output token-identical)")
    p.add_argument("--target-compile", default=os.environ.get("DUO_TARGET_COMPILE", "auto"),
                   help="auto, on, off: the static-cache target compiled with torch.compile "
                        "(auto: on for cuda, off on the CPU, where its compile costs minutes "
                        "at a first start; default from DUO_TARGET_COMPILE, else auto)")
    p.add_argument("--target-quant", default=os.environ.get("DUO_TARGET_QUANT", "auto"),
                   help="auto, none, int8, int4: weight-only quantization of the target "
                        "(auto: the model's own weights unless memory forces int8 or int4, on "
                        "cuda and the CPU; int8 and int4 run faster or smaller but change the "
                        "answers; default from DUO_TARGET_QUANT)")
    p.add_argument("--ctx-size", type=int, default=None,
                   help="context window in target tokens (default: min(trained window, "
                        "8192), shrunk to what fits); the draft's is sized from it")
    p.add_argument("--compile-buckets", default=None, metavar="N,N,...",
                   help="the compiled target's chunk lengths (default 1,2,4,8,16,32; on cuda "
                        "a CUDA graph each: fewer compile sooner, chunks pad up to the next)")
    p.add_argument("--draft-prefill", default=os.environ.get("DUO_DRAFT_PREFILL", "auto"),
                   help=f"the draft's prompt prefill: {', '.join(DRAFT_PREFILLS)} (auto: on "
                        "the draft's Q8_0 copy, its cache then moved into the draft, where "
                        "that measured faster here; default from DUO_DRAFT_PREFILL)")
    p.add_argument("--draft-attention", default="auto",
                   help=f"the draft's attention kernel in llama.cpp: "
                        f"{', '.join(DRAFT_ATTENTIONS)} (auto: the one that decoded faster "
                        "here; plain is much faster on some CPUs past a few hundred tokens)")


def load_options(args):
    for flag, value, known in (("--target-dtype", args.target_dtype, TARGET_DTYPES),
                               ("--draft-prefill", args.draft_prefill, DRAFT_PREFILLS),
                               ("--draft-attention", args.draft_attention, DRAFT_ATTENTIONS),
                               ("--target-compile", args.target_compile, COMPILE_CHOICES),
                               ("--target-quant", args.target_quant, QUANT_CHOICES)):
        if value not in known:
            raise ValueError(f"{flag} must be one of {', '.join(known)}, got '{value}'")
    if args.ctx_size is not None:
        check_ctx_size(args.ctx_size)
    from models.loader import LoadOptions

    return LoadOptions(device=args.device, remeasure=args.remeasure, dtype=args.target_dtype,
                       draft_prefill=args.draft_prefill, draft_attention=args.draft_attention,
                       target_compile=args.target_compile, target_quant=args.target_quant,
                       n_ctx=args.ctx_size, compile_buckets=compile_buckets(args.compile_buckets))


def compile_buckets(text: str | None) -> tuple[int, ...] | None:
    """--compile-buckets "1,8,32" as (1, 8, 32); None stays None (the default sizes)."""
    return None if text is None else tuple(sorted(set(numbers(text, "--compile-buckets", 1))))


def numbers(text: str, flag: str, least: int = 0) -> list[int]:
    """A comma list of positive whole numbers ("1,8,32"), at least `least` of them."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = [0]
    if len(values) < least or any(n < 1 for n in values):
        raise ValueError(f"{flag} must be positive numbers separated by commas, got '{text}'")
    return values


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=number, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=number, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sampler", choices=SAMPLERS, default="coupled",
                   help="sampling: coupled (a seed gives vanilla's text) or rejection")
    p.add_argument("--gamma", default="auto", help="'auto' (hardware-aware) or a number")
    p.add_argument("--sequential", action="store_true", help="duo without overlap (comparison)")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--multi-seq", choices=("on", "off"), default="on",
                   help="duo: dynamic multi-sequence drafting")
    p.add_argument("--max-seqs", type=int, default=4, help="duo: most draft sequences per round")
    p.add_argument("--theta-scale", type=number, default=1.0, help="duo: theta multiplier")
    p.add_argument("--static-k", type=int, default=None, help="duo: always K sequences")
    p.add_argument("--predraft", choices=("on", "off"), default="on",
                   help="duo: pre-draft likely rejection outcomes while the target verifies "
                        "(on: the cost model decides each round; off: none)")
    p.add_argument("--lookup", choices=LOOKUP_CHOICES, default="auto",
                   help="duo and lookup: drafts found in the prompt and earlier answers (a "
                        "suffix index, no model; docs/lookup.md). auto: the draft budget picks "
                        "the model's chunk, the lookup's or both each round; on: the lookup's "
                        "whenever it has one; off: model drafts only")


def parse_gamma(value: str) -> int | None:
    if str(value).lower() == "auto":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"--gamma must be 'auto' or a number, got '{value}'") from None


def gen_config(args, method: str, lookup: str | None = None) -> GenConfig:
    """`lookup`: instead of args' (the benchmark's methods it does not apply to)."""
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    cfg = GenConfig(method=method, max_new_tokens=args.max_new_tokens, sampling=sampling,
                    seed=args.seed, sampler=args.sampler, gamma=parse_gamma(args.gamma),
                    stop_strings=tuple(args.stop), sequential=args.sequential,
                    multi_seq=args.multi_seq == "on", max_seqs=args.max_seqs,
                    theta_scale=args.theta_scale, static_k=args.static_k,
                    predraft=args.predraft == "on", lookup=lookup or args.lookup)
    cfg.validate()
    return cfg


def quiet_logs(progress=sys.stderr) -> None:
    """Our progress lines on `progress` (the scripts: stderr, their output is stdout's; the
    app: stdout), warnings and errors on stderr; the libraries' notes the user cannot act on
    dropped (models/quiet.py)."""
    from models.quiet import quiet_imports

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    notes = logging.StreamHandler(progress)
    notes.addFilter(lambda record: record.levelno < logging.WARNING)
    problems = logging.StreamHandler(sys.stderr)
    problems.setLevel(logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[notes, problems])
    quiet_imports()


def fail(msg: str) -> None:
    """A one-line error on stderr, exit code 2, no traceback."""
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)
