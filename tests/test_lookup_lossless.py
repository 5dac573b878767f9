"""The lookup keeps every method lossless: greedy ids are vanilla's (fakes,
smol-self; gemma-smol in tests/test_cross_tokenizer.py, beside its other gemma cases), the
coupled sampler keeps a seed's text, the rejection sampler's one-hot q keeps the target's
distribution (chi-square), a grammar cuts a lookup draft, and the lookup's acceptance is
learned apart from the model draft's."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from core.backends import Draft, Proposal, QRows, SampleCheck
from core.bands import LookupBands
from core.constraints import Adjuster
from core.engine import GenConfig, Run, generate
from core.fusion import LookupPolicy
from core.learned import Learned
from core.sampling import Noise, SamplingConfig, logits_to_probs
from core.suffix import ContextLookup
from core.verify import verify_sampled
from tests.conftest import vanilla_ids
from tests.fakes import (FakeDrafter, FakeGrammar, FakeTarget, ScriptedLearned, decode,
                         fake_profile, markov)
from tests.reference import sampled_scores
from tests.test_sampling_lossless import assert_matches

V = 24
P = markov(V, 1, sharp=0.3)
Q = markov(V, 2, sharp=0.3)
COPY = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 1, 2, 3, 4, 5, 6]  # a copy to continue
# duo's options where its lookup rounds are counted: the worker drafts on the caller's
# thread, so COPY's draft prefill (priced above a forward) takes one plain round, not as
# many as the target fits beside it
COUNTED = {"sequential": True}


def run(method, lookup="auto", n=60, prompt=COPY, target=None, drafter=None, learned=None,
        grammar=None, profile=None, shared_cores=False, **options):
    """`shared_cores`: duo in sps's loop with the lookup (a CPU target's). The budget sees
    the profile's times unless `learned` is given (ScriptedLearned): its own gamma and the
    lookup's pricing, not the clock, pick the rounds."""
    learned = ScriptedLearned() if learned is None else learned
    target = target or FakeTarget(P)
    drafter = None if method in ("vanilla", "lookup") else drafter or FakeDrafter(Q)
    cfg = GenConfig(method=method, max_new_tokens=n, lookup=lookup, **options)
    events = list(generate(target, drafter, prompt, cfg, decode, profile or fake_profile(),
                           learned=learned, grammar=grammar, shared_cores=shared_cores))
    ids = [t for e in events for t in e.tokens]
    return ids, [s for e in events for s in e.sources], events[-1].stats


@pytest.mark.parametrize("method,lookup", [("duo", "off"), ("duo", "auto"), ("duo", "on"),
                                           ("lookup", "auto"), ("lookup", "on")])
@pytest.mark.parametrize("drafter", ["unlike", "like"])
def test_greedy_is_vanilla(method, lookup, drafter):
    ref = run("vanilla")[0]
    draft = FakeDrafter(Q if drafter == "unlike" else P)  # like: model chunks to fuse with
    counted = COUNTED if method == "duo" else {}
    ids, sources, stats = run(method, lookup, drafter=draft, **counted)
    assert ids == ref
    assert len(sources) == len(ids)
    lk = stats["lookup"]
    if lookup == "off":
        assert lk["rounds"] == lk["proposed"] == 0 and "lookup" not in sources
        assert {r["source"] for r in stats["rounds_log"]} <= {"model", "plain"}
    else:
        assert lk["accepted"] > 0 and sources.count("lookup") > 0
        assert lk["share"] == pytest.approx(sources.count("lookup") / len(ids))
        assert 0 < lk["acceptance"] <= 1 and lk["won"] <= lk["rounds"]


def test_fused_rounds_extend_a_model_chunk():
    """A draft as good as the target gives chunks; the index continues them (fused)."""
    ids, sources, stats = run("duo", "on", drafter=FakeDrafter(P), gamma=2, **COUNTED)
    assert ids == run("vanilla")[0]
    kinds = {r["source"] for r in stats["rounds_log"]}
    assert "fused" in kinds and {"draft", "lookup"} <= set(sources)


def test_the_models_chunk_goes_on_past_the_lookups_tokens(monkeypatch):
    """The worker drafts after the model's part of a draft: when the lookup's tokens pass
    (in part or whole) and the model wrote the same, its chunk is the next round's draft."""
    calls = []
    follow = Proposal.follow

    def spy(self, committed):
        got = follow(self, committed)
        calls.append((list(committed), got))
        return got
    monkeypatch.setattr(Proposal, "follow", spy)
    # a draft token a tenth of the default's: the chunk beside a lookup draft is what fits
    # in its verify (lookup_chunk), longer than the lookup's tokens
    ids, _, _ = run("duo", "on", drafter=FakeDrafter(P), gamma=2,
                    profile=fake_profile(draft_s=0.001), **COUNTED)
    assert ids == run("vanilla")[0]
    went_on = [(c, got) for c, got in calls if len(c) > 1 and got is not None]
    assert went_on and all(got.tokens for _, got in went_on)


def test_follow_takes_the_sequence_that_wrote_the_committed_tokens():
    main, other = Draft([4, 5, 6, 7]), Draft([9, 5, 6])
    proposal = Proposal(main, [other])
    assert proposal.follow([4, 5]).tokens == [6, 7]
    assert proposal.follow([9]).tokens == [5, 6]
    assert proposal.follow([4, 6]) is None and proposal.follow([8]) is None


def test_gamma_zero_still_has_lookup_rounds():
    """A draft far from the target: the budget stops drafting (the plain branch), yet the
    index's continuations are still verified."""
    learned = ScriptedLearned()
    learned.budgets["duo"] = {"alpha": 0.02, "draft_scale": 1.0, "verify_scale": 1.0,
                              "profile": fake_profile(), "since_probe": 0}
    ids, sources, stats = run("duo", "auto", learned=learned, drafter=FakeDrafter(Q),
                              **COUNTED)
    assert ids == run("vanilla")[0]
    assert stats["lookup"]["won"] > 0 and "lookup" in sources


def test_the_worker_is_given_the_lookups_continuation_as_a_guess():
    """Each chunk the worker drafts comes with the index's continuation of its context (the
    drafter evaluates it in one batch: tests/test_draft_guess.py); never with the lookup off."""
    on, off = FakeDrafter(P), FakeDrafter(P)
    assert run("duo", "auto", drafter=on, **COUNTED)[0] == \
        run("duo", "off", drafter=off, **COUNTED)[0]
    assert any(on.guesses) and not any(off.guesses)
    for (n_ctx, n), guess in zip(on.calls, on.guesses):
        assert len(guess) < max(n, 1)  # the last drafted token is never decoded


@pytest.mark.parametrize("lookup", ["auto", "on"])
@pytest.mark.parametrize("drafter", ["unlike", "like"])
def test_duo_in_sps_s_loop_with_the_lookup_is_vanilla(lookup, drafter):
    """Where the target shares the draft's cores: the draft's chunk, the lookup's or the two
    fused, then the verify; the text is vanilla's and the lookup's tokens pass."""
    draft = FakeDrafter(Q if drafter == "unlike" else P)
    ids, sources, stats = run("duo", lookup, drafter=draft, shared_cores=True)
    assert ids == run("vanilla")[0] and stats["lookup"]["accepted"] > 0
    assert sources.count("lookup") > 0 and draft.calls
    spans = [r for r in stats["rounds_log"] if r["drafted"]]
    assert all(r["draft_span"][1] <= r["verify_span"][0] + 1e-9 for r in spans)  # in turns


def test_lookup_rounds_teach_the_bands_not_the_model_alpha():
    learned = Learned()
    run("lookup", "on", learned=learned)
    assert "lookup" in learned.lookup_bands
    assert learned.lookup_bands["lookup"] != list(LookupBands().alpha)
    assert learned.budgets["lookup"]["alpha"] == 0.8  # the model draft's prior, untouched


def test_bands_observe_passes_then_one_failure():
    bands = LookupBands(ema=1.0)
    bands.observe([0.95, 0.95, 0.5, 0.1], accepted=2)
    top = LookupBands.band(0.95)
    assert bands.alpha[top] == 1.0 and bands.alpha[1] == 0.0  # passed; the first rejected
    assert bands.alpha[0] == LookupBands().alpha[0]  # after the rejection: not tried


def test_a_generation_s_own_passes_outweigh_the_carried_rates():
    """Four misses in a band of this generation bring its rate from the carried 0.8 to
    below half; the next generation starts from the carried ema again (one step of it)."""
    carried = [0.8] * len(LookupBands().alpha)
    bands, top = LookupBands(carried), LookupBands.band(0.96)
    assert bands.pass_probs([0.96]) == [0.8]
    for _ in range(4):
        bands.observe([0.96, 0.96], accepted=0)
    assert bands.pass_probs([0.96])[0] == pytest.approx(0.8 * 4 / 8)
    for _ in range(12):
        bands.observe([0.96] * 3, accepted=3)  # a copy: 36 passes
    assert bands.pass_probs([0.96])[0] == pytest.approx((3.2 + 36) / (4 + 40))
    nxt = LookupBands(list(bands.alpha))
    assert nxt.tried == [0] * len(carried)
    assert nxt.pass_probs([0.96])[0] == pytest.approx(bands.alpha[top])


def test_lookup_off_keeps_todays_rounds():
    """off: the same rounds as a generation that never heard of the lookup."""
    a = run("duo", "off", drafter=FakeDrafter(P), gamma=3, **COUNTED)
    b = run("duo", "off", drafter=FakeDrafter(P), gamma=3, **COUNTED)
    assert a[0] == b[0] == run("vanilla")[0]
    assert [(r["drafted"], r["accepted"]) for r in a[2]["rounds_log"]] == \
        [(r["drafted"], r["accepted"]) for r in b[2]["rounds_log"]]
    assert set(a[1]) <= {"draft", "target"}


def test_config_names_lookup():
    for bad in (GenConfig(lookup="maybe"), GenConfig(method="lookup", lookup="off"),
                GenConfig(method="sps", lookup="on")):
        with pytest.raises(ValueError, match="lookup"):
            bad.validate()
    GenConfig(method="sps", lookup="auto").validate()


# -- sampling -------------------------------------------------------------------------------
def test_coupled_seeds_keep_vanillas_text():
    sampling = SamplingConfig(0.8)
    for seed in (0, 1, 2):
        ref = run("vanilla", sampling=sampling, seed=seed)[0]
        for method, lookup in (("duo", "on"), ("lookup", "on"), ("duo", "auto")):
            ids = run(method, lookup, sampling=sampling, seed=seed, drafter=FakeDrafter(P))[0]
            assert ids == ref
        for lookup in ("auto", "on"):
            shared = run("duo", lookup, sampling=sampling, seed=seed, drafter=FakeDrafter(P),
                         shared_cores=True)
            assert shared[0] == ref


V4, N4 = 4, 3
P4 = markov(V4, seed=1, sharp=0.7)
COPY4 = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2]


def exact_joint4(sampling):
    rows = logits_to_probs(np.log(P4 + 1e-30), sampling)
    joint = {}
    for seq in itertools.product(range(V4), repeat=N4):
        prob, last = 1.0, COPY4[-1]
        for t in seq:
            prob *= rows[last, t]
            last = t
        joint[seq] = prob
    return joint


@pytest.mark.parametrize("method", ["lookup", "duo", "duo-shared"])
def test_rejection_sampler_with_one_hot_lookups_keeps_the_distribution(method):
    """duo-shared: duo in sps's loop (the target on the draft's cores)."""
    sampling, n, counts, proposed = SamplingConfig(1.0), 2000, {}, 0
    target, drafter = FakeTarget(P4), FakeDrafter(markov(V4, seed=2, sharp=0.7))
    profile, shared = fake_profile(), method == "duo-shared"
    lookup, method = "on", "duo" if shared else method
    for seed in range(n):
        cfg = GenConfig(method=method, max_new_tokens=N4, sampling=sampling, seed=seed,
                        sampler="rejection", lookup=lookup, gamma=2, multi_seq=False)
        events = list(generate(target, None if method == "lookup" else drafter, COPY4, cfg,
                               decode, profile, shared_cores=shared))
        toks = tuple(t for e in events for t in e.tokens)
        counts[toks] = counts.get(toks, 0) + 1
        proposed += events[-1].stats["lookup"]["proposed"]
    assert proposed > n  # the lookup's tokens were on trial
    assert_matches(counts, exact_joint4(sampling), n)


def test_one_hot_rows_verify_as_dense_ones():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(6), size=3)
    dense_row = rng.dirichlet(np.ones(6))
    q = QRows([dense_row, 4, 1])
    dense = np.stack([dense_row, np.eye(6)[4], np.eye(6)[1]])
    draft = [2, 4, 1]
    for seed in range(20):
        noise = Noise(seed)
        a = sampled_scores(p, SampleCheck(draft[:2], q[:2], noise, 5))
        b = sampled_scores(p, SampleCheck(draft[:2], dense[:2], noise, 5))
        assert a == b
        assert verify_sampled(draft[:2], q, a, noise, 5) == verify_sampled(draft[:2], dense, b,
                                                                          noise, 5)
    assert q[1, 4] == 1.0 and q[1, 3] == 0.0 and q[0, 2] == dense_row[2]
    assert len(q[1:]) == 2 and q[1:].parts()[2:] == ([0, 1], [4, 1])


def test_device_rows_build_one_hot_rows_on_the_device():
    torch = pytest.importorskip("torch")
    from models.target.sampling import device_scores

    rng = np.random.default_rng(1)
    logits = np.log(rng.dirichlet(np.ones(6), size=3)).astype(np.float32)
    dense_row = rng.dirichlet(np.ones(6))
    q, dense = QRows([dense_row, 3]), np.stack([dense_row, np.eye(6)[3]])
    for seed in range(10):
        a = device_scores(torch.from_numpy(logits), SamplingConfig(1.0),
                          SampleCheck([1, 3], q, Noise(seed), 0))
        b = device_scores(torch.from_numpy(logits), SamplingConfig(1.0),
                          SampleCheck([1, 3], dense, Noise(seed), 0))
        assert (a.recovered, a.bonus) == (b.recovered, b.bonus)


# -- grammar --------------------------------------------------------------------------------
def test_a_grammar_cuts_a_lookup_draft_at_its_first_refused_token():
    prompt = [5, 7, 8, 9, 6, 5, 7]
    cfg = GenConfig(method="lookup", lookup="on")
    run_ = Run(FakeTarget(P), prompt, cfg, decode, grammar=FakeGrammar(V))
    run_.adjust = Adjuster(len(prompt) - 1, FakeGrammar(V))  # 7 is generated: prev = 7
    policy = LookupPolicy(ContextLookup(prompt), LookupBands(), "on", sampled=False)
    found = policy.proposal(run_, [], 3)
    # allowed when (2 * prev + t) % 3 != 0: 8 after 7 (22), 9 after 8 (25); 6 after 9 (24) not
    assert found.tokens == [8, 9]
    assert ContextLookup(prompt).propose(3).tokens == [8, 9, 6]


def test_grammar_generation_with_lookups_is_vanilla():
    ref = run("vanilla", grammar=FakeGrammar(V))[0]
    for method in ("duo", "lookup"):
        assert run(method, "on", grammar=FakeGrammar(V), drafter=FakeDrafter(P))[0] == ref


# -- real pairs -----------------------------------------------------------------------------
COPY_TEXT = ("Copy this list exactly, twice.\nList: red apple, green pear, yellow lemon, "
             "purple plum, orange peach, black cherry.\nFirst copy: red apple, green pear, "
             "yellow lemon, purple plum, orange peach, black cherry.\nSecond copy:")


def test_smol_self_greedy_is_vanilla(smol_pair):
    """The lookup's modes on a prompt it copies from (duo with the lookup off, vanilla's
    greedy text on the real pair: tests/test_multi_seq.py). 18 tokens: the copy ends by token
    17 (past it, at 24, a fresh memory's guesses were turned down, never asserted: which
    source a round takes follows what the pair learned before, in the suite, 0 turned down
    once; 6 vanilla steps and 18 tokens more); the later modes draw the answer from the
    memory (40 before: 16 vanilla steps more)."""
    ids = smol_pair.tokenizer(COPY_TEXT)["input_ids"]
    ref = vanilla_ids(smol_pair, ids, 18)
    for method, lookup in (("duo", "auto"), ("duo", "on"), ("lookup", "auto")):
        events = list(smol_pair.generate(list(ids), GenConfig(method=method, lookup=lookup,
                                                              max_new_tokens=18)))
        assert [t for e in events for t in e.tokens] == ref, (method, lookup)
        stats = events[-1].stats
        if lookup == "on":  # auto prices it with timing scales: whether it wins follows them
            assert stats["lookup"]["accepted"] > 0, (method, lookup)
    assert len(smol_pair.lookup_memory) > 0  # each finished generation is remembered
    smol_pair.lookup_memory.clear()


def test_a_probe_never_drops_the_model_s_chunk():
    """A probe (auto, after rounds the lookup lost) extends the model's chunk; the lookup alone
    is tried only in a plain round, so a probe's miss never costs the chunk drafted beside."""
    from core.backends import Draft
    from core.fusion import Pick, _probe

    model, alone, fused = Draft([1, 2]), Draft([7]), Draft([1, 2, 3])
    own = Pick(model, "model", True)
    options = [(1.0, Pick(alone, "lookup", True)), (0.5, Pick(fused, "fused", True))]
    assert _probe(options, own).source == "fused"
    assert _probe(options[:1], own) is own
    plain = Pick(Draft(), "plain", True)
    assert _probe(options[:1], plain).source == "lookup"


class ScoreLog(FakeTarget):
    """A fake target that records the length of every chunk it scores."""

    def __init__(self, P: np.ndarray):
        super().__init__(P)
        self.lengths: list[int] = []

    def score(self, tokens, n_rows, sampling, check=None, adjust=None):
        self.lengths.append(len(tokens))
        return super().score(tokens, n_rows, sampling, check, adjust)


@pytest.mark.parametrize("method", ["lookup", "duo", "duo-shared"])
def test_the_prompt_s_prefill_verifies_no_lookup_tokens(method):
    """The first token comes after the prompt's prefill alone, though COPY's repeat gives the
    index a continuation of the prompt; later rounds verify the index's tokens."""
    target, shared = ScoreLog(P), method == "duo-shared"
    ids, _, stats = run("duo" if shared else method, "on", target=target,
                        shared_cores=shared, **COUNTED)
    assert ids == run("vanilla")[0]
    assert target.lengths[0] == len(COPY)
    assert stats["lookup"]["proposed"] > 0
