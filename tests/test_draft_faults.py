"""Draft faults with fakes: a draft that raises or hangs leaves the output equal to vanilla,
the final event keeps its stats and says why in `warnings`, and the next generation gets a
fresh draft; a target error is never masked by a draft error. Also: the budget's learning
carries over to the pair's next generation."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from core.engine import GenConfig, generate
from core.learned import Learned
from tests.fakes import FakeDrafter, FakeTarget, ScriptedLearned, decode, fake_profile

V = 8
PROMPT = [0]


def chain() -> np.ndarray:
    P = np.full((V, V), 0.01)
    for t in range(V):
        P[t, (t + 1) % V] = 1.0
    return P / P.sum(axis=1, keepdims=True)


class FaultyDrafter(FakeDrafter):
    """Raises from call `fail_at` on, or hangs at call `hang_at` until `release` is set (or,
    `stoppable`, until the job's stop is set, as llama.cpp checks it between tokens)."""

    def __init__(self, fail_at=None, hang_at=None, stoppable=False, **kw):
        super().__init__(chain(), **kw)
        self.fail_at, self.hang_at, self.stoppable = fail_at, hang_at, stoppable
        self.release = threading.Event()
        self.hang_over = False  # the hung call has returned
        self.rollbacks: list[int] = []
        self.alphas: list[float] = []

    def propose(self, context, n, sampling, draws, stop=None, branching=None, predraft=None):
        call = len(self.calls) + 1
        if branching is not None:
            self.alphas.append(branching.alpha)
        if self.fail_at and call >= self.fail_at:
            self.calls.append((len(context), n))
            raise RuntimeError("draft boom")
        if call == self.hang_at:
            end = time.monotonic() + 30
            while not self.release.wait(0.01) and time.monotonic() < end:
                if self.stoppable and stop.is_set():
                    break
            self.hang_over = True
        return super().propose(context, n, sampling, draws, stop, branching, predraft=predraft)

    def rollback(self, n_keep):
        self.rollbacks.append(n_keep)
        super().rollback(n_keep)


class TargetBoom(RuntimeError):
    pass


class FailingTarget(FakeTarget):
    def __init__(self, fail_at: int):
        super().__init__(chain())
        self.fail_at = fail_at

    def score(self, tokens, n_rows, sampling, check=None):
        if self.forwards + 1 >= self.fail_at:
            raise TargetBoom("target boom")
        return super().score(tokens, n_rows, sampling, check)


def run(method, drafter, learned=None, target=None, **kw):
    kw.setdefault("max_new_tokens", 20)
    kw.setdefault("lookup", "off")  # the chain repeats: lookups would end it before the faults
    cfg = GenConfig(method=method, **kw)
    events = list(generate(target or FakeTarget(chain()), drafter, PROMPT, cfg, decode,
                           fake_profile(), learned=learned))
    return [t for e in events for t in e.tokens], events[-1]


VANILLA = run("vanilla", None)[0]
MODES = [("sps", False), ("duo", False), ("duo", True)]


@pytest.mark.parametrize("method,sequential", MODES)
@pytest.mark.parametrize("fail_at", [1, 2, 3, 5])
def test_draft_raising_keeps_output_and_final_stats(method, sequential, fail_at):
    got, last = run(method, FaultyDrafter(fail_at=fail_at), gamma=3, sequential=sequential)
    assert got == VANILLA
    assert last.done and last.stats["new_tokens"] == len(VANILLA)
    assert any("draft boom" in w for w in last.stats["warnings"])


def test_a_target_error_is_not_masked_by_a_draft_error():
    for fail_at in range(2, 7):
        with pytest.raises(TargetBoom):
            run("duo", FaultyDrafter(fail_at=2), target=FailingTarget(fail_at), gamma=3)


@pytest.mark.parametrize("method,sequential", [("duo", False), ("duo", True)])
def test_hung_draft_times_out_then_the_next_generation_drafts_afresh(method, sequential):
    drafter, learned = FaultyDrafter(hang_at=2), Learned()
    kw = dict(gamma=3, sequential=sequential, draft_timeout_s=0.3)
    got, last = run(method, drafter, learned, **kw)
    assert got == VANILLA and not drafter.hang_over  # done while the draft still hangs
    assert any("no answer within 0.3" in w for w in last.stats["warnings"])
    got, last = run(method, drafter, learned, **kw)  # still hung: the target alone
    assert got == VANILLA and any("still busy" in w for w in last.stats["warnings"])
    drafter.release.set()
    learned.busy_draft.result(5)
    calls = len(drafter.calls)
    # the default timeout: none of this run's jobs may be timed out on a slow host
    got, last = run(method, drafter, learned, gamma=3, sequential=sequential)
    assert got == VANILLA and last.stats["warnings"] == []
    assert drafter.rollbacks[-1:] == [0] and len(drafter.calls) > calls
    assert last.stats["drafted"] > 0


@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_a_hung_prefill_beside_the_target_times_out(delay):
    """duo's first job (the draft's prompt prefill, beside the target's first rounds)
    hangs: the target goes on alone, warned, whether its forwards are instant (0.0) or the
    timeout comes while it writes (0.05 s a forward)."""
    drafter = FaultyDrafter(hang_at=1)
    got, last = run("duo", drafter, target=FakeTarget(chain(), delay=(delay, 0.0)), gamma=3,
                    draft_timeout_s=0.3)
    assert got == VANILLA and not drafter.hang_over
    assert any("no answer within 0.3" in w for w in last.stats["warnings"])
    drafter.release.set()


def test_sps_stops_a_hung_inline_draft_and_drafts_afresh_next_time():
    """sps drafts on its own thread: the watchdog stops the draft at its next token."""
    drafter, learned = FaultyDrafter(hang_at=2, stoppable=True), Learned()
    kw = dict(gamma=3, draft_timeout_s=0.3)
    got, last = run("sps", drafter, learned, **kw)
    assert got == VANILLA and drafter.calls  # the hung call ended: no job is left running
    assert any("no answer within 0.3" in w for w in last.stats["warnings"])
    assert learned.draft_free()
    calls = len(drafter.calls)
    got, last = run("sps", drafter, learned, gamma=3)  # the default timeout (as above)
    assert got == VANILLA and last.stats["warnings"] == []
    assert drafter.rollbacks[-1:] == [0] and len(drafter.calls) > calls


def test_sps_drafts_on_the_caller_s_thread():
    names = []

    class Where(FakeDrafter):
        def propose(self, *a, **k):
            names.append(threading.current_thread().name)
            return super().propose(*a, **k)

    assert run("sps", Where(chain()), gamma=3)[0] == VANILLA
    assert set(names) == {threading.current_thread().name}


def test_a_clean_generation_has_no_warnings():
    got, last = run("duo", FakeDrafter(chain()), gamma=3)
    assert got == VANILLA and last.stats["warnings"] == []


def test_the_next_generation_starts_from_what_the_budget_learned():
    """Acceptance and timing scales carry over (the prior is 0.8; this draft is always
    right), and the branch policy prices sequences with the learned alpha."""
    drafter, learned = FaultyDrafter(), ScriptedLearned(verify_ratio=1.5)  # no clock
    _, first = run("duo", drafter, learned, max_new_tokens=30)
    end = first.stats["gamma_profile"]
    assert end["alpha"] > 0.9 and end["verify_scale"] > 1.2
    n = len(drafter.alphas)
    _, second = run("duo", drafter, learned, max_new_tokens=30)
    assert drafter.alphas[n] == pytest.approx(end["alpha"], abs=1e-3)
    budget = learned.budget("duo", fake_profile(), overlap=True, fixed=None)
    assert budget.alpha == pytest.approx(second.stats["gamma_profile"]["alpha"], abs=1e-3)
    assert budget.verify_scale == pytest.approx(second.stats["gamma_profile"]["verify_scale"],
                                                abs=1e-3)


# -- the target runs out of memory ---------------------------------------------------------
class OutOfMemoryError(RuntimeError):
    """Named like torch's (core recognises it by name)."""


class OomTarget(FakeTarget):
    def __init__(self, fail_at: int):
        super().__init__(chain())
        self.fail_at = fail_at

    def score(self, tokens, n_rows, sampling, check=None):
        if self.forwards + 1 == self.fail_at:
            self.cache.extend(tokens)  # a forward that died half-way leaves its cache grown
            self.forwards += 1
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return super().score(tokens, n_rows, sampling, check)


@pytest.mark.parametrize("method,sequential", MODES + [("vanilla", False)])
def test_target_out_of_memory_is_clear_and_leaves_the_pair_usable(method, sequential):
    from core.backends import TargetOutOfMemory

    target = OomTarget(fail_at=3)
    drafter = None if method == "vanilla" else FakeDrafter(chain())
    with pytest.raises(TargetOutOfMemory, match="the target ran out of memory") as e:
        run(method, drafter, target=target, gamma=3, sequential=sequential)
    assert isinstance(e.value, RuntimeError) and target.n_cached == 0
    assert run(method, drafter, target=target, gamma=3, sequential=sequential)[0] == VANILLA
