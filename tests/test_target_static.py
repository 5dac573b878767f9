"""The static-cache target, compiled and not, against the
eager DynamicCache target on its own weights (the reference path): the same logits across rollbacks and bucket padding, greedy output equal to
the eager `vanilla` for every method, and the device-side sampling transform equal to the
numpy one. The paths run smol-self's and gemma-smol's targets cut to a few layers
(tests/cut_target.py); the full default pair's path: tests/test_defaults.py.
long: the paths share the cut pairs' module fixtures (a second file would compile again)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from core.backends import SampleCheck, Scores
from core.engine import GenConfig
from core.sampling import DRAW, Noise, SamplingConfig, logits_to_probs, mix32, noise_key, uniforms
from models.target.sampling import device_scores
from models.target.sampling import logits_to_probs as torch_probs
from models.target.static import StaticTarget
from models.target.eager import TorchTarget
from tests.reference import reference_scores
from tests.conftest import UNTIMED
from tests.cut_target import load_cut

PROMPTS = ["Why is the sky blue?", "Write a Python function that reverses a string.",
           "List three tips for staying focused while studying."]
SAMPLINGS = [SamplingConfig(0.7), SamplingConfig(1.0, top_k=20), SamplingConfig(0.9, top_p=0.8),
             SamplingConfig(1.3, top_k=50, top_p=0.9)]


def chunks(target, ids: list[int]) -> list[np.ndarray]:
    """Prefill, a rejected draft rolled back, verify chunks of several lengths (padded to the
    buckets), a deep rollback and a long re-prefill: logits of each."""
    target.rollback(0)
    out = [target.logits(ids, 1)]
    out.append(target.logits([5, 6, 7, 8, 9], 5))  # a draft the verifier rejects
    target.rollback(len(ids) + 2)
    out.append(target.logits([11, 12, 13], 3))
    out.append(target.logits([14], 1))
    target.rollback(4)
    out.append(target.logits(ids[4:] + [21] * 40, 20))  # over the largest bucket
    target.rollback(0)
    return [o.cpu().numpy() for o in out]


def assert_same_logits(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    for x, y in zip(a, b):
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, atol=2e-4, rtol=1e-4)
        assert (x.argmax(-1) == y.argmax(-1)).all()


@pytest.fixture(scope="module")
def cut(pair_with):
    """smol-self with its target cut to a few of its 30 layers (real weights, tokenizer and
    config otherwise; tests/cut_target.py), on the eager reference path. The static and
    compiled paths are checked against the eager one on the same weights: a layer runs the
    same code whatever the count (they are alike), and the compile (the cost: about 70 CPU
    seconds cold for 30 layers) scales with the layers it traces."""
    pair = load_cut(pair_with)
    assert pair.target.model.config.num_hidden_layers < 30
    return pair


def test_static_target_gives_the_eager_logits(cut):
    ids = cut.prompt_ids(PROMPTS[0])
    static = StaticTarget(cut.target_dir, "cpu", 512, "float32", compile=False)
    assert static.path == "static" and static.buckets[-1] == 32
    assert_same_logits(chunks(cut.target, ids), chunks(static, ids))
    with pytest.raises(ValueError, match="context window is full"):
        static.logits([1] * 513, 1)
    static.close()


@pytest.mark.parametrize("path", ["eager", "static"])
def test_a_profile_between_two_turns_keeps_the_target_s_cache(cut, path):
    """A profile (the page's button) times the target on an empty cache; the chat's cache
    comes back (150 positions: past what the probes write, and below it), and the next
    chunk's logits are a fresh prefill's."""
    from models.fit.profiler import measure

    target = cut.target if path == "eager" else StaticTarget(
        cut.target_dir, "cpu", 512, "float32", compile=False)
    chat = cut.prompt_ids(PROMPTS[1]) + list(range(300, 420))
    target.rollback(0)
    target.logits(chat, 1)
    measure(cut.drafter, target, verify_n=1, seqs=1)
    assert target.cached_ids == chat
    after = target.logits([7, 8, 9], 3).cpu().numpy()
    target.rollback(0)
    assert_same_logits([after], [target.logits(chat + [7, 8, 9], 3).cpu().numpy()])
    target.rollback(0)
    if path == "static":
        target.close()


def test_spans_step_by_half_octaves_up_to_the_buffer():
    from models.target.attention import span_for, spans

    assert spans(8224) == [256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 8224]
    assert spans(100) == [100] and spans(300) == [256, 300]
    assert [span_for(n, spans(8224)) for n in (1, 257, 4097, 8200)] == [256, 384, 6144, 8224]


def across_spans(target, n: int) -> list[np.ndarray]:
    """Forwards whose filled length crosses span buckets (256, 384, 512, ...) and ends at
    the window's last slot, with rollbacks across a boundary: logits of each."""
    ids = [1000 + (i * 7919) % 20000 for i in range(n)]
    target.rollback(0)
    out = [target.logits(ids[:250], 1)]
    for end in (255, 256, 300, 383, 384, 400):
        out.append(target.logits(ids[target.n_cached:end], 1))
    target.rollback(250)  # back below a boundary, then over two at once
    out.append(target.logits(ids[250:420], 3))
    out.append(target.logits(ids[420:n - 4], 2))
    out.append(target.logits(ids[n - 4:], 4))  # the window's last slots
    target.rollback(0)
    return [o.cpu().numpy() for o in out]


@pytest.fixture(scope="module")
def eager_spans(cut):
    """The eager target's logits across spans: the reference of the static and the compiled
    cases (computed once for both)."""
    return across_spans(cut.target, 512)


def test_static_target_across_spans_and_at_the_window_end(cut, eager_spans):
    static = StaticTarget(cut.target_dir, "cpu", 512, "float32", compile=False)
    assert_same_logits(eager_spans, across_spans(static, 512))
    static.close()


def test_static_target_keeps_sliding_windows_across_rollbacks():
    """Gemma 3 mixes sliding-window and full layers: past the window, the static cache
    (every layer full length) must still give the eager logits. gemma-smol's target, its
    first six layers (five sliding, one full: the pattern its 18 repeat) loaded from the
    suite's conversion (no cut folder written), its window 512 set to 128: the fill past it
    a quarter as long (without the window these logits move by 1.3, against the 2e-4
    tolerance). One load of the weights: the eager target runs first, then the static one
    takes its model (and attaches its own attention to it)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.cut_target import source

    model_dir, window = source("gemma-smol"), 128
    config = AutoConfig.from_pretrained(model_dir)
    config.num_hidden_layers, config.sliding_window = 6, window
    config.layer_types = config.layer_types[:6]
    assert set(config.layer_types) == {"sliding_attention", "full_attention"}
    n = window + 88  # past the window, then a rollback to 10 tokens before the end
    ids = [1000 + (i * 7919) % 20000 for i in range(n)]

    def past_the_window(target) -> np.ndarray:
        target.rollback(0)
        target.logits(ids, 1)
        target.logits([300, 301, 302], 3)
        target.rollback(n - 10)
        return target.logits([400, 401, 402, 403], 4).numpy()

    model = AutoModelForCausalLM.from_pretrained(model_dir, config=config, dtype=torch.float32)
    assert len(model.model.layers) == 6
    eager = TorchTarget(model_dir, "cpu", 512, "float32", model=model)
    a = past_the_window(eager)
    eager.close()
    static = StaticTarget(model_dir, "cpu", 512, "float32", compile=False, model=model)
    np.testing.assert_allclose(a, past_the_window(static), atol=2e-4, rtol=1e-4)
    static.close()


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_device_transform_equals_numpy(sampling):
    logits = np.random.default_rng(0).normal(0, 3, (5, 300)).astype(np.float32)
    ours = torch_probs(torch.from_numpy(logits), sampling).numpy()
    np.testing.assert_allclose(ours, logits_to_probs(logits, sampling), atol=1e-6)
    assert device_scores(torch.from_numpy(logits), SamplingConfig()).choice == \
        logits.argmax(-1).tolist()


def test_noise_is_the_same_bits_in_numpy_and_torch():
    rng = np.random.default_rng(1)
    for seed in [0, 1, 2**32 - 1, 2**32 + 5, 2**63 - 1, int(rng.integers(2**62))]:
        pos = rng.integers(0, 2**31, 50)
        tokens = rng.integers(0, 2**31, 50)
        a = uniforms(noise_key(seed, DRAW, pos.astype(np.uint64))[:, None],
                     mix32(tokens.astype(np.uint64))[None, :])
        b = uniforms(noise_key(seed, DRAW, torch.from_numpy(pos))[:, None],
                     mix32(torch.from_numpy(tokens))[None, :])
        assert (a == b.numpy()).all() and 0 < a.min() and a.max() < 1


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_device_sampled_scores_equal_the_reference(sampling):
    """The device reduction of a sampled verify (p of the draft tokens, residual and bonus
    draws by the shared noise) gives tests/reference.sampled_scores' answer, row for row."""
    rng = np.random.default_rng(2)
    for trial in range(20):
        logits = rng.normal(0, 3, (6, 500)).astype(np.float32)
        q = logits_to_probs(rng.normal(0, 3, (5, 500)).astype(np.float32), sampling)
        draft = [int(rng.choice(500, p=row)) for row in q]
        check = SampleCheck(draft, q, Noise(trial), 100 + trial)
        ref = reference_scores(logits, sampling, check)
        ours = device_scores(torch.from_numpy(logits), sampling, check)
        np.testing.assert_allclose(ours.p_draft, ref.p_draft, rtol=1e-5)
        assert (ours.recovered, ours.bonus) == (ref.recovered, ref.bonus)
        coupled = SampleCheck(draft, None, Noise(trial), 100 + trial, coupled=True)
        ours = device_scores(torch.from_numpy(logits), sampling, coupled).choice
        assert ours == reference_scores(logits, sampling, coupled).choice


@pytest.fixture(scope="module")
def compiled(pair_with, cut):
    """The cut smol-self (`cut`: why it proves what the full one would) with the compiled
    target as --target-compile on runs it on the CPU: the chunk length dynamic, each chunk
    padded to 8 or 16 (two sizes make it dynamic; one graph, a 1-token step included, as it
    pads to 8), longer chunks eager."""
    return load_cut(pair_with, target_compile="on", compile_buckets=(8, 16), n_ctx=512)


def test_compiled_target_gives_the_eager_logits(cut, compiled):
    """At the plan's thread count, which its graphs were compiled for at the load; a forward
    asked for another runs at that one, nothing compiled again."""
    from torch._dynamo.utils import counters

    target, cores = compiled.target, compiled.opts.cores
    assert target.path == "static-compiled"
    assert "static-compiled" in compiled.describe()["target"]
    assert target.graph_threads == compiled.threads.target == cores
    graphs, prev = counters["stats"]["unique_graphs"], target.set_threads(max(1, cores - 1))
    for prompt in PROMPTS[:2]:
        ids = cut.prompt_ids(prompt)
        assert_same_logits(chunks(cut.target, ids), chunks(target, ids))
        assert torch.get_num_threads() == cores
    target.set_threads(prev)
    assert counters["stats"]["unique_graphs"] == graphs


def test_compiled_target_runs_one_graph_per_chunk_across_spans(compiled, eager_spans):
    """The span is dynamic: crossing span buckets up to the window's end compiles nothing
    new after the load's warm-up (its chunk sizes are the ones these forwards pad to), and
    gives the eager logits."""
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    assert_same_logits(eager_spans, across_spans(compiled.target, 512))
    assert counters["stats"]["unique_graphs"] == graphs


def test_compiled_target_gives_the_eager_probabilities_and_draws(cut, compiled):
    """Sampled verify rounds: the same probabilities, and the same p of the draft tokens,
    residual and bonus draws from the compiled target as from the eager one."""
    ids = cut.prompt_ids(PROMPTS[1])
    draft = [11, 12, 13]
    q = np.full((3, cut.target.vocab_size), 1.0 / cut.target.vocab_size, dtype=np.float32)
    for sampling in SAMPLINGS[:2]:
        rows, scores = [], []
        for target in (cut.target, compiled.target):
            target.rollback(0)
            rows.append(torch_probs(target.logits(ids + draft, 4), sampling).numpy())
            target.rollback(0)
            scores.append(target.score(ids + draft, 4, sampling,
                                       SampleCheck(draft, q, Noise(5), len(ids))))
        np.testing.assert_allclose(rows[0], rows[1], atol=1e-5)
        np.testing.assert_allclose(scores[0].p_draft, scores[1].p_draft, atol=1e-5)
        assert (scores[0].recovered, scores[0].bonus) == (scores[1].recovered, scores[1].bonus)


# tokens a greedy case decodes: the cut target turns the (full model's) drafts down every few
# tokens, so rollbacks on the compiled target show within these (asserted)
N = 24


def run(pair, ids, **kw):
    pair.lookup_memory.clear()  # an earlier case's answer must not draft this one: the model does
    events = list(pair.generate(ids, GenConfig(max_new_tokens=N, **kw)))
    return [t for e in events for t in e.tokens], events[-1].stats


# the greedy cases' prompts: each case meets rejections on them, asserted over its prompts
GREEDY = [PROMPTS[0], PROMPTS[2]]


@pytest.fixture(scope="module")
def oracle(cut):
    """The eager cut target's vanilla output for each greedy prompt (kept on disk)."""
    from tests.conftest import vanilla_ids

    return {p: vanilla_ids(cut, cut.prompt_ids(p), N) for p in GREEDY}


@pytest.mark.parametrize("method,options", [
    ("vanilla", {}), ("sps", {"gamma": 4}), ("duo", {}),
    ("duo", {"gamma": 6, **UNTIMED})])
def test_compiled_greedy_identical_to_eager_vanilla(compiled, oracle, method, options):
    rejected = 0
    for prompt in GREEDY:
        got, stats = run(compiled, compiled.prompt_ids(prompt), method=method, **options)
        assert got == oracle[prompt], f"{method} {options} on the compiled target, {prompt!r}"
        assert stats["target_path"] == "static-compiled"
        rejected += stats["drafted"] - stats["accepted"]
    # drafts rolled back on the compiled target (where no timing chooses the rounds)
    assert "gamma" not in options or rejected > 0


def test_grammar_biases_and_penalties_on_the_compiled_target(cut, compiled):
    """tests/test_grammar.py's `everything` (a schema, a bias and a penalty) on the compiled
    target (compiled once, here): greedy `sps` and `duo` equal the adjusted `vanilla` of the
    eager reference path. One of its prompts: the adjusted rows take the one device path
    whatever the prompt; test_grammar.py runs both on the eager target. N tokens: drafts are
    masked and turned down within them (asserted)."""
    from tests.test_grammar import ADJUSTED, PROMPTS, adjusted_vanilla
    from tests.test_grammar import run as run_adjusted

    prompt = PROMPTS[0]
    want = adjusted_vanilla(cut, prompt, ADJUSTED["everything"], n=N)
    refused = 0
    for method in ("sps", "duo"):
        compiled.lookup_memory.clear()  # the model's drafts, masked on the compiled target
        gamma = 4 if method == "sps" else None  # sps at a fixed gamma: no timing picks its drafts
        got, stats, _ = run_adjusted(compiled, prompt, n=N, method=method, gamma=gamma,
                                     **ADJUSTED["everything"])
        assert got == want, f"{method} on the compiled target, {prompt!r}"
        refused += (stats["drafted"] - stats["accepted"]) if gamma else 0
    assert refused > 0
