"""The pair loader's bookkeeping on the real smol-self pair."""
from __future__ import annotations

import threading
import time

import pytest

import models.fit.profiler as profiler
from core.budget import Profile
from core.engine import GenConfig
from core.learned import Learned


def test_remeasure_measures_the_profile_once(smol_pair, monkeypatch):
    asked = []

    def fake_load(name, drafter, target, threads, remeasure=False, progress=None):
        asked.append((threads, remeasure))
        return Profile(draft_token_s=0.005, verify_s=[0.02] * 32)

    monkeypatch.setattr(profiler, "load_or_measure", fake_load)
    monkeypatch.setattr(smol_pair, "_measure_again", True)  # as --remeasure leaves it
    for _ in range(3):  # duo, sps, duo: one profile for every method
        smol_pair.ensure_profile()
    split = (smol_pair.threads.draft, smol_pair.threads.target)  # one for every method
    assert asked == [(split, True), (split, False), (split, False)]
    smol_pair.ensure_profile(remeasure=True)  # an explicit request always measures
    assert asked[-1] == (split, True)


def test_the_plan_gives_the_gpu_s_target_one_core_and_the_cpu_s_every_core():
    from models.fit.placement import Threads, draft_share, plan

    assert plan("cuda:0", 16, 8) == Threads(8, 1, 15, overlapped=True)
    assert plan("cpu", 16, 4) == Threads(4, 16, 16, overlapped=False)
    assert plan("cpu", 1, 1) == Threads(1, 1, 1, overlapped=False)
    assert (draft_share("cuda", 16), draft_share("cpu", 16), draft_share("cuda", 1)) == (15, 16, 1)
    assert plan("cpu", 16, 4).to_dict() == {"draft": 4, "target": 16, "prefill": 16,
                                            "overlapped": False}


def test_no_plan_puts_more_busy_threads_than_cores():
    """From 1 core up: on cuda the draft and the target's launcher side by side, on the CPU
    the larger of the two (they take turns)."""
    from models.fit.placement import draft_share, plan

    for cores in range(1, 33):
        for device in ("cpu", "cuda"):
            for draft in range(1, draft_share(device, cores) + 1):
                t = plan(device, cores, draft)
                busy = t.draft + t.target if t.overlapped and cores > 1 else max(t.draft,
                                                                                 t.target)
                assert busy <= cores, (cores, device, draft)


def test_a_generation_applies_the_plan_once_and_reports_it(smol_pair, monkeypatch):
    """The plan fixed at load: the profile's key, the threads set and the stats are it."""
    import models.loader as loader

    keys, applied = [], []
    monkeypatch.setattr(profiler, "load_or_measure", lambda name, d, t, threads, *a, **k:
                        keys.append(threads) or Profile(0.005, [0.02] * 32))
    monkeypatch.setattr(smol_pair, "learned", Learned())  # the fake profile's times stay here
    real = loader.apply
    monkeypatch.setattr(loader, "apply", lambda t, d, tg: applied.append(t) or real(t, d, tg))
    ids = smol_pair.prompt_ids("Hi")
    events = list(smol_pair.generate(ids, GenConfig(method="duo", max_new_tokens=3)))
    want = smol_pair.threads
    assert keys == [(want.draft, want.target)] and set(applied) == {want}
    assert events[-1].stats["threads"] == want.to_dict()
    assert smol_pair.drafter.n_threads == want.draft


def test_close_frees_the_draft_and_the_target(monkeypatch):
    """Nothing keeps the target's weights or cache alive after close (a pair switch frees
    the old pair before loading the new one), and the draft's llama.cpp context is gone.
    The target cut to 4 of its 30 layers (tests/cut_target.py: what holds a reference does
    not depend on the layer count; loading and running the 30 cost about 2 CPU s more).
    Loaded with the draft's plain attention kernel, which the draft, its prefill copy, the
    stats and the placement line all carry (one load serves both)."""
    import gc
    import weakref

    from models.loader import LoadOptions, Pair
    from tests.cut_target import use_cut

    folder = use_cut(monkeypatch)
    pair = Pair("smol-self", LoadOptions(target_compile="off", target_quant="none",
                                         draft_attention="plain"))
    assert pair.target_dir == folder
    events = list(pair.generate(pair.prompt_ids("Hi"), GenConfig(method="duo",
                                                                 max_new_tokens=4)))
    assert pair.drafter.attention == pair.drafter.prefill.copy.attention == "plain"
    assert events[-1].stats["draft_attention"]["kind"] == "plain"
    assert "attention: plain" in pair.describe()["draft"]
    weights, cache = weakref.ref(pair.target.model), weakref.ref(pair.target.cache)
    pair.close()
    gc.collect()
    assert weights() is None and cache() is None
    assert pair.drafter.batch is None and pair.drafter.ctx.ctx is None
    assert pair.drafter.model.model is None


def test_target_out_of_memory_empties_the_cuda_cache_and_the_pair_goes_on(smol_pair,
                                                                            monkeypatch):
    """torch's OutOfMemoryError mid-generation: a clear RuntimeError, the target's cache
    rolled back, torch.cuda.empty_cache() on cuda (faked here), the next generation right."""
    import pytest
    import torch

    from core.backends import TargetOutOfMemory

    class OutOfMemoryError(RuntimeError):
        pass

    ids = smol_pair.prompt_ids("Name a fruit.")
    tokens = lambda method: [t for e in smol_pair.generate(  # noqa: E731
        ids, GenConfig(method=method, max_new_tokens=12)) for t in e.tokens]
    expected, real_score, calls, emptied = tokens("vanilla"), smol_pair.target.score, [], []

    def score(*args):
        calls.append(1)
        if len(calls) == 1:  # the first forward (the lookup may take all 12 tokens in one)
            smol_pair.target.device = "cuda"  # as if on cuda from here: empty_cache is asked
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_score(*args)

    with monkeypatch.context() as m:
        m.setattr(smol_pair.target, "score", score)
        m.setattr(smol_pair.target, "device", smol_pair.target.device)  # restored after
        m.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
        with pytest.raises(TargetOutOfMemory, match="the target ran out of memory"):
            tokens("duo")
    assert emptied and smol_pair.target.n_cached == 0
    assert tokens("duo") == expected


class Watched:
    """A tokenizer that counts how many threads are inside it at once."""

    def __init__(self, tok):
        self.tok, self.inside, self.most = tok, 0, 0
        self.lock = threading.Lock()

    def _watch(self, fn, *a, **k):
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            time.sleep(0.001)  # widen the window two callers would share
            return fn(*a, **k)
        finally:
            with self.lock:
                self.inside -= 1

    def __call__(self, *a, **k):
        return self._watch(self.tok, *a, **k)

    def __getattr__(self, name):
        attr = getattr(self.tok, name)
        return (lambda *a, **k: self._watch(attr, *a, **k)) if callable(attr) else attr


def test_the_context_meter_never_shares_the_tokenizer_with_a_generation(smol_pair,
                                                                        monkeypatch):
    from app.host import ModelHost

    watched = Watched(smol_pair.tokenizer)
    monkeypatch.setattr(smol_pair, "tokenizer", watched)
    host = ModelHost(lambda name, say: smol_pair)
    host.pair, host.name = smol_pair, "smol-self"
    done, metered, uses = threading.Event(), threading.Event(), []

    def meter():
        while not done.is_set():
            uses.append(host.context_use([{"role": "user", "content": "How long is this?"}]))
            metered.set()

    thread = threading.Thread(target=meter)
    thread.start()
    assert metered.wait(60)  # metering before the generation starts, not after it ended
    ids = smol_pair.prompt_ids("Count to twenty.")
    cfg = GenConfig(method="vanilla", max_new_tokens=24, stop_strings=("never",))
    list(smol_pair.generate(ids, cfg))
    done.set()
    thread.join()
    assert uses and uses[0][1] == smol_pair.target.n_ctx
    assert watched.most == 1


def test_online_times_far_off_the_profile_never_measure_before_a_generation(smol_pair,
                                                                          monkeypatch):
    """A budget whose scales drifted far off its profile measures nothing at the next
    generation's start (its first token would wait for it): the scales carry the drift."""
    asked = []
    monkeypatch.setattr(profiler, "load_or_measure", lambda *a, **k: asked.append(a[4]) or
                        Profile(0.005, [0.02] * 32))
    monkeypatch.setattr(profiler, "measure", lambda *a, **k: pytest.fail("measured"))
    monkeypatch.setattr(smol_pair, "learned", Learned())
    smol_pair.learned.budgets["duo"] = {"alpha": 0.8, "draft_scale": 0.2, "verify_scale": 2.6,
                                        "profile": Profile(0.005, [0.02] * 32),
                                        "since_probe": 0}
    ids = smol_pair.prompt_ids("Why is the sky blue?")
    list(smol_pair.generate(ids, GenConfig(method="duo", max_new_tokens=2)))
    assert asked == [False]


def test_a_profile_between_two_turns_keeps_the_draft_s_cache(smol_pair):
    """The draft's cache (its state copied aside and set back) holds the chat's tokens after
    a profile is measured (the page's button), with their values: sequence 0's state, byte
    for byte. (Not the next draft's tokens: its last logits are decoded again after the
    probes, in a batch of one where the generation's last were in a batch of several, and
    two fresh clones saw a near-tie flip at the sixth token.)"""
    from core.sampling import PositionRng, SamplingConfig

    from tests.conftest import UNTIMED

    ids = smol_pair.prompt_ids("Why is the sky blue?")
    # a fixed gamma: the draft holds its drafts past the prompt (the budget's own may leave
    # the drafting to the target)
    list(smol_pair.generate(ids, GenConfig(method="duo", max_new_tokens=12, gamma=4,
                                           **UNTIMED)))
    drafter = smol_pair.drafter
    chat, before = list(drafter.tokens), bytes(drafter._state())
    profiler.measure(drafter, smol_pair.target, verify_n=1, seqs=1)
    assert len(chat) > len(ids) and drafter.tokens == chat
    assert bytes(drafter._state()) == before
    assert len(drafter.propose(chat, 8, SamplingConfig(), PositionRng(0, 1)).main.tokens) == 8


def test_a_small_profile_times_the_draft_and_a_one_token_forward(smol_pair):
    spot = profiler.measure(smol_pair.drafter, smol_pair.target, verify_n=1, seqs=1)
    assert spot.draft_token_s > 0 and len(spot.verify_s) == 1 and spot.verify(1) > 0
    assert spot.draft_step_s == {1: spot.draft_token_s}


def test_the_page_s_button_times_threads_and_the_profile_again(smol_pair, monkeypatch):
    asked = []
    monkeypatch.setattr(profiler, "load_or_measure", lambda *a, **k: asked.append(a[4]) or
                        Profile(0.005, [0.02] * 32))
    monkeypatch.setattr(profiler, "pick_draft_threads",
                        lambda *a: asked.append(("threads", a[-1])) or {1: 0.005})
    monkeypatch.setattr(smol_pair, "threads", smol_pair.threads)  # set back after
    monkeypatch.setattr(smol_pair, "thread_times", smol_pair.thread_times)
    smol_pair.remeasure()
    smol_pair.ensure_profile()  # kept: nothing is timed again
    assert asked == [("threads", True), True, False]
