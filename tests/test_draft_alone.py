"""The draft alone: in sps's turns, and while duo's target waits for a chunk, the draft
decodes on every core where that measured faster (models/fit/placement.py,
core/scheduler.py, LlamaDrafter)."""
from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from core.sampling import SamplingConfig
from core.scheduler import DraftWorker
from models.fit.pace import PROBE_EVERY, Pace
from models.fit.placement import Placement, Threads
from tests.fakes import FakeDrafter, markov


def test_the_draft_alone_takes_every_core_only_where_it_measured_faster():
    faster = Placement("cpu", cores=2, draft_threads=1, draft_alone=2)
    assert faster.for_method("duo") == Threads(1, 1, 2, overlapped=True, alone=2)
    assert faster.for_method("sps") == Threads(2, 2, 2)  # draft and verify take turns
    assert faster.for_method("vanilla") == Threads(0, 2, 0)
    same = Placement("cpu", cores=2, draft_threads=1, draft_alone=1)
    assert same.for_method("duo").alone == 0 and same.for_method("sps").draft == 1
    compiled = Placement("cpu", 2, 1, target_counts=(1,), draft_alone=2)
    assert compiled.for_method("sps") == Threads(2, 1, 2)
    both = Placement("cpu", 2, 1, target_counts=(1, 2), draft_alone=2)
    assert both.for_method("sps") == Threads(2, 2, 2)
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
        job.result()
        assert drafter.seen == [True] and not worker.waiting.is_set()
        done = worker.submit([1, 2, 3, 4], 4)  # ready before anyone waits: never set
        while not done.done():
            pass
        done.result()
        assert drafter.seen == [True, False] and not worker.waiting.is_set()
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
        drafter.pace.prefers = lambda more, fewer: True  # as if 2 decoded faster
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
        del drafter._use_threads, drafter.pace.prefers
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
    monkeypatch.setattr(smol_pair.drafter.pace, "prefers", lambda more, fewer: True)
    ids = smol_pair.prompt_ids("Name three rivers of Europe.")
    cfg = GenConfig(method=method, max_new_tokens=40, sampling=SamplingConfig(0.0), lookup="off")
    got = [t for ev in smol_pair.generate(ids, cfg) for t in ev.tokens]
    assert got == vanilla_ids(smol_pair, ids, 40)
    assert 2 in counts
    assert "CPU, 1 thread(s) (2 alone), " in smol_pair.describe()["draft"]


@pytest.mark.parametrize("pool, alone", [("ggml", 2), ("openmp", 1)])
def test_an_openmp_draft_keeps_its_share_alone(smol_pair, monkeypatch, pool, alone):
    """Timed faster on 2 threads: llama.cpp's own pool takes them alone; an OpenMP build,
    whose barriers sleep under the passive wait policy set for torch, keeps one."""
    import models.fit.profiler as profiler

    monkeypatch.setattr(profiler, "pick_draft_threads", lambda *a, **k: {1: 0.02, 2: 0.012})
    monkeypatch.setattr(smol_pair.drafter, "thread_pool", pool)
    monkeypatch.setattr(smol_pair, "_placement", None)
    monkeypatch.setattr(smol_pair, "_thread_times", smol_pair._thread_times)  # set back after
    monkeypatch.setattr(smol_pair, "opts", replace(smol_pair.opts, cores=2))
    placed = smol_pair.placement()
    assert (placed.draft_threads, placed.draft_alone) == (1, alone)


def test_the_draft_gives_its_cores_back_while_more_threads_decode_slower():
    """Another program on a core: 2 threads decode slower than 1; the draft keeps 1 alone,
    timing 2 again once every PROBE_EVERY decodes, and takes 2 again when they are faster."""
    pace = Pace()
    assert pace.prefers(2, 1)  # nothing timed yet
    pace.observe(1, 0.020)
    assert pace.prefers(2, 1)
    pace.observe(2, 0.040)
    asked = [pace.prefers(2, 1) for _ in range(2 * PROBE_EVERY)]
    assert asked.count(True) == 2 and asked[PROBE_EVERY - 1] and asked[-1]
    for _ in range(10):  # the other program ended
        pace.observe(2, 0.012)
    assert all(pace.prefers(2, 1) for _ in range(5))
