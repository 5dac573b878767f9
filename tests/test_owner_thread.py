"""One thread owns the target (models/owner.py, app/host.py): the owner runs calls and
generators in order and hands out their results, errors and events; with a real smol-self
pair (its target cut to a few layers), every target call of a load, a page generation stepped
from changing threads (as gradio's workers step it), an API job and a pair switch runs on the
host's owner thread."""
from __future__ import annotations

import asyncio
import importlib.util
import itertools
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from models.owner import Owner


def test_owner_runs_calls_on_its_thread_and_raises_their_errors_in_the_caller():
    owner = Owner()
    assert owner.call(threading.get_ident) == owner.ident != threading.get_ident()
    with pytest.raises(KeyError, match="gone"):
        owner.call(lambda: {}["gone"])
    assert owner.call(lambda: owner.call(lambda: 7)) == 7  # nested: runs in place
    owner.stop()


def test_owner_stream_runs_the_generator_there_and_closing_it_stops_it():
    owner, seen, closed = Owner(), [], threading.Event()

    def gen():
        try:
            for i in itertools.count():  # endless: only closing ends it
                seen.append(threading.get_ident())
                time.sleep(0.001)
                yield i
        finally:
            closed.set()

    events = owner.stream(gen)
    assert [next(events) for _ in range(3)] == [0, 1, 2]
    events.close()
    assert closed.wait(10)  # stopped at its next item
    assert set(seen) == {owner.ident}

    def fails():
        yield 1
        raise ValueError("bad chunk")

    with pytest.raises(ValueError, match="bad chunk"):
        list(owner.stream(fails))
    assert owner.call(lambda: 5) == 5  # the thread goes on after an error
    owner.stop()


VERBS = ("__init__", "score", "logits", "rollback", "preserved", "set_threads", "synchronize",
         "close")


@pytest.fixture
def target_calls(monkeypatch):
    """(verb, thread id) of every call to a TorchTarget verb (the static target's too)."""
    from models.target.eager import TorchTarget

    calls: list[tuple[str, int]] = []
    for verb in VERBS:
        original = getattr(TorchTarget, verb)

        def recorded(self, *a, _verb=verb, _original=original, **kw):
            calls.append((_verb, threading.get_ident()))
            return _original(self, *a, **kw)
        monkeypatch.setattr(TorchTarget, verb, recorded)
    return calls


def stepped_from_new_threads(gen) -> list:
    """Every next() of `gen` in a thread of its own, as gradio runs a handler's steps."""
    out: list = []
    while True:
        box: dict = {}
        t = threading.Thread(target=lambda: box.update(v=next(gen, StopIteration)))
        t.start()
        t.join()
        if box["v"] is StopIteration:
            return out
        out.append(box["v"])


async def _api_job(host, ids, cfg):
    from app.jobs import Gate, Job

    job, events = Job(host, "smol-self", [ids], [cfg], Gate(2)), []
    while (item := await job.next()) is not None:
        events.append(item)
    return events


def test_every_target_call_of_load_page_api_and_switch_runs_on_the_owner(target_calls,
                                                                        monkeypatch):
    """The pair's target cut to a few layers (tests/cut_target.py): which thread makes each
    call is the subject, the same for any layer count; both loads and the generations cost
    a fraction."""
    from app.host import ModelHost, real_pair
    from app.ui import App
    from core.engine import GenConfig
    from models.loader import LoadOptions, Pair
    from tests.cut_target import use_cut

    folder = use_cut(monkeypatch)

    opts = LoadOptions(device="cpu", dtype="float32", target_compile="off", target_quant="none")
    load = real_pair(opts)  # profiles and warms up: the app's load

    def factory(name, say):  # the switch loads a fresh copy, plainly (cheaper)
        return load(name, say) if name == "smol-self" else Pair("smol-self", opts, say)
    host = ModelHost(factory)
    list(host.prepare("smol-self", poll_s=0.05))
    assert host.state == "ready", host.log
    first = host.pair.inner
    assert first.target_dir == folder

    page = App(host, "smol-self").chat(SimpleNamespace(session_hash="owner"), "Hello there",
                                       [], "smol-self", False, "",
                                       "duo", 8, 0.0, 1.0, 0, 0, "auto", 5, True, 4, 1.0)
    updates = stepped_from_new_threads(page)
    assert any("done:" in str(u) for u in updates)

    ids = host.pair.prompt_ids("Count to five.")
    events = asyncio.run(_api_job(host, ids, GenConfig(method="duo", max_new_tokens=8)))
    assert events and events[-1][1].done

    list(host.prepare("llama2-7b-68m", poll_s=0.05))  # the switch: close, then load again
    assert host.name == "llama2-7b-68m" and first.target.model is None
    host.close()

    verbs = {verb for verb, _ in target_calls}
    assert {"__init__", "score", "rollback", "set_threads", "close"} <= verbs
    assert {ident for _, ident in target_calls} == {host.owner.ident}


# Switching compiled targets on the owner thread frees their compiled code:
# tests/test_gpu.py (its CPU twins' compiled target is the first of the switch).


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_second_api_request_and_a_page_generation_record_no_new_cuda_graph(monkeypatch):
    """The app's load warms the compiled target's CUDA graphs on the owner thread; the same
    API request twice, then a page generation stepped from new threads, record none again."""
    from torch._inductor import cudagraph_trees

    from app.host import ModelHost, real_pair
    from core.engine import GenConfig
    from models.loader import LoadOptions
    from tests.test_gpu import GPU_BUCKETS

    recorded: list[int] = []
    original = cudagraph_trees.CUDAGraphTreeManager.record_function

    def counted(self, *a, **kw):
        recorded.append(threading.get_ident())
        return original(self, *a, **kw)
    monkeypatch.setattr(cudagraph_trees.CUDAGraphTreeManager, "record_function", counted)
    opts = LoadOptions(device="cuda", target_compile="on", target_quant="none",
                       compile_buckets=GPU_BUCKETS)
    host = ModelHost(real_pair(opts))
    list(host.prepare("smol-self", poll_s=0.05))
    assert host.state == "ready", host.log
    loaded = len(recorded)
    ids = host.pair.prompt_ids("Count to five.")
    cfg = GenConfig(method="duo", max_new_tokens=24)
    asyncio.run(_api_job(host, ids, cfg))
    first = len(recorded)
    asyncio.run(_api_job(host, ids, cfg))
    second = len(recorded)
    if importlib.util.find_spec("gradio"):  # a bare GPU machine may lack the page's library
        from app.ui import App
        page = App(host, "smol-self").chat(SimpleNamespace(session_hash="graphs"),
                                           "Count to five.", [], "smol-self", False, "", "duo",
                                           24, 0.0, 1.0, 0, 0, "auto", 5, True, 4, 1.0)
        assert any("done:" in str(u) for u in stepped_from_new_threads(page))
    host.close()
    assert loaded > 0 and set(recorded) == {host.owner.ident}
    assert len(recorded) == second == first, (loaded, first, second, len(recorded))
