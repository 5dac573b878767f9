"""Never slower than plain decoding: when the measured costs say drafting cannot pay (a fast
target beside a slow draft), the budget falls back to gamma 0, says so, and tries a draft
again every PROBE_EVERY rounds; output stays the target's."""
from __future__ import annotations

from core.budget import PROBE_EVERY, DraftBudget, Profile
from core.engine import GenConfig, generate
from tests.fakes import FakeDrafter, FakeTarget, ScriptedLearned, decode, markov

P = markov(16, seed=3, sharp=0.3)


def slow_draft_profile() -> Profile:
    """The draft takes 20 ms a token, the target 1-2 ms whatever the chunk."""
    return Profile(draft_token_s=0.02, verify_s=[0.001 + 0.00003 * n for n in range(1, 33)],
                   draft_step_s={k: 0.02 for k in range(1, 5)})


def run(method, profile, drafter):
    """The budget sees the profile's own times (ScriptedLearned): no clock decides a round."""
    cfg = GenConfig(method=method, max_new_tokens=40, multi_seq=False,  # the model draft's
                    lookup="off")  # budget (test_lookup_lossless: lookup rounds at gamma 0)
    events = list(generate(FakeTarget(P), drafter, [1, 2], cfg, decode, profile,
                           learned=ScriptedLearned()))
    return [t for e in events for t in e.tokens], events[-1].stats


def test_budget_falls_back_to_plain_decoding_and_probes():
    budget = DraftBudget(slow_draft_profile(), alpha=0.9)
    assert budget.gamma == 0 and budget.reason.startswith("plain decoding")
    gammas = [budget.observe(0, 0, verify_s=0.001, verify_n=1) for _ in range(2 * PROBE_EVERY)]
    assert gammas.count(0) == 2 * PROBE_EVERY - 2 and all(g >= 1 for g in gammas if g)
    fast = DraftBudget(Profile(draft_token_s=0.0002, verify_s=slow_draft_profile().verify_s))
    assert fast.gamma >= 1 and "target alone" in fast.reason


def test_budget_drafts_again_when_the_draft_turns_out_fast():
    budget = DraftBudget(slow_draft_profile(), alpha=0.9)
    for _ in range(20):  # a probe round measured a draft 100x faster than profiled
        budget.observe(4, 4, draft_s=0.0008, draft_n=4, verify_s=0.0012, verify_n=5)
    assert budget.gamma >= 1


def test_duo_with_a_slow_draft_decodes_plainly_and_keeps_the_output():
    expected, _ = run("vanilla", None, None)
    drafter = FakeDrafter(P)
    got, stats = run("duo", slow_draft_profile(), drafter)
    assert got == expected
    assert stats["plain_rounds"] >= 30
    assert stats["gamma_profile"]["reason"].startswith("plain decoding")
    assert len(drafter.calls) <= 40 // PROBE_EVERY + 3  # only the probes drafted
    got, stats = run("sps", slow_draft_profile(), FakeDrafter(P))
    assert got == expected and stats["plain_rounds"] >= 30


class ThreadedDraft(FakeDrafter):
    """A draft whose time per token depends on its thread count (4 threads ~ 2 threads)."""
    name = "threaded-draft"
    TIMES = {1: 0.004, 2: 0.002, 4: 0.00198, 7: 0.003}

    @property
    def delay(self):
        return self.TIMES[self.threads]

    @delay.setter
    def delay(self, value):
        pass


def test_draft_threads_are_picked_by_measurement(tmp_path, monkeypatch):
    import models.fit.profiler as profiler
    from models.fit.profiler import fastest_threads, pick_draft_threads

    monkeypatch.setenv("DUO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(profiler, "_cpu_sample", lambda: None)  # no real load readings
    monkeypatch.setattr(profiler, "draft_once",  # injected times: the draft's own table
                        lambda drafter, ctx, n: drafter.TIMES[drafter.threads] * n)
    drafter = ThreadedDraft(markov(1000, seed=4))
    times = pick_draft_threads("fake-pair", drafter, 7)
    assert sorted(times) == [1, 2, 4, 7] and drafter.threads == 1  # its own count restored
    assert fastest_threads(times) in (2, 4)  # within 3%: the fewer threads
    assert fastest_threads({1: 0.004, 2: 0.002, 4: 0.00199}) == 2
    assert fastest_threads({1: 0.004, 2: 0.002, 4: 0.0015}) == 4
    drafter.TIMES = {}  # cached: a second call measures nothing
    assert pick_draft_threads("fake-pair", drafter, 7) == times
    assert pick_draft_threads("fake-pair", drafter, 1) == {1: 0.0}
