"""The lookup's two sources learned apart: the generation's own context and the memory of
earlier requests (core/bands.py LookupBands, core/suffix.py ContextLookup, core/fusion.py):
an unrelated request's text matches as long as this one's own but passes less often, so its
misses must not price the context's copies down, nor its long matches win by length alone."""
from __future__ import annotations

import pytest

from core.backends import Draft
from core.bands import BAND_PRIOR, MEMORY_PRIOR, LookupBands
from core.budget import DraftBudget, Profile
from core.fusion import LookupPolicy
from core.metrics import GenerationStats
from core.suffix import ContextLookup, SuffixMemory
from core.telemetry import Telemetry
from tests.test_fusion import Run  # what the policy reads of a generation

PASSAGE = list(range(100, 140))
SHARED = [7, 8, 9, 10, 11, 12, 13, 14]  # a tail that both the context and the memory hold


def test_memory_misses_move_the_memory_s_bands_only():
    bands = LookupBands(ema=1.0)
    assert all(m <= c for m, c in zip(MEMORY_PRIOR, BAND_PRIOR)) and MEMORY_PRIOR < BAND_PRIOR
    assert bands.pass_probs([0.99], "memory") == [MEMORY_PRIOR[-1]]
    context_before = bands.pass_probs([0.99, 0.85])
    for _ in range(3):
        bands.observe([0.99] * 5, accepted=0, source="memory")
    assert bands.pass_probs([0.99, 0.85]) == context_before
    assert bands.pass_probs([0.99], "memory")[0] == pytest.approx(MEMORY_PRIOR[-1] * 4 / 7)
    assert list(bands.alpha)[LookupBands.band(0.99, "memory")] == 0.0  # the carried ema (1.0)
    assert LookupBands(list(bands.alpha)).pass_probs([0.99], "memory") == [0.0]


def lookup(memory_rate: float) -> tuple[ContextLookup, LookupBands]:
    """The context copies PASSAGE after a short match (SHARED[-3:] + the passage); the memory
    holds SHARED followed by other text: its match is longer, its continuation wrong."""
    memory = SuffixMemory()
    memory.add(SHARED + [1, 2, 3, 4, 5, 6])
    ctx = SHARED[-3:] + PASSAGE + [50] + SHARED
    rates = list(BAND_PRIOR) + [memory_rate] * len(MEMORY_PRIOR)
    return ContextLookup(ctx, memory), LookupBands(rates)


def test_the_proposal_with_more_expected_passes_wins_not_the_longer_match():
    index, bands = lookup(memory_rate=0.2)
    assert index.propose(8).source == "memory"  # by length alone: the memory's 8-token match
    found = index.propose(8, score=bands.expected)
    assert found.source == "context" and found.tokens == PASSAGE[:8]
    index, bands = lookup(memory_rate=1.0)  # where the memory's copies do pass, they win
    assert index.propose(8, score=bands.expected).source == "memory"


def pick(memory_rate: float):
    index, bands = lookup(memory_rate)
    policy = LookupPolicy(index, bands, "on", sampled=False)
    budget = DraftBudget(Profile(draft_token_s=0.01, verify_s=[0.05] * 33), overlap=True)
    return policy.pick(Run(index.index.tokens.tolist()), budget, Draft(), beside=True), bands


def test_a_memory_round_is_counted_and_learned_in_the_memory_s_bands():
    low, _ = pick(memory_rate=0.2)  # the policy asks for the better source too
    assert low.draft.lookup_source == "context" and low.draft.tokens == PASSAGE[:len(low.draft)]
    pick_, bands = pick(memory_rate=1.0)
    assert pick_.source == "lookup" and pick_.draft.lookup_source == "memory"
    assert pick_.draft[1:].lookup_source == pick_.draft[:2].lookup_source == "memory"
    telemetry, before = Telemetry(GenerationStats("lookup"), 0.0), list(bands.tried)
    telemetry.drafting(pick_.draft, pick_.source, pick_.offered)
    rec = telemetry.round(0.0, (0.0, 0.0), (0.0, 0.0), len(pick_.draft), accepted=0)
    budget = DraftBudget(Profile(draft_token_s=0.01, verify_s=[0.05] * 33), overlap=True)
    lesson = telemetry.lesson(budget, rec, len(pick_.draft), 0, None)
    assert bands.tried == before  # recorded, not yet learned
    bands.observe(*lesson.band)
    memory_band = LookupBands.band(pick_.draft.conf[0], "memory")
    assert bands.tried[memory_band] == 1 and bands.passed[memory_band] == 0
    assert sum(bands.tried[:len(BAND_PRIOR)]) == 0
    assert telemetry.stats.lookup_dict()["memory"] == 1


def test_the_page_and_the_benchmark_say_how_many_rounds_the_memory_won():
    from app.view import lookup_line
    from measure.bench_summary import _lookup_cell

    lk = {"rounds": 6, "won": 4, "memory": 2, "share": 0.5, "acceptance": 0.9}
    assert "won 4 (2 from earlier requests) of 6" in lookup_line({"lookup": lk})
    assert _lookup_cell({"lookup": lk}) == "50%, 0.90, 4 (2 memory) of 6"
