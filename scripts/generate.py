"""Generate text with one method on a named pair: `--json` prints one JSON object."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import (Parser, add_decoding_args, add_model_args, fail,  # noqa: E402
                     gen_config, load_options, quiet_logs)
from core.backends import TargetOutOfMemory  # noqa: E402
from core.engine import METHODS  # noqa: E402
from models.pairs.catalog import PairError, get_pair  # noqa: E402
from models.prompt_text import check_prompt  # noqa: E402
from measure.emulate import add_emulate_args, check_args, emulate_prompts  # noqa: E402


def parse(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__)
    add_model_args(p)
    p.add_argument("--method", default="duo", choices=METHODS)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt")
    src.add_argument("--prompt-file")
    add_decoding_args(p)
    p.add_argument("--raw", action="store_true", help="no chat template")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_emulate_args(p)
    return p.parse_args(argv)


def read_prompt(args) -> str:
    if args.prompt is not None:
        text = args.prompt
    else:
        try:
            text = Path(args.prompt_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read prompt file '{args.prompt_file}': {e}") from None
    check_prompt([{"content": text}])  # empty: fail before loading anything
    return text


def run(args) -> dict:
    cfg = gen_config(args, args.method)
    check_args(args, [cfg])
    prompt = read_prompt(args)
    get_pair(args.pair)  # unknown pair: fail before loading anything
    from models.loader import Pair

    pair = Pair(args.pair, load_options(args))
    ids = pair.prompt_ids(prompt, raw=args.raw)
    pair.check_room(ids, cfg.max_new_tokens)
    emulation = emulate_prompts(pair, args, [prompt], lambda m: print(m, file=sys.stderr,
                                                                      flush=True)) if args.emulate else None
    tokens, text, stats = [], [], {}
    for ev in pair.generate(ids, cfg):
        tokens += ev.tokens
        text.append(ev.text)
        if not args.json:
            print(ev.text, end="", flush=True)
        stats = ev.stats or stats
    if not args.json:
        print()
    result = {"text": "".join(text), "token_ids": tokens, "stats": stats}
    return result | ({"emulation": emulation} if emulation else {})


def main(argv=None) -> None:
    args = parse(argv)
    quiet_logs()
    try:
        result = run(args)
    except (PairError, ValueError, OSError, TargetOutOfMemory) as e:
        fail(str(e))
    if args.json:
        print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
