"""The draft's weight format: a Q8_0 copy made once, drafting like the original."""
from __future__ import annotations

import pytest

import models.draft.format as fmt
from core.engine import GenConfig
from core.sampling import PositionRng, SamplingConfig
from core.align import IdentityVocab
from models.pairs.catalog import draft_path, get_pair
from scripts.benchmark import run_one
from tests.conftest import vanilla_ids
from tests.test_real_lossless import N as LOSSLESS_N
from tests.test_real_lossless import PROMPTS as LOSSLESS


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


def test_eight_bit_and_original_stay_as_they_are(shipped):
    copy = fmt.q8_copy(shipped)  # the cache's, as test_q8_draft_is_lossless's pair loads it
    # (making one, 8 CPU seconds, is the test above's subject, in a fresh cache)
    kept = fmt.pick_draft(copy, "q8_0")
    assert kept.path == copy and kept.kind == "original" and "already Q8_0" in kept.reason
    assert fmt.pick_draft(shipped, "original").path == shipped
    assert fmt.pick_draft(shipped, "q8_0").path == copy
    with pytest.raises(ValueError, match="unknown draft format 'q2'; known: original, q8_0"):
        fmt.pick_draft(shipped, "q2")


def test_q8_draft_is_lossless(pair_with):
    pair = pair_with(draft_format="q8_0")
    assert pair.draft_format.kind == "q8_0"
    # two of test_real_lossless.py's prompts at its length (32: at 48, a fresh clone decoded
    # both again past the oracle's 32): vanilla's ids are the oracle's, kept on disk (the same
    # target), decoded once for both files
    drafted = 0
    for prompt in (LOSSLESS[0], LOSSLESS[4]):
        ids = pair.prompt_ids(prompt)
        runs = {}
        for m in ("sps", "duo"):
            pair.lookup_memory.clear()  # the Q8_0 draft drafts, not sps's answer
            runs[m] = run_one(pair, ids, GenConfig(method=m, max_new_tokens=LOSSLESS_N))
        assert runs["sps"]["token_ids"] == runs["duo"]["token_ids"] == \
            vanilla_ids(pair, ids, LOSSLESS_N), prompt
        assert runs["duo"]["draft_format"]["kind"] == "q8_0"
        drafted += sum(r["drafted"] for r in runs.values())
    assert drafted > 0  # the Q8_0 draft's tokens verified (it may guess every one right)


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
