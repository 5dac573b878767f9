"""The draft alone: while duo's target waits for a chunk, the draft decodes on every core
where that measured faster (models/fit/placement.py, core/scheduler.py, LlamaDrafter); the
budget prices the rest of a chunk past the verify at that speed (core/budget.py)."""
from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from core.budget import DraftBudget, Profile
from core.scheduler import DraftWorker
from core.sampling import SamplingConfig
from models.fit.placement import Placement, Threads
from tests.fakes import FakeDrafter, fake_profile, markov


def alone_profile(ratio: float) -> Profile:
    prof = fake_profile(draft_s=0.02, verify_base=0.04, verify_per_token=0.004)
    prof.draft_alone_s = prof.draft_token_s * ratio
    return prof


def test_a_chunk_past_the_verify_is_priced_at_the_draft_s_speed_alone():
    one, half = (DraftBudget(alone_profile(r), alpha=0.9) for r in (1.0, 0.5))
    assert one.alone_ratio == 1.0 and half.alone_ratio == 0.5
    assert one.round_s(0.05, 0.03) == half.round_s(0.05, 0.03) == 0.05  # within the verify
    assert one.round_s(0.05, 0.09) == pytest.approx(0.09)
    assert half.round_s(0.05, 0.09) == pytest.approx(0.07)  # 40 ms left, at half the time
    assert half.gamma > one.gamma  # a draft faster alone earns a longer chunk
    assert half.expected_rate(6) > one.expected_rate(6)
    slower = alone_profile(1.5)  # never priced slower than beside the target
    assert DraftBudget(slower).alone_ratio == 1.0


def test_time_alone_is_learned_as_its_time_beside_the_target():
    """A chunk of 4 tokens in 60 ms, 40 of them alone at half the time beside: 100 ms
    beside the target, 1.25x the profile's 4 x 20 ms."""
    b = DraftBudget(alone_profile(0.5), ema=1.0)
    b.observe(4, 4, draft_s=0.06, draft_n=4, alone_s=0.04)
    assert b.draft_scale == pytest.approx(0.1 / 0.08)
    plain = DraftBudget(alone_profile(1.0), ema=1.0)
    plain.observe(4, 4, draft_s=0.06, draft_n=4, alone_s=0.04)  # the same threads alone
    assert plain.draft_scale == pytest.approx(0.06 / 0.08)


def test_the_profile_keeps_the_draft_s_time_alone():
    prof = alone_profile(0.6)
    assert Profile.from_dict(prof.to_dict()).draft_alone_s == pytest.approx(0.012)
    del_key = {k: v for k, v in prof.to_dict().items() if k != "draft_alone_s"}
    assert Profile.from_dict(del_key).draft_alone_s == 0.0  # an older cache entry


def test_the_draft_alone_takes_every_core_only_where_it_measured_faster():
    faster = Placement("cpu", cores=2, draft_threads=1, draft_alone=2)
    assert faster.for_method("duo") == Threads(1, 1, 2, overlapped=True, alone=2)
    assert faster.for_method("sps") == Threads(2, 2, 2)  # draft and verify take turns
    assert faster.for_method("vanilla") == Threads(0, 2, 0)
    same = Placement("cpu", cores=2, draft_threads=1, draft_alone=1)
    assert same.for_method("duo").alone == 0 and same.for_method("sps").draft == 1
    compiled = Placement("cpu", 2, 1, target_fixed=1, draft_alone=2)
    assert compiled.for_method("sps") == Threads(2, 1, 2)
    gpu = Placement("cuda:0", cores=16, draft_threads=8, draft_alone=16)
    assert gpu.for_method("duo") == Threads(8, 1, 0, overlapped=True, alone=16)
    for cores in range(2, 17):
        for alone in range(1, cores + 1):
            placement = Placement("cpu", cores, 1, draft_alone=alone)
            for method in ("vanilla", "sps", "duo"):
                assert placement.for_method(method).busy <= cores


def test_apply_gives_the_drafter_its_count_alone():
    class Drafter:
        alone_threads = 0

        def set_threads(self, n):
            self.n = n

    class Target:
        def set_threads(self, n):
            self.n = n

    drafter, target = Drafter(), Target()
    Placement("cpu", 2, 1, draft_alone=2).apply(Threads(1, 1, 2, True, 2), drafter, target)
    assert (drafter.n, drafter.alone_threads, target.n) == (1, 2, 1)


class Recording(FakeDrafter):
    """A fake drafter that says, per proposal, whether the caller was waiting for it."""
    alone: threading.Event | None = None

    def __init__(self, Q, gate: threading.Event):
        super().__init__(Q)
        self.gate, self.seen = gate, []

    def propose(self, *a, **k):
        self.gate.wait(5)
        self.seen.append(self.alone.is_set())
        return super().propose(*a, **k)


def test_the_worker_says_when_its_caller_waits_for_the_draft():
    gate = threading.Event()
    drafter = Recording(markov(50, seed=1), gate=gate)
    worker = DraftWorker(drafter, SamplingConfig(0.0), seed=0)
    try:
        assert drafter.alone is worker.waiting
        job = worker.submit([1, 2, 3], 4)
        threading.Timer(0.05, gate.set).start()  # the draft goes on once the caller waits
        drafted = job.result()
        assert drafter.seen == [True] and not worker.waiting.is_set()
        assert 0 < drafted.timing.alone_s <= drafted.timing.busy_s
        done = worker.submit([1, 2, 3, 4], 4)
        while not done.done():
            pass
        assert done.result().timing.alone_s == 0.0  # ready before anyone waited
        assert drafter.seen == [True, False]
    finally:
        gate.set()
        worker.close()


def test_a_llama_draft_decodes_on_its_count_alone_while_the_caller_waits(smol_pair):
    """The real draft: each decode runs on alone_threads while the event is set, on its
    own count otherwise, and drafts the same tokens either way."""
    drafter = smol_pair.drafter
    counts = []
    real = drafter._use_threads

    def use(n):
        counts.append(n)
        real(n)
    prev, prev_alone, event = drafter.n_threads, drafter.alone_threads, drafter.alone
    drafter.set_threads(1)
    drafter.alone, drafter.alone_threads = threading.Event(), 2
    try:
        drafter._use_threads = use
        context = smol_pair.prompt_ids("Count from one to ten.")
        drafts = []
        for alone in (False, True):
            drafter.rollback(0)
            drafter.alone.set() if alone else drafter.alone.clear()
            counts.clear()
            drafts.append(drafter.propose(context, 6, SamplingConfig(0.0), None).main.tokens)
            assert set(counts) == ({2} if alone else {1})
        assert drafts[0] == drafts[1] and len(drafts[0]) == 6
    finally:
        del drafter._use_threads
        drafter.alone, drafter.alone_threads = event, prev_alone
        drafter.set_threads(prev)


@pytest.mark.parametrize("method", ["duo", "sps"])
def test_greedy_output_is_the_target_s_with_the_draft_alone_on_two_threads(smol_pair, method,
                                                                          monkeypatch):
    """The real pair placed with a draft faster on 2 threads alone: duo's chunks the target
    waits for and sps's drafts decode on 2, and the tokens are still vanilla's."""
    from core.engine import GenConfig
    from tests.conftest import vanilla_ids

    placed = smol_pair.placement()
    monkeypatch.setattr(smol_pair, "_placement", replace(placed, draft_threads=1, draft_alone=2))
    counts = []
    real = smol_pair.drafter._use_threads
    monkeypatch.setattr(smol_pair.drafter, "_use_threads", lambda n: (counts.append(n), real(n)))
    ids = smol_pair.prompt_ids("Name three rivers of Europe.")
    cfg = GenConfig(method=method, max_new_tokens=40, sampling=SamplingConfig(0.0), lookup="off")
    got = [t for ev in smol_pair.generate(ids, cfg) for t in ev.tokens]
    assert got == vanilla_ids(smol_pair, ids, 40)
    assert 2 in counts
