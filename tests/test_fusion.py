"""The lookup's pricing in a `duo` round (core/fusion.py), with injected timings and pass
rates: which draft a round verifies, never how long it takes."""
from __future__ import annotations

from core.backends import Draft
from core.bands import LookupBands
from core.budget import DraftBudget, Profile
from core import fusion
from core.fusion import LOOKUP_MAX, PROBE_EVERY, LookupPolicy
from core.suffix import ContextLookup

# a CPU-like target: a longer chunk costs more (1 token 63 ms, 8 tokens 100, 33 tokens 185)
VERIFY = [0.063, 0.07, 0.08, 0.086, 0.09, 0.095, 0.098, 0.1] + [0.13] * 8 + [0.185] * 17
PASSAGE = list(range(100, 160))  # 60 tokens pasted in the prompt
MODEL_CHUNK = PASSAGE[20:27]  # the model's chunk: what the copy continues with


class Run:
    """What the policy reads of a generation: its context, room and grammar (none); the
    prompt is prefilled."""
    adjust, prefilling = None, False

    def __init__(self, ctx: list[int]):
        self.ctx = ctx

    def draft_room(self, gamma: int, ahead: int = 0) -> int:
        return gamma


def budget(alpha: float = 0.97) -> DraftBudget:
    b = DraftBudget(Profile(draft_token_s=0.0127, verify_s=VERIFY), overlap=True)
    b.alpha, b.gamma = alpha, 7
    return b


def policy(band_rate: float, mode: str = "auto") -> tuple[LookupPolicy, Run]:
    ctx = [1, 2, 3] + PASSAGE + [9, 9] + PASSAGE[:20]  # the answer is copying the passage
    bands = LookupBands([band_rate] * (len(LookupBands().alpha)))
    return LookupPolicy(ContextLookup(ctx), bands, mode, sampled=False), Run(ctx)


def test_a_long_confident_copy_beats_the_models_chunk():
    pol, run = policy(0.99)
    pick = pol.pick(run, budget(), Draft(list(MODEL_CHUNK)), beside=True)
    assert pick.source in ("fused", "lookup")
    assert pick.draft.tokens == PASSAGE[20:20 + len(pick.draft)]
    assert len(pick.draft) == LOOKUP_MAX


def test_a_copy_that_seldom_passes_leaves_the_models_chunk():
    pol, run = policy(0.6)
    model = Draft(list(MODEL_CHUNK))
    picks = [pol.pick(run, budget(), model, beside=True) for _ in range(PROBE_EVERY)]
    assert [p.source for p in picks[:-1]] == ["model"] * (PROBE_EVERY - 1)
    assert all(p.draft is model and p.offered for p in picks[:-1])
    assert picks[-1].source == "fused"  # the probe: the bands are measured now and then


def test_a_generation_whose_copies_miss_stops_taking_them():
    """Bands carried at 0.99 take the copy; two misses of this generation's (on the copy's
    first token) leave the model's chunk to the rounds after them (the carried ema alone
    would still be at 0.80 and fuse)."""
    pol, run = policy(0.99)
    model = Draft(list(MODEL_CHUNK))
    assert pol.pick(run, budget(), model, beside=True).source != "model"
    for _ in range(2):
        pol.bands.observe([0.99] * 10, accepted=0)
    assert pol.pick(run, budget(), model, beside=True).source == "model"


def test_without_a_chunk_a_confident_copy_is_verified_alone():
    pol, run = policy(0.99)
    pick = pol.pick(run, budget(), Draft(), beside=True)
    assert pick.source == "lookup" and pick.draft.tokens == PASSAGE[20:20 + len(pick.draft)]
    assert len(pick.draft) > 8


def test_a_long_draft_pays_for_the_empty_round_it_may_leave():
    """At pass rate 0.9 a 31-token draft yields more tokens than the model's chunk, but it
    seldom passes whole and leaves the next round without a draft: the chunk wins."""
    pol, run = policy(0.9)
    b = budget()
    long_copy = [0.9] * 24
    assert pol._rate(b, [0.97] * 7 + long_copy, beside=True) < pol._rate(b, [0.97] * 7, True)
    pick = pol.pick(run, b, Draft(list(MODEL_CHUNK)), beside=True)
    assert len(pick.draft) < LOOKUP_MAX


def test_on_takes_the_lookup_whatever_the_price():
    pol, run = policy(0.1, mode="on")
    pick = pol.pick(run, budget(), Draft(list(MODEL_CHUNK)), beside=True)
    assert pick.source == "fused" and len(pick.draft) == LOOKUP_MAX


def test_a_copy_a_little_less_sure_than_the_model_still_pays_by_its_length():
    """Pass rate 0.96 against the model's 0.97: a 31-token draft yields about 17 tokens for
    less than twice the time of the chunk's 7; the chunk's chance of leaving the next draft
    ready is priced as the empty round it avoids, not as tokens earned this round."""
    pol, run = policy(0.96)
    pick = pol.pick(run, budget(), Draft(list(MODEL_CHUNK)), beside=True)
    assert pick.source in ("fused", "lookup") and len(pick.draft) > 16


def test_a_lookup_must_win_by_the_margin(monkeypatch):
    """Priced gains smaller than MARGIN are within the pricing's error: the chunk stays."""
    pol, run = policy(0.99)
    model = Draft(list(MODEL_CHUNK))
    assert pol.pick(run, budget(), model, beside=True).draft is not model
    monkeypatch.setattr(fusion, "MARGIN", 10.0)
    pol, run = policy(0.99)
    assert pol.pick(run, budget(), model, beside=True).draft is model


def test_long_verifies_measured_dear_make_the_lookup_shorter():
    """The verify's cost is learned per length: long verifies measured at 3x the profile
    (beside the drafting thread, say) while short ones run as profiled price a long copy
    dearer, and the same confident copy is cut shorter than when all lengths scale alike."""
    pol, run = policy(0.96)
    b = budget()
    for _ in range(20):
        b.observe(0, 0, verify_s=3 * VERIFY[31], verify_n=32)
        b.observe(0, 0, verify_s=VERIFY[7], verify_n=8)
    assert b.verify_s(32) > 2.5 * VERIFY[31] and b.verify_s(8) < 1.1 * VERIFY[7]
    dear = pol.pick(run, b, Draft(list(MODEL_CHUNK)), beside=True)
    cheap = policy(0.96)[0].pick(run, budget(), Draft(list(MODEL_CHUNK)), beside=True)
    assert len(dear.draft) <= 16 < len(cheap.draft)


def test_the_worker_is_given_a_guess_only_where_batching_spares_decodes():
    """A confident copy goes to the worker as a guess when a batched decode of k tokens costs
    less than the k decodes it may spare; on a draft where a batch of k costs k steps, none."""
    pol, run = policy(0.99)
    free = budget()
    free.profile.draft_step_s = {1: 0.0127, 2: 0.014, 3: 0.015, 4: 0.016}
    got = pol.guess(run, free, [], 16)
    assert got == PASSAGE[20:20 + len(got)] and len(got) == 15
    dear = budget()
    dear.profile.draft_step_s = {k: 0.0127 * k for k in range(1, 5)}
    assert pol.guess(run, dear, [], 16) == []
    unsure = policy(0.3)
    assert unsure[0].guess(unsure[1], free, [], 16) == []
