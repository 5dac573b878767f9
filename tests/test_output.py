"""core/output.Output decodes incrementally: the same events as the plain decoder that decodes
every id on every event (kept here as the reference), with real tokenizers (byte-level BPE and
SentencePiece), stop strings spanning tokens and multibyte characters; and its decoding work
grows linearly with the output."""
from __future__ import annotations

import random

import pytest

from core.output import Event, Output

TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 6,
    "Emoji 🦊🐶 and accents: café, naïve, Ærø; CJK 日本語のテキスト 한국어 — done. " * 4,
    "def f(x):\n    return x  # 🙂\n\n" * 8,
    "🦊🐶🙂🧪 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 " * 12,  # characters split across tokens
]


class Reference(Output):
    """The earlier Output: decodes all ids on every event (quadratic, plainly right)."""

    def _hand_out(self, ev: Event) -> None:
        n = len(self.ids)
        if self.stop_strings and not self.done:
            while n > self.sent and len(self.decode(self.ids[:n])) > len(self.text):
                n -= 1
        ev.tokens, ev.sources = self.ids[self.sent:n], self.sources[self.sent:n]
        self.sent = n

    def _cut_ids(self, cut: int) -> None:
        k = self.sent
        while k < len(self.ids) and len(self.decode(self.ids[:k])) < cut:
            k += 1
        del self.ids[k:], self.sources[k:]

    def _release(self) -> str:
        full = self.decode(self.ids)
        hits = [full.find(s, max(0, len(self.text) - len(s))) for s in self.stop_strings]
        hits = [h for h in hits if h >= 0]
        if hits:
            full = full[:min(hits)]
            self._cut_ids(min(hits))
            self._finish("stop_string")
        elif not self.done:
            full = full.rstrip("\ufffd")
            full = full[:max(len(full) - self._hold(full), 0)]
        if not full.startswith(self.text):
            full = self.text + full[len(self.text):]
        delta, self.text = full[len(self.text):], full
        return delta


@pytest.fixture(scope="module", params=["smol-self", "gemma-smol"])
def tokenizer(request):
    from transformers import AutoTokenizer

    from models.pairs.catalog import get_pair, target_source
    from models.pairs.convert import converted_dir

    kind, path = target_source(get_pair(request.param))
    folder = converted_dir(path) if kind == "gguf" else path
    return AutoTokenizer.from_pretrained(str(folder))


def events(cls, decode, ids, stops, seed, limit=10_000):
    out, rng, got, i = cls(decode, set(), limit, stops), random.Random(seed), [], 0
    while i < len(ids) and not out.done:
        n = rng.randint(1, 5)
        ev = out.push(ids[i:i + n], ["draft"] * n)
        got.append((ev.tokens, ev.text, ev.done))
        i += n
    if not out.done:
        ev = out.stop()
        got.append((ev.tokens, ev.text, ev.done))
    return got, out.reason, out.ids


def stop_strings(text: str, rng: random.Random) -> list[tuple[str, ...]]:
    """Substrings of the text (spanning tokens, multibyte ones too), one missing, several."""
    picks = []
    for _ in range(6):
        a = rng.randrange(len(text) // 2, len(text) - 8)
        picks.append((text[a:a + rng.randint(1, 7)],))
    return picks + [(), ("never there",), ("🐶", "日本", "lazy dog. The"), ("\n\n", "x)")]


@pytest.mark.parametrize("which", range(len(TEXTS)))
def test_incremental_output_equals_the_reference(tokenizer, which):
    text = TEXTS[which]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decode = lambda x: tokenizer.decode(x, skip_special_tokens=True)  # noqa: E731
    rng = random.Random(which)
    for seed, stops in enumerate(stop_strings(text, rng)):
        assert events(Output, decode, ids, stops, seed) == \
            events(Reference, decode, ids, stops, seed), stops


def test_decoding_work_grows_linearly():
    work = []

    def decode(ids):
        work.append(len(ids))
        return "".join(chr(0x61 + i % 26) for i in ids)

    out = Output(decode, set(), 100_000, ("zzz", "stop here"))
    for i in range(3000):
        out.push([i % 25], ["target"])
    done = sum(work)
    assert out.text == decode(out.ids) and len(out.text) == 3000
    assert done < 100 * 3000  # the reference decodes about 3000**2 ids
