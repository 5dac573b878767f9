"""How lookup proposals from the context and from the memory of earlier requests pass, per
confidence band, along the greedy texts of the replay's two passes over the copy-heavy prompts
(3 a category, 256 tokens; pass 2 edited as `--replay` does). Offline: the texts are
llama.cpp's greedy decoding of the draft GGUF (smol-self's target is that model in float32:
nearly the same texts), each position's proposal compared with what follows.
Run: .venv/bin/python bench/results/2026-11-26-s18/lookup_sources.py (about 10 minutes)."""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from core.bands import LookupBands  # noqa: E402
from core.suffix import ContextLookup, SuffixMemory  # noqa: E402
from measure.replay import edited  # noqa: E402
from models.pairs.catalog import draft_path, get_pair, target_source  # noqa: E402
from scripts.benchmark import _prompt  # noqa: E402

PER, TOKENS = 3, 256


def texts() -> list[dict]:
    """[{category, p1: (prompt ids, greedy ids), p2: ...}]"""
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from models.pairs.convert import converted_dir
    spec = get_pair("smol-self")
    draft_gguf = draft_path(spec)
    tok = AutoTokenizer.from_pretrained(converted_dir(target_source(spec)[1]))
    llm = Llama(str(draft_gguf), n_ctx=4096, n_threads=1, verbose=False)
    per, out = collections.Counter(), []
    for line in open(ROOT / "bench/copy_prompts.jsonl"):
        q = json.loads(line)
        if per[q["category"]] >= PER:
            continue
        per[q["category"]] += 1
        p = _prompt(q["turns"], q.get("answers") or [])
        first = [{"role": "user", "content": p}] if isinstance(p, str) else p
        row = {"category": q["category"]}
        for key, msgs in (("p1", first), ("p2", edited(first))):
            ids = list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"])
            gen = []
            for t in llm.generate(ids, temp=0.0, reset=True):
                if t == llm.token_eos() or len(gen) >= TOKENS:
                    break
                gen.append(t)
            row[key] = (ids, gen)
        out.append(row)
    return out


def count(rows: list[dict]) -> dict:
    """(pass, source, band) -> [tokens tried, passed]: at each round's start (after the last
    proposal's accepted tokens and the target's own), the proposal against the text."""
    stats, memory = collections.defaultdict(lambda: [0, 0]), SuffixMemory()
    for key in ("p1", "p2"):
        for r in rows:
            ids, gen = r[key]
            look, i = ContextLookup(list(ids), memory), 0
            while i < len(gen):
                found, m = look.propose(31), 0
                while m < len(found) and i + m < len(gen) and found.tokens[m] == gen[i + m]:
                    m += 1
                for j, c in enumerate(found.conf[:m + 1]):
                    s = stats[(key, found.source, LookupBands.band(c))]
                    s[0], s[1] = s[0] + 1, s[1] + (j < m)
                look.extend(gen[i:i + m + 1])
                i += m + 1
            memory.add(list(ids) + gen)
    return stats


def main() -> None:
    stats = count(texts())
    print("| pass | source | band | tokens tried | passed |")
    print("|---|---|---|---|---|")
    for (key, source, band), (tried, passed) in sorted(stats.items()):
        print(f"| {key} | {source} | {band % 6} | {tried} | {passed / tried:.2f} |")


if __name__ == "__main__":
    main()
