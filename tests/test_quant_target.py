"""The quantized target on the real smol-self pair, its target cut to a few layers (oracle:
`vanilla` on the same quantized target): greedy `sps`/`duo` token-identical for int8
(float32), divergence only at rounding ties for int4 (bfloat16, the only int4 the CPU runs);
sampling through the quantized target draws its tokens (seed for seed, the first two);
`--target-quant` picks and refuses as it says. The quantization of all 30 layers, and how
well it keeps the model's predictions: tests/test_quant.py."""
from __future__ import annotations

import numpy as np
import pytest

from core.engine import GenConfig
from core.sampling import Noise, SamplingConfig, logits_to_probs
from tests.conftest import UNTIMED, vanilla_ids

PROMPTS = ["Why is the sky blue?", "Write a haiku about a cat sleeping in the sun.",
           "List three tips for staying focused while studying."]
# 16 tokens: the cut target turns the drafts down within them on every prompt (asserted)
N, TIE = 16, 0.25


def run(pair, ids, **kw):
    pair.lookup_memory.clear()  # an earlier case's answer must not draft this one: the model does
    events = list(pair.generate(ids, GenConfig(max_new_tokens=N, **kw)))
    return [t for e in events for t in e.tokens], events[-1].stats


# The pairs' targets are cut to a few of smol-self's 30 layers (tests/cut_target.py): the
# quantized path's verify and rollback against its own vanilla are the same code whatever the
# count, and a quantized copy made for a fresh cache (int4: 25 CPU seconds for 30 layers)
# and each forward cost a fraction.
@pytest.fixture(scope="module")
def int8_pair(pair_with):
    from tests.cut_target import load_cut

    return load_cut(pair_with, target_quant="int8")


@pytest.fixture(scope="module")
def int4_pair(pair_with):
    from tests.cut_target import load_cut

    return load_cut(pair_with, target_quant="int4", dtype="bfloat16")


@pytest.mark.parametrize("method,options", [
    ("sps", {"gamma": 4}), ("duo", {}),
    ("duo", {"gamma": 6, **UNTIMED})])
def test_int8_greedy_identical_to_its_vanilla(int8_pair, method, options):
    assert int8_pair.target.quant == "int8"
    rejected = 0
    for prompt in PROMPTS:
        ids = int8_pair.prompt_ids(prompt)
        expected = vanilla_ids(int8_pair, ids, N)  # decoded once for the three cases
        got, stats = run(int8_pair, ids, method=method, **options)
        assert got == expected, f"{method} {options} on int8, {prompt!r}"
        assert stats["target_quant"] == "int8"
        rejected += stats["drafted"] - stats["accepted"]
    # rolled back on the int8 target (where no timing chooses the rounds: conftest.UNTIMED)
    assert "gamma" not in options or rejected > 0


@pytest.mark.parametrize("method", ["sps", "duo"])
def test_int4_greedy_leaves_its_vanilla_only_at_ties(int4_pair, method):
    assert "weights int4" in int4_pair.describe()["target"]
    rejected = 0
    for prompt in PROMPTS:
        ids = int4_pair.prompt_ids(prompt)
        expected = vanilla_ids(int4_pair, ids, N)
        untimed = UNTIMED if method == "duo" else {}  # its drafts counted
        got, stats = run(int4_pair, ids, method=method, gamma=4, **untimed)
        rejected += stats["drafted"] - stats["accepted"]
        i = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), None)
        if i is None:
            assert got == expected
            continue
        int4_pair.target.rollback(0)
        logits = int4_pair.target.logits(ids + expected[:i], 1)[0].float().cpu().numpy()
        top = float(np.max(logits))
        assert top - logits[expected[i]] <= TIE and top - logits[got[i]] <= TIE
    assert rejected > 0  # rolled back on the int4 target


def test_int8_sampling_draws_the_quantized_target_s_tokens(int8_pair):
    """sps with gamma 2 and the coupled sampler (the default): each seed's first two tokens
    are the draws the int8 target's own rows give (`Noise.draw` of its top-k 3 probabilities
    at their positions), seed for seed. `Noise.draw` follows the law of the row it is given
    (the coupled `vanilla` chi-squares of test_sampling_lossless.py, reference and device
    rows), so the text follows the int8 target's law. Power: a fault that moves that law by a
    total variation d gives other tokens on a share >= d of the seeds (the coupling
    inequality); the 200-sample chi-square this replaces (200 int8 forwards, 30 CPU seconds)
    caught d = 0.25 with power 0.99, and 24 seeds see it with 1 - 0.75^24 = 0.999."""
    sampling = SamplingConfig(1.0, top_k=3)
    ids = int8_pair.prompt_ids("Name a colour.")
    target = int8_pair.target
    target.rollback(0)
    first = logits_to_probs(target.logits(ids, 1).cpu().numpy(), sampling)[0]
    second = {}
    for a in np.flatnonzero(first):
        target.rollback(0)
        row = target.logits(ids + [int(a)], 1).cpu().numpy()
        second[int(a)] = logits_to_probs(row, sampling)[0]
    firsts = set()
    for seed in range(24):
        events = list(int8_pair.generate(ids, GenConfig("sps", 2, sampling, seed=seed, gamma=2)))
        noise = Noise(seed)
        a = noise.draw(first, len(ids))
        want = [a, noise.draw(second[a], len(ids) + 1)]
        assert [t for e in events for t in e.tokens] == want, f"seed {seed}"
        firsts.add(a)
    assert len(firsts) > 1  # the seeds do draw different tokens


def test_target_quant_choices_and_refusals(smol_pair, monkeypatch):
    import models.fit.memory as memory
    from models.fit.memory import GIB, DoesNotFit
    from models.target.choice import pick_quant_kind

    model_dir = smol_pair.target_dir
    assert pick_quant_kind(model_dir, "cpu", "float32", 4096, "int8")[0] == "int8"
    with pytest.raises(ValueError, match="needs bfloat16"):
        pick_quant_kind(model_dir, "cpu", "float32", 4096, "int4")
    with pytest.raises(ValueError, match="--target-quant must be one of auto, none, int8, int4"):
        pick_quant_kind(model_dir, "cpu", "float32", 4096, "int2")
    monkeypatch.setattr(memory, "free_bytes", lambda device: (int(0.2 * GIB), "a tiny GPU"))
    with pytest.raises(DoesNotFit, match="a tiny GPU"):
        pick_quant_kind(model_dir, "cpu", "float32", 4096, "none")


def test_auto_on_the_cpu_keeps_the_model_s_precision_when_it_fits(smol_pair, monkeypatch,
                                                                   tmp_path):
    """Never a lossy precision for speed: an old cache saying int8 timed faster (under load)
    changes nothing; int8 comes only when the memory forces it."""
    import json

    import models.fit.memory as memory
    import models.target.choice as choice
    from models.fit.profiler import machine_key

    monkeypatch.setenv("DUO_CACHE_DIR", str(tmp_path))
    old = {f"v3|{machine_key()}|quant|{smol_pair.target_dir.name}|float32|none-int8|gNone":
           {"none": [0.064, 0.074], "int8": [0.0357, 0.098]}}
    (tmp_path / "target_paths.json").write_text(json.dumps(old))
    kind, reason = choice.pick_quant_kind(smol_pair.target_dir, "cpu", "float32", 4096)
    assert kind == "none" and reason.startswith("picked fp32")
    need = memory.device_budget("cpu", "float32").needed(
        memory.model_dims(json.loads((smol_pair.target_dir / "config.json").read_text())),
        "none", 4096)
    monkeypatch.setattr(memory, "free_bytes", lambda device: (need - 1, "a small RAM"))
    kind, reason = choice.pick_quant_kind(smol_pair.target_dir, "cpu", "float32", 4096)
    assert kind == "int8" and "fp32 needs" in reason