"""The emulated target's verdicts: the real target's greedy continuation of each prompt,
computed once with the real pair (`vanilla`) and cached on disk by pair, weights,
precision, prompt ids and token count (measure/emulate.py)."""
from __future__ import annotations

import hashlib
import json

from core.align import common_prefix
from core.config import GenConfig
from models.pairs.convert import cache_root, write_atomic

ORACLE_FORMAT = 2  # in the cache key: a file of another format is computed again


class Refused(ValueError):
    """A request the emulated target cannot answer as the real one would."""


class Oracle:
    """The real target's greedy continuation of each prompt: after prompt + cont[:k] its
    argmax is cont[k]. A position off every known path gets a filler (verification reads
    no row past the first mismatch); past a path's end without an end-of-text, Refused."""

    def __init__(self, paths: dict[tuple[int, ...], list[int]], eos_ids: set[int]):
        self.paths = {tuple(p): list(c) for p, c in paths.items()}
        self.eos_ids = set(eos_ids)
        # for each prompt, the longer ones it begins (mostly none): a generation's verifies
        # check the prompt the last one matched and these, not every prompt
        self._longer = {p: [q for q in self.paths if len(q) > len(p) and q[:len(p)] == p]
                        for p in self.paths}
        self._last: tuple[int, ...] | None = None

    def rows(self, ids: list[int], n_rows: int) -> list[int]:
        prompt = self._prompt_of(ids)
        if prompt is None:  # a probe's context (the profiler times random ids)
            return [0] * n_rows
        cont, start = self.paths[prompt], len(prompt)
        matched = common_prefix(ids[start:], cont)
        return [self._row(cont, k, matched) for k in
                range(len(ids) - n_rows + 1 - start, len(ids) + 1 - start)]

    def _row(self, cont: list[int], k: int, matched: int) -> int:
        """The argmax after prompt + ids[start:start+k]."""
        if k < 0 or k > matched:
            return cont[min(max(k, 0), matched, len(cont) - 1)]  # not read: off the path
        if k < len(cont):
            return cont[k]
        if cont and cont[-1] in self.eos_ids:
            return cont[-1]  # after the end of text: never emitted
        raise Refused(f"the oracle holds {len(cont)} tokens of this prompt's continuation; "
                      "a generation asked for more (compute it for more new tokens)")

    def _prompt_of(self, ids: list[int]) -> tuple[int, ...] | None:
        """The longest known prompt that `ids` starts with."""
        last = self._last
        if last is not None and _starts(ids, last):
            found = [last] + [q for q in self._longer[last] if _starts(ids, q)]
        else:
            found = [p for p in self.paths if _starts(ids, p)]
        self._last = max(found, key=len) if found else None
        return self._last


def _starts(ids: list[int], prompt: tuple[int, ...]) -> bool:
    return len(ids) >= len(prompt) and tuple(ids[:len(prompt)]) == prompt


def oracle_key(pair, ids: list[int], n_tokens: int) -> str:
    """Pair, its target's converted folder (its files' hash), precision, packed weights (the
    same sums in another order), prompt ids, tokens."""
    t = pair.target
    text = json.dumps([ORACLE_FORMAT, pair.spec.name, str(pair.target_dir), t.dtype, t.quant,
                       t.packed, list(ids), n_tokens])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def oracle_path(pair, ids: list[int], n_tokens: int, progress=None) -> list[int]:
    """The real target's greedy continuation of `ids` (n_tokens, or up to end of text), from
    the cache or computed with `vanilla` on the real pair."""
    path = cache_root() / "oracle" / f"{oracle_key(pair, ids, n_tokens)}.json"
    if path.exists():
        return json.loads(path.read_text())["tokens"]
    if progress:
        progress(f"oracle: the real target's {n_tokens} greedy tokens after a "
                 f"{len(ids)}-token prompt")
    cfg = GenConfig(method="vanilla", max_new_tokens=n_tokens, cache_prompt=False)
    tokens, stats = [], {}
    for ev in pair.generate(ids, cfg):
        tokens += ev.tokens
        stats = ev.stats or stats
    if stats.get("stop_reason") == "eos":  # never emitted: asked of the target once more
        tokens.append(_argmax_after(pair.target, list(ids) + tokens))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"pair": pair.spec.name, "dtype": pair.target.dtype,
                                   "prompt": list(ids), "tokens": tokens}))
    return tokens


def _argmax_after(target, ids: list[int]) -> int:
    from core.sampling import SamplingConfig

    target.rollback(0)
    token = target.score(ids, 1, SamplingConfig()).choice[0]
    target.rollback(0)
    return token
