"""The emulated GPU target (measure/emulate.py): greedy output under it is the real target's
for every method (smol-self and gemma-smol), the profile clock asks its sleep for the
profile's interpolated, scaled times, the shadow clock runs its shape's forward at the
chunk's length and filled length, refusals by name, and the oracle's disk cache."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from core.engine import GenConfig
from core.sampling import SamplingConfig
from measure.device_profile import load_profile, profile_names
from measure.emulate import (EmulatedTarget, Emulation, ProfileClock, ShadowClock,
                             check_config, draft_token_s, emulate, shadow_target)
from measure.oracle import Oracle, Refused, oracle_key, oracle_path
from tests.conftest import one_line_exit_2, reference_pair, vanilla_ids

GREEDY = SamplingConfig()
PROMPTS = ("Why is the sky blue?", "List three uses of a paperclip.")
N = 24


# -- profiles -------------------------------------------------------------------------------
def test_measured_profile_interpolates_its_table():
    p = load_profile("h100-llama8b-bf16")
    assert (p.kind, p.device.startswith("NVIDIA H100"), p.draft_threads) == ("measured", True, 8)
    assert p.forward_ms(1, 128) == pytest.approx(8.365)
    assert p.forward_ms(8, 1024) == pytest.approx(9.480)
    assert p.forward_ms(1, 64) == pytest.approx(8.365)  # below the first row: the first row
    between = p.forward_ms(4, 576)  # bilinear: between its four corners
    assert min(8.357, 8.365, 8.665, 9.480) < between < max(8.357, 8.365, 8.665, 9.480)
    assert p.forward_ms(132, 0) == pytest.approx(8.491 + 100 * p.token_ms)  # a prefill
    assert p.forward_ms(1, 8192) > p.forward_ms(1, 4096)  # past the last row: its slope


def test_projected_profiles_scale_by_bandwidth_and_bytes():
    h100, bf16 = load_profile("h100-llama8b-bf16"), load_profile("rtx4090-llama8b-bf16")
    int4, int8 = load_profile("rtx4090-llama8b-int4"), load_profile("rtx3090-llama8b-int8")
    assert {"h100-llama8b-bf16", "rtx4090-llama8b-bf16", "rtx4090-llama8b-int4",
            "rtx3090-llama8b-int8"} <= set(profile_names())
    assert bf16.forward_ms(1, 128) == pytest.approx(8.365 * 3350 / 1008)
    assert h100.forward_ms(8, 1024) < int4.forward_ms(8, 1024) < bf16.forward_ms(8, 1024)
    assert int8.forward_ms(1, 128) < bf16.forward_ms(1, 128) * 1008 / 936
    for p in (bf16, int4, int8):
        assert p.projected and p.draft_token_ms == h100.draft_token_ms
        assert p.forward_ms(1, 128) >= p.floor_ms
        assert set(p.sources) == {"forward_ms", "floor_ms", "prefill_ms_per_token", "draft"}
        assert "projected" in p.sources["forward_ms"]


def test_unknown_profile_names_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="h100-llama8b-bf16"):
        load_profile("a100-nothing")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "kind": "measured"}))
    with pytest.raises(ValueError, match="missing or malformed"):
        load_profile(str(bad))


# -- the target and its clocks ----------------------------------------------------------------
class Real:
    name, n_ctx, eos_ids, vocab_size = "fake", 64, {2}, 50


def emulated(paths, clock):
    profile = getattr(clock, "profile", None) or load_profile("h100-llama8b-bf16")
    emu = Emulation(profile, clock.kind, getattr(clock, "scale", 1.0), 1, 1.0)
    return EmulatedTarget(Real(), Oracle(paths, {2}), clock, emu)


def test_profile_clock_sleeps_the_scaled_interpolated_time():
    slept, p = [], load_profile("rtx4090-llama8b-bf16")
    target = emulated({(5, 6): [7, 8, 9, 2]}, ProfileClock(p, 3.0, slept.append))
    assert target.score([5, 6], 1, GREEDY).choice == [7]  # the prompt's prefill
    assert target.score([7, 8, 4], 3, GREEDY).choice[:2] == [8, 9]  # the last: off the path
    target.rollback(4)
    target.score([9], 1, GREEDY)
    assert slept == pytest.approx([p.forward_ms(2, 0) * 3.0 / 1e3, p.forward_ms(3, 2) * 3.0 / 1e3,
                                   p.forward_ms(1, 4) * 3.0 / 1e3])
    assert target.device == "cuda" and target.device_name() == "emulated rtx4090-llama8b-bf16 " \
                                                                "(projected)"


def test_oracle_reads_the_path_and_refuses_past_its_end():
    oracle = Oracle({(1, 2): [3, 4, 5], (1, 2, 9): [2]}, eos_ids={2})
    assert oracle.rows([1, 2, 3, 4], 3) == [3, 4, 5]
    assert oracle.rows([1, 2, 3, 7], 2)[0] == 4  # after the mismatch: a filler, never read
    assert oracle.rows([1, 2, 9], 1) == [2]  # the longest prompt wins
    assert oracle.rows([1, 2, 9, 2], 1) == [2]  # after an end of text
    assert oracle.rows([1, 2, 3], 1) == [4]  # the shorter prompt again, after the longer
    assert oracle.rows([8, 8, 8], 2) == [0, 0]  # a probe's context
    with pytest.raises(Refused, match="holds 3 tokens"):
        oracle.rows([1, 2, 3, 4, 5], 1)


def test_refusals_by_name():
    target = emulated({(1,): [2]}, ProfileClock(load_profile("h100-llama8b-bf16"), 1.0,
                                                lambda s: None))
    with pytest.raises(Refused, match="greedy only"):
        target.score([1], 1, SamplingConfig(temperature=0.7))
    with pytest.raises(Refused, match="no logits"):
        target.logits([1], 1)
    asks = {"--temperature": GenConfig(sampling=SamplingConfig(temperature=0.5)),
            "response_format": GenConfig(response_format={"type": "json_object"}),
            "logprobs": GenConfig(logprobs=2), "logit_bias": GenConfig(logit_bias={5: 1.0}),
            "presence_penalty": GenConfig(presence_penalty=0.5),
            "frequency_penalty": GenConfig(frequency_penalty=0.5)}
    for name, cfg in asks.items():
        with pytest.raises(Refused, match=name):
            check_config(cfg)
    check_config(GenConfig())


class Recording:
    """A shadow target that records each forward's (length, filled) and mirrors a cache."""
    vocab_size = 320

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    @property
    def n_cached(self):
        return self.inner.n_cached

    def score(self, tokens, n_rows, sampling):
        self.calls.append((len(tokens), self.inner.n_cached))
        assert all(0 <= t < self.vocab_size for t in tokens)
        return self.inner.score(tokens, n_rows, sampling)

    def rollback(self, n):
        self.inner.rollback(n)

    def close(self):
        self.inner.close()


def test_shadow_clock_runs_the_chunk_at_its_filled_length():
    shadow = Recording(shadow_target("tiny", "cpu", 128))
    target = emulated({(5, 6): [7, 8, 9, 2]}, ShadowClock(shadow))
    target.score([5, 6], 1, GREEDY)
    assert target.score([7, 1000, 4], 3, GREEDY).choice[0] == 8  # the oracle's, not the shadow's
    target.rollback(3)
    target.score([8, 9], 2, GREEDY)
    assert shadow.calls == [(2, 0), (3, 2), (2, 3)]
    with target.preserved(8):
        target.score([1, 2, 3], 1, GREEDY)
    target.score([2], 1, GREEDY)  # the shadow fills up to the restored length first
    assert shadow.calls[-3:] == [(3, 0), (2, 3), (1, 5)]
    target.close()


def test_the_scale_s_draft_time_is_the_median_of_its_probes(monkeypatch):
    """One slow or fast probe does not move the scale: the median of the probes, each at the
    emulation's draft threads, the drafter's own count set back after."""
    import contextlib

    import models.fit.profiler as profiler

    probes = iter([0.015, 0.030, 0.014, 0.016, 0.013])
    monkeypatch.setattr(profiler, "interleaved", lambda fns: {"d": next(probes)})
    threads = []
    drafter = SimpleNamespace(set_threads=lambda n: threads.append(n) or 4,
                              preserved=contextlib.nullcontext)
    assert draft_token_s(drafter, 1, probes=5) == pytest.approx(0.015)
    assert threads == [1, 4]


# -- the oracle's cache and the real pairs ------------------------------------------------------
@pytest.fixture(scope="module")
def emulated_smol(smol_pair):
    """A second smol-self with the emulated target (the profile clock, its sleeps real but
    short: scale 0.05), its oracle computed for PROMPTS."""
    pair = reference_pair("smol-self")
    ids = [pair.prompt_ids(p) for p in PROMPTS]
    emulation = emulate(pair, "rtx4090-llama8b-bf16", ids, N, scale=0.05)
    yield pair, ids, emulation
    pair.close()


@pytest.mark.parametrize("method,lookup", [("vanilla", "auto"), ("sps", "auto"), ("duo", "auto"),
                                           ("duo", "off"), ("lookup", "auto")])
def test_greedy_under_emulation_is_the_real_targets(emulated_smol, smol_pair, method, lookup):
    pair, ids, _ = emulated_smol
    for prompt in ids:
        cfg = GenConfig(method=method, max_new_tokens=N, lookup=lookup, cache_prompt=False)
        out = [t for ev in pair.generate(prompt, cfg) for t in ev.tokens]
        assert out == vanilla_ids(smol_pair, prompt, N)


def test_the_placement_sees_a_gpu_target(emulated_smol):
    pair, ids, emulation = emulated_smol
    assert (pair.threads.target, pair.threads.draft) == (1, emulation.draft_threads)
    assert pair.threads.overlapped and 1 <= emulation.draft_threads <= max(1, pair.cores - 1)
    events = list(pair.generate(ids[0], GenConfig(method="duo", max_new_tokens=8)))
    assert events[-1].stats["schedule"].startswith("overlap")
    assert events[-1].stats["target_device"] == "cuda"
    assert emulation.to_dict()["title"] == "emulated rtx4090-llama8b-bf16 (projected)"


def test_gemma_smol_under_emulation_is_the_real_targets(gemma_pair):
    pair = reference_pair("gemma-smol")
    try:
        ids = pair.prompt_ids(PROMPTS[0])
        pair.lookup_memory.add(ids + vanilla_ids(gemma_pair, ids, N))  # as an oracle's run leaves
        emulate(pair, "rtx4090-llama8b-bf16", [ids], N, scale=0.05)
        assert len(pair.lookup_memory) == 0  # no answer for the emulated lookup to copy
        for method in ("vanilla", "sps", "duo"):
            cfg = GenConfig(method=method, max_new_tokens=N, cache_prompt=False)
            out = [t for ev in pair.generate(ids, cfg) for t in ev.tokens]
            assert out == vanilla_ids(gemma_pair, ids, N), method
    finally:
        pair.close()


def test_a_cached_oracle_is_reused_and_a_changed_prompt_is_not(smol_pair, monkeypatch):
    ids = smol_pair.prompt_ids(PROMPTS[1])
    first = oracle_path(smol_pair, ids, 6)
    assert first == vanilla_ids(smol_pair, ids, 6)

    def no_generation(*a, **k):
        raise AssertionError("the cached oracle should have been read")
    with monkeypatch.context() as m:
        m.setattr(smol_pair, "generate", no_generation)
        assert oracle_path(smol_pair, ids, 6) == first
        with pytest.raises(AssertionError):
            oracle_path(smol_pair, ids + [ids[-1]], 6)  # another prompt: computed
        with pytest.raises(AssertionError):
            oracle_path(smol_pair, ids, 7)  # another length: computed
    key = oracle_key(smol_pair, ids, 6)
    other = SimpleNamespace(spec=SimpleNamespace(name="gemma-smol"),
                            target_dir=smol_pair.target_dir, target=smol_pair.target)
    assert oracle_key(other, ids, 6) != key  # another pair
    other = SimpleNamespace(spec=smol_pair.spec, target_dir="elsewhere", target=smol_pair.target)
    assert oracle_key(other, ids, 6) != key  # the same name, other weights
    other.target_dir = smol_pair.target_dir
    other.target = SimpleNamespace(dtype="bfloat16", quant="none", packed=False)
    assert oracle_key(other, ids, 6) != key  # another precision
    other.target = SimpleNamespace(dtype=smol_pair.target.dtype, quant="none",
                                   packed=not smol_pair.target.packed)
    assert oracle_key(other, ids, 6) != key  # packed weights: the same sums in another order


def test_benchmark_refuses_what_it_cannot_emulate(capsys, tmp_path):
    import scripts.benchmark as benchmark

    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"question_id": 1, "category": "x", "turns": ["hi"]}) + "\n")
    base = ["--questions", str(q), "--out", str(tmp_path / "o"), "--emulate"]
    cases = {"hf-pld": base + ["h100-llama8b-bf16", "--methods", "vanilla,hf-pld"],
             "--temperature": base + ["h100-llama8b-bf16", "--temperature", "0.7"],
             "--replay": base + ["h100-llama8b-bf16", "--replay"],
             "known: ": base + ["no-such-card"]}
    if not torch.cuda.is_available():
        cases["no CUDA GPU"] = base + ["h100-llama8b-bf16", "--emulate-clock", "shadow"]
    for word, argv in cases.items():
        err = one_line_exit_2(capsys, lambda: benchmark.main(argv))
        assert word in err, err
    err = one_line_exit_2(capsys, lambda: benchmark.main(base[:-1] + ["--emulate-shape", "tiny"]))
    assert "need --emulate" in err
