"""The pair loader's bookkeeping on the real smol-self pair."""
from __future__ import annotations

import threading
import time

import models.fit.profiler as profiler
from core.budget import Profile
from core.engine import GenConfig
from core.learned import Learned


def test_remeasure_profiles_once_per_thread_split(smol_pair, monkeypatch):
    asked = []

    def fake_load(name, drafter, target, threads, remeasure=False, progress=None):
        asked.append((threads, remeasure))
        return Profile(draft_token_s=0.005, verify_s=[0.02] * 32)

    monkeypatch.setattr(profiler, "load_or_measure", fake_load)
    monkeypatch.setattr(smol_pair.opts, "remeasure", True)
    monkeypatch.setattr(smol_pair, "_remeasured", set())
    for _ in range(3):
        smol_pair.ensure_profile("duo")
    duo = asked[0][0]  # and the split that gives the target every core (solo lookup rounds)
    assert [again for split, again in asked if split == duo] == [True, False, False]
    assert [again for split, again in asked if split != duo] in ([], [True, False, False])
    smol_pair.ensure_profile("duo", remeasure=True)  # an explicit request always measures
    assert [again for split, again in asked if split == duo][-1] is True


def test_placement_is_one_value_for_every_method():
    from models.fit.placement import Placement, Threads, draft_share

    cpu = Placement("cpu", cores=16, draft_threads=4)
    assert cpu.for_method("duo") == Threads(4, 8, 16, overlapped=True)
    assert cpu.for_method("sps") == Threads(4, 16, 16)
    assert cpu.for_method("vanilla") == Threads(0, 16, 0)  # the draft does not run
    gpu = Placement("cuda:0", cores=16, draft_threads=8)
    assert gpu.for_method("duo") == Threads(8, 1, 0, overlapped=True)
    fixed = Placement("cpu", 16, 4, target_counts=(8,))  # compiled for duo's share alone
    assert fixed.for_method("vanilla") == Threads(0, 8, 0)
    assert fixed.for_method("duo") == Threads(4, 8, 16, overlapped=True)
    both = Placement("cpu", 16, 4, target_counts=(8, 16))  # and for every core
    assert both.for_method("vanilla") == Threads(0, 16, 0)
    assert both.for_method("sps") == Threads(4, 16, 16)
    assert both.for_method("duo") == Threads(4, 8, 16, overlapped=True)
    assert (draft_share("cuda", 16), draft_share("cpu", 16), draft_share("cpu", 1)) == (15, 8, 1)
    assert cpu.for_method("duo").to_dict() == {"draft": 4, "target": 8, "prefill": 16, "alone": 0}


def test_no_split_puts_more_busy_threads_than_cores():
    """From 2 cores up, on the CPU and on cuda, eager or compiled for duo's share: duo's
    draft and target together, sps's larger side (they take turns), vanilla's target."""
    from models.fit.placement import Placement, draft_share, target_share

    for cores in range(2, 33):
        for device in ("cpu", "cuda"):
            share = target_share(device, cores)
            for draft in range(1, draft_share(device, cores) + 1):
                for counts in ((), (share,), (share, cores)) if device == "cpu" else ((),):
                    placement = Placement(device, cores, draft, counts)
                    for method in ("vanilla", "sps", "duo"):
                        assert placement.for_method(method).busy <= cores, (cores, device, method)
                    duo = placement.for_method("duo")
                    assert duo.draft + duo.target <= cores


def test_pair_computes_its_placement_once(smol_pair):
    first = smol_pair.placement()
    assert smol_pair.placement() is first
    assert smol_pair.apply_threads("duo") == first.for_method("duo")
    assert smol_pair.drafter.n_threads == first.draft_threads


def test_a_generation_asks_the_placement_once_and_passes_the_answer_down(smol_pair,
                                                                         monkeypatch):
    """One question per generation: the threads set, the profile's key, the prefill count
    the engine gets and the stats are the one answer."""
    from models.fit.placement import Placement, Threads

    asked, keys = [], []
    real = Placement.for_method
    monkeypatch.setattr(Placement, "for_method",
                        lambda self, method: asked.append(method) or real(self, method))
    monkeypatch.setattr(profiler, "load_or_measure", lambda name, d, t, threads, *a, **k:
                        keys.append(threads) or Profile(0.005, [0.02] * 32))
    monkeypatch.setattr(smol_pair, "learned", Learned())  # the fake profile's times stay here
    prefills = []
    import core.engine as engine
    real_run = engine.Run.__init__
    monkeypatch.setattr(engine.Run, "__init__", lambda self, target, prompt, cfg, *a, **k:
                        prefills.append(cfg.prefill_threads) or
                        real_run(self, target, prompt, cfg, *a, **k))
    ids = smol_pair.prompt_ids("Hi")
    events = list(smol_pair.generate(ids, GenConfig(method="duo", max_new_tokens=3)))
    want = real(smol_pair.placement(), "duo")
    assert asked == ["duo"] and keys[0] == (want.draft, want.target)
    assert keys[1:] in ([], [(want.draft, want.prefill)])  # the solo rounds' split, if any
    assert prefills == [want.prefill] and events[-1].stats["threads"] == want.to_dict()
    assert isinstance(want, Threads)


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
    done, uses = threading.Event(), []

    def meter():
        while not done.is_set():
            uses.append(host.context_use([{"role": "user", "content": "How long is this?"}]))

    thread = threading.Thread(target=meter)
    thread.start()
    ids = smol_pair.prompt_ids("Count to twenty.")
    cfg = GenConfig(method="vanilla", max_new_tokens=24, stop_strings=("never",))
    list(smol_pair.generate(ids, cfg))
    done.set()
    thread.join()
    assert uses and uses[0][1] == smol_pair.target.n_ctx
    assert watched.most == 1


def test_online_times_far_off_the_profile_measure_it_again_once(smol_pair, monkeypatch):
    asked, spots = [], iter([Profile(0.0052, [0.021]), Profile(0.010, [0.04])])

    duo = smol_pair.threads("duo")

    def fake_load(name, drafter, target, threads, remeasure=False, progress=None):
        if threads == (duo.draft, duo.target):  # not the solo rounds' split
            asked.append(remeasure)
        return Profile(0.010, [0.04] * 32) if remeasure else Profile(0.005, [0.02] * 32)

    monkeypatch.setattr(profiler, "load_or_measure", fake_load)
    monkeypatch.setattr(profiler, "spot_check", lambda drafter, target: next(spots))
    monkeypatch.setattr(smol_pair, "learned", Learned())
    state = {"alpha": 0.8, "draft_scale": 1.0, "verify_scale": 2.6,
             "profile": Profile(0.005, [0.02] * 32), "since_probe": 0}
    smol_pair.learned.budgets["duo"] = dict(state)
    smol_pair.ensure_profile("duo")  # drifted: the spot check agrees with the profile: held
    smol_pair.ensure_profile("duo")
    smol_pair.learned.budgets["duo"] = dict(state, verify_scale=1.0)  # back: the hold ends
    smol_pair.ensure_profile("duo")
    smol_pair.learned.budgets["duo"] = dict(state, draft_scale=0.2)
    smol_pair.ensure_profile("duo")  # drifted, and the spot check disagrees: measured again
    assert smol_pair.learned.budgets["duo"]["draft_scale"] == 1.0  # its scales start afresh
    smol_pair.ensure_profile("duo")
    assert asked == [False, False, False, True, False]
    assert next(spots, None) is None  # one spot check per drift


def test_a_spot_check_between_two_turns_keeps_the_draft_s_cache(smol_pair):
    """The draft's cache (its state copied aside and set back) holds the chat's tokens after
    a drift check, with their values: sequence 0's state, byte for byte. (Not the next
    draft's tokens: its last logits are decoded again after the check, in a batch of one
    where the generation's last were in a batch of several, and two fresh clones saw a
    near-tie flip at the sixth token.)"""
    from core.sampling import PositionRng, SamplingConfig

    ids = smol_pair.prompt_ids("Why is the sky blue?")
    list(smol_pair.generate(ids, GenConfig(method="duo", max_new_tokens=12)))
    drafter = smol_pair.drafter
    chat, before = list(drafter.tokens), bytes(drafter._state())
    profiler.spot_check(drafter, smol_pair.target)
    assert len(chat) > len(ids) and drafter.tokens == chat
    assert bytes(drafter._state()) == before
    assert len(drafter.propose(chat, 8, SamplingConfig(), PositionRng(0, 1)).main.tokens) == 8


def test_a_spot_check_times_the_draft_and_a_one_token_forward(smol_pair):
    spot = profiler.spot_check(smol_pair.drafter, smol_pair.target)
    assert spot.draft_token_s > 0 and len(spot.verify_s) == 1 and spot.verify(1) > 0
    assert spot.draft_step_s == {1: spot.draft_token_s}


def test_the_page_s_button_times_threads_and_profiles_again(smol_pair, monkeypatch):
    asked = []
    monkeypatch.setattr(profiler, "load_or_measure", lambda *a, **k: asked.append(a[4]) or
                        Profile(0.005, [0.02] * 32))
    monkeypatch.setattr(profiler, "pick_draft_threads",
                        lambda *a: asked.append(("threads", a[-1])) or {1: 0.005})
    monkeypatch.setattr(smol_pair, "_placement", None)
    monkeypatch.setattr(smol_pair, "_thread_times", {})
    smol_pair.remeasure()
    smol_pair.placement()  # kept: nothing is timed again
    assert asked == [("threads", True), True, True, False]  # sps, duo, duo's solo: sps's
