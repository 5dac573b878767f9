"""The draft's Q8_0 copy (its prompt prefill's: models/draft/prefill.py): made once, drafting
like the original; the file type read from the header."""
from __future__ import annotations

import pytest

import models.draft.format as fmt
from core.sampling import PositionRng, SamplingConfig
from core.align import IdentityVocab
from models.pairs.catalog import draft_path, get_pair


@pytest.fixture
def shipped():
    return draft_path(get_pair("smol-self"))


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DUO_CACHE_DIR", str(tmp_path))
    return tmp_path


def greedy_next(path, tokens: list[int], start: int) -> list[int]:
    """The draft's greedy token after each prefix tokens[:i], i >= start (teacher forcing)."""
    from models.draft.llama import LlamaDrafter

    d = LlamaDrafter(path, n_ctx=len(tokens) + 8)
    d.vocab = IdentityVocab(d.n_vocab, d.n_vocab)
    try:
        return [d.propose(tokens[:i], 1, SamplingConfig(), PositionRng(0, 1)).main.tokens[0]
                for i in range(start, len(tokens))]
    finally:
        d.close()


def test_q8_copy_is_made_once_and_drafts_like_the_original(smol_pair, shipped, own_cache):
    copy = fmt.q8_copy(shipped)
    made = copy.stat().st_mtime_ns
    assert fmt.q8_copy(shipped) == copy and copy.stat().st_mtime_ns == made
    assert fmt.file_type(shipped) == "Q4_1" and fmt.file_type(copy) == "Q8_0"
    text = ("The water cycle moves water between the oceans, the air and the land. The sun "
            "warms the sea, water evaporates, rises, cools and condenses into clouds.")
    ids = smol_pair.tokenizer(text)["input_ids"]
    a, b = greedy_next(shipped, ids, 4), greedy_next(copy, ids, 4)
    agree = sum(x == y for x, y in zip(a, b)) / len(a)
    assert agree >= 0.9, f"the Q8_0 copy agrees with the original on {agree:.0%} of tokens"


def test_the_file_type_is_read_from_the_header_alone(shipped, tmp_path):
    """general.file_type without parsing the vocabulary; a file that is no GGUF, or is cut
    short, is a clear error."""
    from models.pairs.catalog import PairError

    junk, cut = tmp_path / "junk.gguf", tmp_path / "cut.gguf"
    junk.write_bytes(b"not a model")
    cut.write_bytes(shipped.read_bytes()[:64])
    for bad, why in ((junk, "bad magic"), (cut, "truncated")):
        with pytest.raises(PairError, match=f"cannot read the GGUF header.*{why}"):
            fmt.file_type(bad)
