"""Vocabulary alignment on the hard cases, with the real gemma-smol tokenizers: Gemma-3
(SentencePiece style, '▁' and <0xNN> byte fallback, 262k) as target and SmolLM2 (byte-level
BPE, 'Ġ', 49k, in llama.cpp) as draft."""
from __future__ import annotations

import os

import numpy as np
import pytest

from core.align import IdentityVocab, MappedVocab, VocabSide
from models.pairs.catalog import PairError
from models.pairs.vocab_build import VocabMap
from tests.fakes import LongestMatch

TEXTS = {
    "english": "The quick brown fox jumps over the lazy dog.",
    "french": "Bonjour, ça va ? Où est la gare ? L'été dernier, j'ai mangé des crêpes.",
    "chinese": "你好，世界！长城是中国古代的军事防御工程。",
    "emoji": "I love pizza 🍕 and 👍🏽 family 👨‍👩‍👧 done",
    "code": "def f(x):\n    return {'a': x**2}\n\n\tprint(f(3))  # done",
    "cuts": "photosynthesis antidisestablishmentarianism Donaudampfschiffahrt",
    "spaces": "a  b   c\n\n\n  indented\r\nwindows",
    "control": "bell\x07 and tab\tand null-ish \x1b[0m",
}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(tokenizer, drafter, vocab, cache dir): built once into a fresh cache directory."""
    from transformers import AutoTokenizer

    from models.pairs.catalog import draft_path, get_pair
    from tests.cut_target import source
    from models.draft.llama import LlamaDrafter
    from models.pairs.vocab_build import build_vocab

    spec = get_pair("gemma-smol")
    tok = AutoTokenizer.from_pretrained(str(source("gemma-smol")))
    drafter = LlamaDrafter(draft_path(spec), n_ctx=512)
    cache = tmp_path_factory.mktemp("duo-cache")
    old = os.environ.get("DUO_CACHE_DIR")
    os.environ["DUO_CACHE_DIR"] = str(cache)
    try:
        vocab = build_vocab(drafter, tok, 262144, {1})
        yield tok, drafter, vocab, cache
    finally:
        if old is None:
            os.environ.pop("DUO_CACHE_DIR", None)
        else:
            os.environ["DUO_CACHE_DIR"] = old
        drafter.close()


def t_ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def d_bytes(drafter, ids):
    return b"".join(drafter.token_bytes(i) for i in ids)


def fresh(vocab: MappedVocab) -> MappedVocab:
    """A MappedVocab on `vocab`'s map with nothing translated yet (about 8 ms: the map's
    report is counted once, models/pairs/vocab_build.py)."""
    return MappedVocab(vocab.map, vocab.draft_tok, vocab.target_tok, vocab.target_size)


# -- load-time analysis -------------------------------------------------------------------------
def test_report_counts_how_much_of_each_vocabulary_maps(real):
    _, _, vocab, _ = real
    assert isinstance(vocab, MappedVocab)
    rep = vocab.map.report()
    assert rep["draft_size"] == 49152 and rep["target_size"] == 262144
    assert 0.9 < rep["draft_share"] < 1.0  # nearly every SmolLM2 token is spelled in Gemma
    assert 0.1 < rep["target_share"] < 0.3  # Gemma's vocabulary is five times larger
    assert rep["target_byte_fallback"] == 256
    stats = vocab.stats()
    assert stats["shared_tokens"] == rep["shared_tokens"] > 40000
    assert stats["draft_share"] == rep["draft_share"] and int(vocab.sample_mask.sum()) > 40000
    rep["controls_mapped"].clear()  # counted once and kept: each caller gets a copy
    assert vocab.map.report()["controls_mapped"]


def test_the_mapping_is_cached_on_disk_by_both_files(real):
    tok, drafter, vocab, cache = real
    from models.pairs.vocab_build import build_vocab

    files = list((cache / "vocab").glob("*.npz"))
    assert len(files) == 1
    again = build_vocab(drafter, tok, 262144, {1})
    assert np.array_equal(again.map.d2t, vocab.map.d2t)
    assert again.map.target.pieces == vocab.map.target.pieces
    assert again.map.control_t2d == vocab.map.control_t2d
    assert list((cache / "vocab").glob("*.npz")) == files


def test_space_markers_G_and_underscore_become_the_same_bytes(real):
    tok, drafter, vocab, _ = real
    (t_world,) = t_ids(tok, " world")
    (d_world,) = drafter.tokenize(" world")
    assert tok.convert_ids_to_tokens(t_world) == "▁world"
    assert vocab.map.target.pieces[t_world] == b" world" == vocab.map.draft.pieces[d_world]
    assert vocab.map.d2t[d_world] == t_world


def test_byte_fallback_tokens_are_single_bytes(real):
    tok, drafter, vocab, _ = real
    fb = tok.convert_tokens_to_ids("<0xE4>")
    assert fb in vocab.map.target.fallback and vocab.map.target.pieces[fb] == b"\xe4"
    assert vocab.map.target.byte_id[0xE4] == fb
    (d_e4,) = [i for i, p in enumerate(vocab.map.draft.pieces) if p == b"\xe4"]
    assert vocab.map.d2t[d_e4] == fb  # a lone byte has only the fallback as twin
    a = tok.convert_tokens_to_ids("a")
    assert vocab.map.target.byte_id[ord("a")] == a  # a plain token beats <0x61>


def test_control_and_chat_template_tokens(real):
    tok, drafter, vocab, _ = real
    names = vocab.map.report()["controls_mapped"]
    assert names["<eos>"] == "<|endoftext|>"
    assert names["<start_of_turn>"] == "<|im_start|>"  # same job, only in one vocabulary each
    assert names["<end_of_turn>"] == "<|im_end|>"
    bos = tok.bos_token_id
    assert bos not in vocab.map.control_t2d  # nothing like it in SmolLM2: left out
    ids = [bos] + t_ids(tok, "<start_of_turn>user\nhi<end_of_turn>")
    assert d_bytes(drafter, vocab.to_draft(ids)) == b"<|im_start|>user\nhi<|im_end|>"
    repo = drafter.tokenize("<repo_name>", special=True)[0]
    assert vocab.map.d2t[repo] == -1 and not vocab.greedy_mask[repo] and not vocab.sample_mask[repo]
    eos = drafter.tokenize("<|endoftext|>", special=True)[0]
    assert vocab.map.d2t[eos] == 1 and vocab.sample_mask[eos]  # draft EOS proposes target EOS


def test_sampling_mask_gives_each_target_id_one_draft_id(real):
    """SmolLM2 has several end-of-generation ids, Gemma one <eos>: only one of them may be
    sampled, or the q row of <eos> would lose the other's probability."""
    _, _, vocab, _ = real
    allowed = vocab.map.d2t[vocab.sample_mask]
    assert len(allowed) == len(set(allowed.tolist()))
    assert sum(vocab.map.d2t[d] == 1 for d in vocab.map.draft.eos) >= 2  # both map to <eos>
    assert sum(vocab.sample_mask[d] for d in vocab.map.draft.eos if vocab.map.d2t[d] == 1) == 1


def test_literal_special_text_stays_text(real):
    """A target that writes '<|im_start|>' as plain text must not give the draft a control
    token."""
    tok, drafter, vocab, _ = real
    ids = t_ids(tok, "the tag <|im_start|> is text")
    assert all(i not in vocab.map.draft.control for i in vocab.to_draft(ids))


# -- translation: the context ------------------------------------------------------------------
@pytest.mark.parametrize("name", TEXTS)
def test_context_translation_keeps_the_text(real, name):
    tok, drafter, vocab, _ = real
    ids = t_ids(tok, TEXTS[name])
    d = fresh(vocab).to_draft([tok.bos_token_id] + ids)
    assert d_bytes(drafter, d) == TEXTS[name].encode()


@pytest.mark.parametrize("name", TEXTS)
def test_greedy_round_trip(real, name):
    """Target ids -> draft context -> (as a proposal) -> target ids: the same ids (Gemma's
    own cuts), though the draft cut the words differently."""
    tok, drafter, vocab, _ = real
    ids = t_ids(tok, TEXTS[name])
    v = fresh(vocab)
    d = v.to_draft(ids)
    back = v.to_target(d, greedy=True)
    assert back == ids[:len(d)]
    if name in ("chinese", "emoji"):
        assert len(d) > len(ids)  # byte-level pieces: more draft tokens than target tokens
    if name == "cuts":
        assert [tok.decode([i]) for i in ids] != [drafter.token_bytes(i).decode() for i in d]


def test_context_translation_is_incremental(real):
    """Growing contexts: the draft prefix is reused and only the last chunk is redone; the
    result equals a fresh translation, and the draft ids before the change stay put."""
    tok, drafter, vocab, _ = real
    ids = t_ids(tok, " ".join(TEXTS.values()))
    v = fresh(vocab)
    prev = []
    for n in range(1, len(ids) + 1):
        d = v.to_draft(ids[:n])
        assert d == fresh(vocab).to_draft(ids[:n])
        common = next((i for i, (a, b) in enumerate(zip(prev, d)) if a != b), len(prev))
        assert len(prev) - common <= 12, f"draft prefix changed far back at {n}"
        prev = d
    s = v.stats()
    assert s["ctx_draft_kept"] > 5 * s["ctx_draft_new"]


def test_context_rollback_to_an_earlier_point(real):
    """duo drops an unverified draft: the next context is shorter and diverges."""
    tok, drafter, vocab, _ = real
    a = t_ids(tok, "The cat sat on the mat and looked at the bird outside.")
    b = t_ids(tok, "The cat sat on the mat and then slept all afternoon long.")
    v = fresh(vocab)
    v.to_draft(a)
    assert v.to_draft(b) == fresh(vocab).to_draft(b)
    assert v.to_draft(b[:3]) == fresh(vocab).to_draft(b[:3])


def test_context_ending_inside_a_character(real):
    """The target spelled a character with byte fallbacks and stopped after the first
    byte: the draft sees that byte and can finish the character."""
    tok, drafter, vocab, _ = real
    fb = [tok.convert_tokens_to_ids(f"<0x{b:02X}>") for b in "𝔘".encode()]
    ctx = t_ids(tok, "Letter") + fb[:1]
    d = fresh(vocab).to_draft(ctx)
    assert d_bytes(drafter, d) == b"Letter" + "𝔘".encode()[:1]
    rest = [i for i, p in enumerate(vocab.map.draft.pieces) if p in (b"\x9d", b"\x94", b"\x98")]
    assert len(rest) == 3
    v = fresh(vocab)
    v.to_draft(ctx)
    by_piece = {vocab.map.draft.pieces[i]: i for i in rest}
    proposal = [by_piece[b"\x9d"], by_piece[b"\x94"], by_piece[b"\x98"]]
    assert v.to_target(proposal, greedy=True) == fb[1:]  # the continuation bytes, as Gemma's fallbacks


# -- translation: the proposal -----------------------------------------------------------------
def test_proposal_stops_before_an_unfinished_character(real):
    tok, drafter, vocab, _ = real
    d = drafter.tokenize(" 你好")
    assert len(d) > 2 and d_bytes(drafter, d) == " 你好".encode()
    v = fresh(vocab)
    v.to_draft(t_ids(tok, "Say"))
    whole = v.to_target(d, greedy=True)
    assert whole == t_ids(tok, " 你好")[:len(d)]
    for cut in range(1, len(d)):
        part = v.to_target(d[:cut], greedy=True)
        text = d_bytes(drafter, d[:cut])
        got = b"".join(vocab.map.target.pieces[t] for t in part)
        assert text.startswith(got) and got.decode("utf-8")  # never half a character
    assert v.to_target(d[:1], greedy=True) != []  # a lone piece still gives the target something to check


def test_proposal_with_draft_control_tokens(real):
    tok, drafter, vocab, _ = real
    v = fresh(vocab)
    v.to_draft(t_ids(tok, "Hi"))
    end = drafter.tokenize("<|im_end|>", special=True)
    repo = drafter.tokenize("<repo_name>", special=True)
    words = drafter.tokenize(" there")
    assert v.to_target(words + end + words, greedy=True) == \
        t_ids(tok, " there") + [106] + t_ids(tok, " there")
    assert v.to_target(words + repo + words, greedy=True) == t_ids(tok, " there")  # stops at the unknown


def test_proposal_never_has_more_target_than_draft_tokens(real):
    tok, drafter, vocab, _ = real
    v = fresh(vocab)
    v.to_draft(t_ids(tok, "x"))
    d = drafter.tokenize("\n    return")  # Gemma: '\n', '▁▁▁▁', 'return'
    assert len(t_ids(tok, "\n    return")) > len(d)
    assert len(v.to_target(d, greedy=True)) == len(d)


def test_sampling_mode_is_one_to_one(real):
    tok, drafter, vocab, _ = real
    v = fresh(vocab)
    v.to_draft(t_ids(tok, "Hello"))
    assert v.draft_mask(greedy=False) is v.sample_mask
    d = drafter.tokenize(" world, photos")
    assert all(v.sample_mask[i] for i in d)
    t = v.to_target(d, greedy=False)
    assert len(t) == len(d) and all(vocab.map.target.pieces[a] == vocab.map.draft.pieces[b]
                                    for a, b in zip(t, d))
    split = drafter.tokenize(" ça")[0]  # b' \xc3': half a character, no twin
    assert not v.sample_mask[split]
    with pytest.raises(ValueError, match="draft_mask"):
        v.to_target([split], greedy=False)
    q = np.random.default_rng(0).dirichlet(np.ones(v.draft_size), size=2).astype(np.float32)
    q[:, ~v.sample_mask] = 0
    q /= q.sum(axis=1, keepdims=True)
    qt = v.q_to_target(q)
    assert qt.shape == (2, 262144)
    assert np.allclose(qt.sum(axis=1, dtype=np.float64), 1.0, atol=1e-4)
    assert np.allclose(qt[:, t], q[:, d])
    assert v.draft_mask(greedy=True) is v.greedy_mask and v.greedy_mask[split]


def test_stats_follow_translated_and_kept_tokens(real):
    tok, drafter, vocab, _ = real
    v = fresh(vocab)
    ctx = t_ids(tok, "The weather")
    v.to_draft(ctx)
    d = drafter.tokenize(" is photosynthesis today")
    t = v.to_target(d, greedy=True, after=ctx)  # the proposal after ctx
    v.to_target(d[:1], greedy=True)  # a second translation (a rank or a branch) is not the proposal
    v.settle(ctx + t[:2])  # the next context kept two target tokens
    v.to_draft(ctx + t[:2])
    s = v.stats()
    assert s["proposals"] == 1 and s["draft_in"] == len(d) and s["target_out"] == len(t)
    assert s["extra_translations"] == 1
    assert s["settled_target"] == 2 and s["settled_draft"] >= 2
    assert s["target_per_draft"] == round(len(t) / len(d), 3)
    assert v.stats()["proposals"] == 0  # counters restart per generation


# -- pairs that cannot work ------------------------------------------------------------------
def test_identical_vocabularies_are_identity():
    from models.pairs.vocab_build import _identical

    side = VocabSide([b"a", b"b", b""], {2: "<eos>"}, {2})
    assert _identical(VocabMap(side, VocabSide(list(side.pieces), {2: "<eos>"}, {2})))
    assert isinstance(IdentityVocab(3, 3).to_target([1]), list)


def test_identity_is_byte_exact():
    """One id spelled differently, a control token renamed or in another place, or a real
    token on one side only: not identity. Padding past the shorter side is."""
    from models.pairs.vocab_build import _identical

    pieces = [bytes([c]) for c in b"abcdefgh"] + [b""]
    side = VocabSide(pieces, {8: "<eos>"}, {8})
    same = lambda p, c=None: _identical(VocabMap(side, VocabSide(p, c or {8: "<eos>"}, {8})))
    assert same(list(pieces)) and same(list(pieces) + [b"", b""])
    assert not same(pieces[:3] + [b"D"] + pieces[4:])
    assert not same(list(pieces), {8: "<|end|>"})
    assert not same(list(pieces), {7: "<eos>", 8: "<x>"})
    assert not same(list(pieces) + [b"z"])
    assert not _identical(VocabMap(VocabSide(list(pieces) + [b"z"], {8: "<eos>"}, {8}), side))


def test_the_loader_decides_identity_from_the_bytes(monkeypatch):
    """The catalog's same_tokenizer is only a hint: the byte-exact analysis always runs."""
    from types import SimpleNamespace

    import models.pairs.vocab_build as vb
    from models.loader import Pair

    calls = []
    monkeypatch.setattr(vb, "build_vocab", lambda *a, **k: calls.append(a) or "analysed")
    pair = SimpleNamespace(spec=SimpleNamespace(name="p", same_tokenizer=True),
                           drafter=SimpleNamespace(n_vocab=10), tokenizer=None,
                           target=SimpleNamespace(vocab_size=10, eos_ids={2}))
    assert Pair._vocab(pair) == "analysed" and len(calls) == 1


def test_same_vocabulary_from_hf_and_llama_cpp_is_identity(real, tmp_path, monkeypatch):
    """SmolLM2's byte-level ('Ġ') HF tokenizer and its GGUF in llama.cpp spell every id
    alike: the analysis says identity."""
    from transformers import AutoTokenizer

    from models.pairs.vocab_build import build_vocab, hf_side, llama_side
    from tests.cut_target import source

    _, drafter, _, _ = real
    with monkeypatch.context() as m:  # SmolLM2 converted once, in the suite's cache (in
        m.setenv("DUO_CACHE_DIR", os.environ["DUO_SUITE_CACHE"])  # `real`'s fresh one: 20 s)
        smol = AutoTokenizer.from_pretrained(str(source("smol-self")))
    assert hf_side(smol, 49152, {2}).pieces == llama_side(drafter).pieces
    monkeypatch.setenv("DUO_CACHE_DIR", str(tmp_path))
    assert isinstance(build_vocab(drafter, smol, 49152, {2}), IdentityVocab)


def test_disjoint_vocabularies_are_refused():
    draft = VocabSide([bytes([c]) for c in b"abc"] + [b""], {3: "<eos>"}, {3})
    target = VocabSide([b"\xce\xb1", b"\xce\xb2", b""], {2: "<eos>"}, {2})
    problems = VocabMap(draft, target).problems()
    assert any("share only 0 tokens" in p for p in problems)


def test_a_normalizing_tokenizer_is_refused():
    pieces = [bytes([c]) for c in range(256)] + [b""]
    side = VocabSide(pieces, {256: "<eos>"}, {256})
    vmap = VocabMap(side, VocabSide(list(pieces), {256: "</s>"}, {256}))
    lower = LongestMatch(side)
    problems = vmap.problems(LongestMatch(side), lambda text: lower(text.lower()))
    assert len(problems) == 1 and "target tokenizer does not give its text back" in problems[0]


def test_refusal_reaches_the_loader_as_a_pair_error(real, monkeypatch):
    tok, drafter, vocab, _ = real
    import models.pairs.vocab_build as vb

    monkeypatch.setattr(vb.VocabMap, "problems", lambda self, *a: ["no shared text"])
    with pytest.raises(PairError, match="cannot be aligned: no shared text"):
        vb.build_vocab(drafter, tok, 262144, {1})
