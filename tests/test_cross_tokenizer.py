"""Pairs whose tokenizers differ. Greedy: gemma-smol (Gemma-3 target, SmolLM2 draft) with sps
and duo gives the target-only decoder's tokens exactly, under a schema and biases too.
Sampling: fakes whose vocabularies differ (a translating fake drafter) keep the target's
distribution (chi-square). long: the fakes' cases and gemma-smol's (one load a worker)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from core.align import MappedVocab, VocabSide
from core.backends import Draft, Proposal
from core.engine import GenConfig, generate
from core.sampling import SamplingConfig, logits_to_probs
from models.pairs.vocab_build import VocabMap
from tests.conftest import UNTIMED
from tests.fakes import FakeTarget, LongestMatch, ScriptedLearned, decode, fake_profile, markov
from tests.test_lookup_lossless import COPY_TEXT
from tests.test_sampling_lossless import assert_matches, n_samples

# -- fakes: two small vocabularies that spell the same text with different cuts ---------------
TARGET_PIECES = [b"", b"a", b"b", b" a", b" b", b"ab", b" "]  # 0: <eos> (control)
DRAFT_PIECES = [b"", b"a", b"b", b" ", b" a", b"ba", b"bb", b"", b""]
DRAFT_CONTROL = {0: "<|endoftext|>", 7: "<repo>", 8: "<|eot|>"}  # 0 and 8 both end text


def fake_vocab() -> MappedVocab:
    target = VocabSide(TARGET_PIECES, {0: "<eos>"}, {0})
    draft = VocabSide(DRAFT_PIECES, DRAFT_CONTROL, {0, 8})
    return MappedVocab(VocabMap(draft, target), LongestMatch(draft), LongestMatch(target))


class TranslatingDrafter:
    """A Markov draft over its own vocabulary, translated like LlamaDrafter.propose does:
    context -> draft ids, masked choice, proposal and q rows -> target ids."""
    name = "fake-translating-draft"

    def __init__(self, Q: np.ndarray, vocab, wrong_q: bool = False):
        self.Q, self.vocab, self.wrong_q = Q, vocab, wrong_q
        self.tokens: list[int] = []

    def propose(self, context, n, sampling: SamplingConfig, draws, stop=None, **_):
        self.vocab.settle(context)
        ids = self.vocab.to_draft(context)
        mask = self.vocab.draft_mask(sampling.greedy)
        last, out, rows = (ids[-1] if ids else 0), [], []
        for i in range(n):
            if stop is not None and (stop.is_set() if hasattr(stop, "is_set") else stop(i)):
                break
            logits = np.where(mask, np.log(self.Q[last] + 1e-30), -np.inf)
            if sampling.greedy:
                tok, q = int(np.argmax(logits)), None
            else:
                q = logits_to_probs(logits, sampling)
                tok = draws.draw(q, len(context) + i)
            out.append(tok)
            rows.append(q)
            last = tok
        self.tokens = ids + out
        q_draft = None
        if not sampling.greedy and rows:
            q_draft = np.stack(rows)
            if not self.wrong_q:
                q_draft = self.vocab.q_to_target(q_draft)
            else:  # the mistake a translation must avoid: q left in draft columns
                q_draft = np.pad(q_draft, ((0, 0), (0, 0)))[:, :len(TARGET_PIECES)]
        return Proposal(Draft(self.vocab.to_target(out, sampling.greedy, after=context), q_draft))

    def rollback(self, n_keep):
        del self.tokens[n_keep:]

    def set_threads(self, n):
        pass


V_T, N_TOKENS = len(TARGET_PIECES), 3  # samples: n_samples (tests/test_sampling_lossless.py)
PROMPT = [1, 2]  # "ab"
P_TARGET = markov(V_T, seed=11, sharp=0.8)
Q_DRAFT = markov(len(DRAFT_PIECES), seed=12, sharp=0.8)


def exact_joint(P: np.ndarray, sampling: SamplingConfig) -> dict:
    rows = logits_to_probs(np.log(P + 1e-30), sampling)
    joint = {}
    for seq in itertools.product(range(V_T), repeat=N_TOKENS):
        prob, last = 1.0, PROMPT[-1]
        for t in seq:
            prob *= rows[last, t]
            last = t
        joint[seq] = prob
    return joint


def sample_joint(method, sampling, gamma, drafter, n=None, **options) -> dict:
    """Through the rejection sampler, whose tests read the translated q rows (the coupled one
    keeps vanilla's text whatever the draft: test_coupled_text_through_a_translated_vocabulary)."""
    target, counts, n = FakeTarget(P_TARGET), {}, n or n_samples(method)
    options.setdefault("sampler", "rejection")
    for seed in range(n):
        cfg = GenConfig(method=method, max_new_tokens=N_TOKENS, sampling=sampling, seed=seed,
                        gamma=gamma, multi_seq=False, **options)
        toks = tuple(t for ev in generate(target, drafter, PROMPT, cfg, decode, fake_profile())
                     for t in ev.tokens)
        counts[toks] = counts.get(toks, 0) + 1
    return counts


def test_fake_vocabularies_differ_as_intended():
    v = fake_vocab()
    assert v.map.d2t.tolist() == [0, 1, 2, 6, 3, -1, -1, -1, 0]  # 'ba', 'bb', <repo>: none
    assert v.sample_mask.tolist() == [True] * 5 + [False] * 4  # one draft id per target id
    assert v.greedy_mask.tolist() == [True] * 7 + [False, True]  # <repo> is never proposed
    assert v.to_draft([4, 1]) == [3, 5]  # ' b', 'a' -> ' ', 'ba': the draft's own cuts
    assert v.to_target([3, 1]) == [6, 1]  # sampling: twin by twin
    with pytest.raises(ValueError):
        v.to_target([3, 5])  # 'ba' has no twin: the mask keeps a sampled draft from it
    assert v.to_target([3, 5], greedy=True) == [4, 1]  # greedy: ' ba' re-cut by the target


# The translation is the subject: it maps each drafted row alike whatever the chunk's length,
# so each method's two gammas share the two sampling transforms out (every gamma and every
# transform for each method; the gammas crossed with the transforms, untranslated:
# tests/test_sampling_lossless.py). 2000 samples a case: the power stated there.
T1, TKP = SamplingConfig(1.0), SamplingConfig(0.8, top_k=4, top_p=0.9)


@pytest.mark.parametrize("method,gamma,sampling", [
    ("sps", 2, T1), ("sps", 4, TKP), ("duo", 1, TKP), ("duo", 3, T1),
], ids=["sps-2-t1", "sps-4-t0.8-k4-p0.9", "duo-1-t0.8-k4-p0.9", "duo-3-t1"])
def test_sampling_through_a_translated_vocabulary_is_lossless(method, gamma, sampling):
    vocab = fake_vocab()
    counts = sample_joint(method, sampling, gamma, TranslatingDrafter(Q_DRAFT, vocab))
    assert_matches(counts, exact_joint(P_TARGET, sampling), n_samples(method))
    stats = vocab.stats()
    assert stats["proposals"] > n_samples(method) // 2 and stats["target_per_draft"] == 1.0


def test_coupled_text_through_a_translated_vocabulary_is_vanillas():
    """A seed gives vanilla's text whatever a drafter with other tokens proposed."""
    sampling, target = SamplingConfig(1.0), FakeTarget(P_TARGET)
    for seed in range(40):
        texts = []
        for method, drafter in (("vanilla", None),
                                ("sps", TranslatingDrafter(Q_DRAFT, fake_vocab())),
                                ("duo", TranslatingDrafter(Q_DRAFT, fake_vocab()))):
            cfg = GenConfig(method=method, max_new_tokens=12, sampling=sampling, seed=seed,
                            gamma=3, multi_seq=False)
            texts.append([t for ev in generate(target, drafter, PROMPT, cfg, decode,
                                               fake_profile()) for t in ev.tokens])
        assert texts[0] == texts[1] == texts[2]


def test_duo_sequential_sampling_is_lossless():
    sampling = SamplingConfig(1.0)
    counts = sample_joint("duo", sampling, 2, TranslatingDrafter(Q_DRAFT, fake_vocab()),
                          sequential=True)
    assert_matches(counts, exact_joint(P_TARGET, sampling), n_samples("duo"))


def test_chi_square_catches_q_rows_left_in_draft_columns():
    """The test has power: q rows that are not moved to the target's columns are caught, at
    300 samples already (p about 1e-55; the cases above take 2000, where a chi-square only
    grows for the same fault)."""
    sampling, n = SamplingConfig(1.0), 300
    assert n < n_samples("sps")
    drafter = TranslatingDrafter(Q_DRAFT, fake_vocab(), wrong_q=True)
    counts = sample_joint("sps", sampling, 4, drafter, n=n)
    with pytest.raises(AssertionError, match="distribution differs"):
        assert_matches(counts, exact_joint(P_TARGET, sampling), n)


@pytest.mark.parametrize("method,gamma", [("sps", 3), ("duo", 2), ("duo", None)])
def test_fake_greedy_through_a_translated_vocabulary_is_identical(method, gamma):
    target = FakeTarget(P_TARGET)
    greedy = SamplingConfig()
    want = [t for ev in generate(target, None, PROMPT, GenConfig("vanilla", 24), decode)
            for t in ev.tokens]
    vocab = fake_vocab()
    drafter = TranslatingDrafter(Q_DRAFT, vocab)
    cfg = GenConfig(method=method, max_new_tokens=24, sampling=greedy, gamma=gamma,
                    multi_seq=False)
    got = [t for ev in generate(target, drafter, PROMPT, cfg, decode, fake_profile(),
                                learned=ScriptedLearned())  # its proposals counted
           for t in ev.tokens]
    assert got == want
    stats = vocab.stats()
    assert stats["proposals"] > 1 and stats["ctx_calls"] == stats["proposals"]


def test_the_profiler_s_probes_stay_out_of_a_generation_s_counters():
    """A profile measured between two turns drafts through the vocabulary (greedy re-cuts,
    random contexts): the generation's stats count its own proposals only."""
    from models.fit.profiler import draft_once, step_once

    vocab = fake_vocab()
    drafter = TranslatingDrafter(Q_DRAFT, vocab)
    assert vocab.to_target([3, 1], after=[1, 2]) == [6, 1]  # the generation's proposal
    draft_once(drafter, [1, 2, 4], 3)
    step_once(drafter, [4, 3, 1], 2, n=2)
    vocab.settle([1, 2, 6, 1])  # the next context kept the proposal, not a probe's
    s = vocab.stats()
    assert (s["proposals"], s["draft_in"], s["ctx_calls"], s["settled_target"]) == (1, 2, 0, 2)


# -- the real pair: gemma-smol, greedy ------------------------------------------------------------
# one prompt of each kind the translation is tested on (English, French, Chinese, code, emoji;
# test_vocab.py translates more texts without the model): five more, a second of each kind,
# were here, each sps's or the default duo's (their oracle alone about 14 CPU seconds cold)
PROMPTS = [
    "Translate into French: 'Where is the train station?'",
    "Le petit déjeuner français typique comprend",
    "请用中文介绍一下长城。",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Emoji story: 🐶➡️🏠, then",
]
# the draft's translated guesses are taken and turned down within these (asserted; at 16,
# kept/rejected over a case's prompts were sps 9/17, duo-k2-seq 22/14, the default 27/14)
N = 12


def run(pair, ids, n=N, **kw):
    pair.lookup_memory.clear()  # an earlier case's answer must not draft this one: the model does
    events = list(pair.generate(ids, GenConfig(max_new_tokens=n, **kw)))
    return [t for e in events for t in e.tokens], events[-1].stats


@pytest.fixture(scope="module")
def oracle(gemma_pair):
    """vanilla's ids, decoded once and kept on disk (tests/oracle.py)."""
    from tests.conftest import vanilla_ids

    ids = {p: gemma_pair.prompt_ids(p) for p in PROMPTS}
    return {p: (ids[p], vanilla_ids(gemma_pair, ids[p], N)) for p in PROMPTS}


def test_gemma_smol_loads_a_translating_vocabulary(gemma_pair):
    vocab = gemma_pair.drafter.vocab
    assert isinstance(vocab, MappedVocab)
    assert vocab.draft_size == gemma_pair.drafter.n_vocab == 49152
    assert vocab.target_size == gemma_pair.target.vocab_size == 262144


# duo-k2-seq fixes every choice the budget would make from timings (gamma, two sequences,
# no overlap), so its rounds, and so its draft-cache counts, are the same on any machine.
# duo-multi is the default (overlapped, the policy picks one sequence or more; on a CPU it
# keeps one, where a `multi_seq=False` case would run the same rounds again). The prompts'
# scripts are what the translation is tested on, the rounds (accepted, rejected, rolled back)
# what the method is: `sps` (at a fixed gamma: its rejections checked) and the default run
# every prompt, and duo-k2-seq (two verify rows a round, the slowest) the ones whose cuts
# differ most between the tokenizers: accents, Chinese, emoji with joiners, code.
HARD = (1, 2, 4, 3)


@pytest.mark.parametrize("method,opts,prompts", [
    ("sps", {"gamma": 4}, range(len(PROMPTS))),
    ("duo", {"gamma": 3, "static_k": 2, **UNTIMED}, HARD),
    ("duo", {}, range(len(PROMPTS))),
], ids=["sps", "duo-k2-seq", "duo-multi"])
def test_gemma_smol_greedy_identical_to_vanilla(gemma_pair, oracle, method, opts, prompts):
    kept = rejected = 0
    for prompt in (PROMPTS[i] for i in prompts):
        ids, expected = oracle[prompt]
        got, stats = run(gemma_pair, ids, method=method, **opts)
        assert got == expected, f"{method} {opts} differs on {prompt!r}"
        v = stats["vocab"]
        # translated drafts proposed at a fixed gamma (the budget's own follows the timings,
        # and a long prompt's draft may still prefill when a short answer ends)
        assert v["same_tokenizer"] is False and ("gamma" not in opts or v["proposals"] > 0)
        if opts.get("sequential"):
            # the draft's KV cache is rolled back to the common prefix, never re-prefilled:
            # what each round redoes is a few ids at the end, not the context
            assert v["ctx_draft_redone"] * 10 <= v["ctx_draft_kept"], (prompt, v)
        kept += stats["accepted"]
        rejected += stats["drafted"] - stats["accepted"]
    # translated drafts were taken, and rolled back (at a fixed gamma: the budget's own
    # follows the timings and may leave the drafting to the target alone)
    assert "gamma" not in opts or kept > 0 and rejected > 0


def test_gemma_smol_sampling_runs_with_one_to_one_drafts(gemma_pair, oracle):
    gemma_pair.drafter.vocab.stats()  # counters from here on (earlier tests ran greedy)
    # accents for sps, Chinese for duo: cuts differ most (each method's own sampled rounds);
    # a fixed gamma: after the greedy cases the learned one may draft nothing in N tokens;
    # 8 tokens (were 16): two rounds or more at gamma 3, the draft's tokens counted (asserted)
    for prompt, method in zip(PROMPTS[1:3], ("sps", "duo")):
        ids, _ = oracle[prompt]
        untimed = UNTIMED if method == "duo" else {}  # the draft's tokens counted
        got, stats = run(gemma_pair, ids, n=8, method=method, sampling=SamplingConfig(0.8),
                         seed=3, gamma=3, **untimed)
        assert 0 < len(got) <= 8
        v = stats["vocab"]
        assert v["target_per_draft"] == 1.0 and v["target_out"] == v["draft_used"] > 0


def test_different_tokenizers_mask_the_target_alone(gemma_pair):
    """gemma-smol under tests/test_grammar.py's fields (here: the suite's gemma-smol is
    loaded in this file): the draft proposes unadjusted (its ids are not the target's);
    greedy `sps` and `duo` still equal `vanilla` under a schema and biases, and the masked
    target turned translated drafts down (16 tokens, not 32: `sps` at gamma 4 had 12 of 22
    refused here, `duo` 8 of 14 at its own; a fresh clone's run with `sps` at its own gamma,
    1 in all)."""
    from tests.test_grammar import ADJUSTED
    from tests.test_grammar import PROMPTS as ASKS
    from tests.test_grammar import run as run_adjusted

    fields = {**ADJUSTED["everything"], "logit_bias": {236772: 1.5}}
    want = run_adjusted(gemma_pair, ASKS[0], n=16, method="vanilla", **fields)[0]
    assert gemma_pair.decode(want).startswith('{"answer": ')
    refused = 0
    for method, gamma in (("sps", 4), ("duo", 3)):  # a fixed gamma drafts, whatever the
        # budget learned before (a fresh clone's sps at its own gamma drafted little, and duo
        # at its own none after the greedy cases here: their rounds, not masks, set it)
        gemma_pair.lookup_memory.clear()  # vanilla's answer must not draft it: the model does
        untimed = UNTIMED if method == "duo" else {}  # its drafts counted
        got, stats, _ = run_adjusted(gemma_pair, ASKS[0], n=16, method=method, gamma=gamma,
                                     **untimed, **fields)
        assert got == want, method
        assert stats["drafted"] > 0, method  # the model's drafts, translated and masked
        refused += stats["drafted"] - stats["accepted"]
    assert refused >= 2, refused


def test_q_rows_have_the_target_logit_width_when_the_tokenizer_is_longer():
    """A tokenizer with an id past the target's logits (an added token with no embedding
    row): q rows keep the logit width, so the residual p - q broadcasts; that id is never
    proposed, in either mode."""
    from core.backends import SampleCheck
    from core.sampling import Noise
    from core.verify import verify_sampled
    from tests.reference import sampled_scores

    target = VocabSide(TARGET_PIECES + [b"ba"], {0: "<eos>"}, {0})  # id 7: past the logits
    draft = VocabSide(DRAFT_PIECES, DRAFT_CONTROL, {0, 8})
    width = len(TARGET_PIECES)
    v = MappedVocab(VocabMap(draft, target), LongestMatch(draft), LongestMatch(target), width)
    assert v.target_size == width and not v.draft_mask(False)[5]  # draft "ba" -> target 7
    q = np.where(v.draft_mask(False), 1.0, 0.0)[None, :]
    q_target = v.q_to_target(q / q.sum())
    p_target = np.full((2, width), 1.0 / width)
    assert q_target.shape == (1, width)
    draft = [int(q_target[0].argmax())]
    check = SampleCheck(draft, q_target, Noise(0), 0)
    verdict = verify_sampled(draft, q_target, sampled_scores(p_target, check), Noise(0))
    assert 0 <= verdict.token < width
    assert all(t < width for t in v.to_target([5, 5, 1], greedy=True))


WINDOW_PROMPT = ("Once upon a time, in a kingdom by the sea, there lived a baker who rose before "
                 "the sun every morning to light her ovens. Her bread was known in every village "
                 "along the coast, and one winter day a stranger came to her door and sat down "
                 "by the fire")


@pytest.mark.parametrize("method", ["vanilla", "sps", "duo"])
def test_gemma_smol_near_the_window_ends_with_length(gemma_pair, method, monkeypatch):
    """gemma-smol at a 64-token window (the draft counts it in its own tokens): every method
    ends at the window or an end id. The suite's gemma-smol with the windows a load with
    `n_ctx=64` gives (the target's 64, the draft's `draft_window`): a load of its own cost
    about 9 CPU seconds; the load's own window is checked on smol-self (test_context.py).
    The prompt fills most of the window: eight tokens to go (were 49, then 13: each a gemma
    step on one core)."""
    from models.loader import draft_window

    monkeypatch.setattr(gemma_pair.target, "n_ctx", 64)
    monkeypatch.setattr(gemma_pair.drafter, "n_ctx", draft_window(64, same_tokenizer=False))
    ids = gemma_pair.prompt_ids(WINDOW_PROMPT, raw=True)
    assert 50 < len(ids) < 60  # a few tokens to go: each a gemma step on one core
    gemma_pair.lookup_memory.clear()  # the model drafts, not an earlier case's answer
    events = list(gemma_pair.generate(ids, GenConfig(method=method, max_new_tokens=10_000)))
    tokens, stats = [t for e in events for t in e.tokens], events[-1].stats
    assert stats["stop_reason"] in ("context_window", "eos")
    assert len(ids) + len(tokens) <= 64


def test_gemma_smol_lookup_tokens_need_no_translation(gemma_pair):
    """The lookup proposes target ids: on gemma-smol they pass untranslated (here, beside
    the file's other gemma-smol cases: one load per worker; tests/test_lookup_lossless.py
    has the lookup's other cases)."""
    from tests.conftest import vanilla_ids

    ids = gemma_pair.tokenizer(COPY_TEXT)["input_ids"]
    ref = vanilla_ids(gemma_pair, ids, 16)  # the copy's lookup drafts within 16 (asserted)
    events = list(gemma_pair.generate(list(ids), GenConfig(method="duo", lookup="on",
                                                           max_new_tokens=16)))
    assert [t for e in events for t in e.tokens] == ref
    assert events[-1].stats["lookup"]["accepted"] > 0
    gemma_pair.lookup_memory.clear()
