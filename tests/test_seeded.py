"""The coupled sampler (core/verify.py): with a seed, every method gives the target-only
decoder's text, whatever gamma, branching, overlap or the draft did; the rejection sampler
does not (which shows the tests can fail)."""
from __future__ import annotations

import numpy as np
import pytest

from core.backends import SampleCheck
from core import engine
from core.engine import GenConfig, generate
from core.predraft import PredraftPolicy
from core.sampling import Noise, SamplingConfig, draft_draws, logits_to_probs
from tests.reference import reference_scores
from tests.fakes import FakeDrafter, FakeTarget, decode, fake_profile, markov

# Seeds a run, by a power calculation: a method whose law is off the target's by a total
# variation d gives a text other than vanilla's on a share >= d of the seeds (the coupling
# inequality), so n seeds see it with 1 - (1 - d)^n; the chi-squares of
# tests/test_sampling_lossless.py catch d = 0.092 at t1 and 0.083 at t0.8-k3-p0.9 with power
# 0.99, and 54 seeds see those with 0.995 and 0.991 (at 12 tokens a seed, not 3: a larger d;
# 60 before, 0.997 and 0.994)
V, N_TOKENS, SEEDS = 6, 12, range(54)
PROMPT = [0, 1]
P_TARGET = markov(V, seed=1, sharp=0.7)
Q_DRAFT = markov(V, seed=2, sharp=0.7)
SAMPLINGS = [SamplingConfig(1.0), SamplingConfig(0.5), SamplingConfig(0.8, top_k=3, top_p=0.9)]
RUNS = {"sps-g2": dict(method="sps", gamma=2), "sps-g5": dict(method="sps", gamma=5),
        "duo-g1": dict(method="duo", gamma=1), "duo-g3": dict(method="duo", gamma=3),
        "duo-g3-seq": dict(method="duo", gamma=3, sequential=True),
        "duo-auto": dict(method="duo"), "duo-k3": dict(method="duo", gamma=4, static_k=3),
        "duo-dynamic": dict(method="duo", gamma=3, theta_scale=0.05),
        "duo-nopredraft": dict(method="duo", gamma=3, predraft=False)}


def texts(sampling, sampler="coupled", target=None, drafter=None, **kw) -> list[list[int]]:
    target, out = target or FakeTarget(P_TARGET), []
    drafter = drafter or FakeDrafter(Q_DRAFT)
    kw.setdefault("multi_seq", "theta_scale" in kw)
    for seed in SEEDS:
        cfg = GenConfig(max_new_tokens=N_TOKENS, sampling=sampling, seed=seed,
                        sampler=sampler, **kw)
        out.append([t for ev in generate(target, drafter, PROMPT, cfg, decode, fake_profile())
                    for t in ev.tokens])
    return out


# t1 and the truncating transform run every method (a top-k/top-p row is where a branch's
# or a pre-draft's support could part from the target's); t0.5, a temperature alone (the
# same rows as t1, sharper: the same code paths), the three that stand for the rest: one
# sps, duo at a fixed gamma and at its own (before, all nine: 6 x 54 seeded runs more)
T05_RUNS = ("sps-g2", "duo-g3", "duo-auto")


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["t1", "t0.5", "t0.8-k3-p0.9"])
def test_seeded_text_is_the_target_alones_for_every_method(sampling):
    want = texts(sampling, method="vanilla")
    assert len({tuple(t) for t in want}) > len(SEEDS) // 2  # the seeds do vary the text
    for name, kw in RUNS.items():
        if sampling.temperature == 0.5 and name not in T05_RUNS:
            continue
        assert texts(sampling, **kw) == want, name


def test_seeded_text_does_not_depend_on_the_draft():
    """A different draft (the target's own rows: everything passes) changes only speed."""
    sampling = SamplingConfig(1.0)
    want = texts(sampling, method="vanilla")
    assert texts(sampling, method="duo", gamma=3, drafter=FakeDrafter(P_TARGET)) == want


@pytest.mark.parametrize("options", [dict(gamma=3), dict(gamma=4, static_k=2, sequential=True),
                                     dict()], ids=["g3", "k2-seq", "auto"])
def test_seeded_text_with_forced_predrafts_is_vanillas(monkeypatch, options):
    """Pre-drafts of rejection outcomes (core/predraft.py), three outcomes three deep every
    round: drawn with the same noise at their own positions, the text stays vanilla's."""
    monkeypatch.setattr(engine, "_predraft_policy",
                        lambda run, budget: PredraftPolicy(forced=(3, 3)))
    sampling = SamplingConfig(0.8, top_k=4)
    assert texts(sampling, method="duo", **options) == texts(sampling, method="vanilla")


def test_the_rejection_sampler_depends_on_the_drafts():
    """The same seed through rejection sampling: sps and duo part from vanilla's text (the
    tests above would catch a sampler that is not drafter-invariant)."""
    sampling = SamplingConfig(1.0)
    want = texts(sampling, "rejection", method="vanilla")
    assert want == texts(sampling, method="vanilla")  # vanilla has no draft to depend on
    assert texts(sampling, "rejection", method="sps", gamma=3) != want


def test_coupled_scores_are_the_targets_draws():
    """A coupled verify reads each row's draw by the shared noise (Noise.draw), which is
    what vanilla draws at that position."""
    rng = np.random.default_rng(0)
    sampling = SamplingConfig(0.9, top_k=20)
    logits = rng.normal(0, 2, (4, 50)).astype(np.float32)
    check = SampleCheck([1, 2, 3], None, Noise(5), 40, coupled=True)
    probs = logits_to_probs(logits, sampling)
    want = [Noise(5).draw(probs[i], 40 + i) for i in range(4)]
    assert reference_scores(logits, sampling, check).choice == want


def test_the_draft_draws_with_the_targets_noise():
    """Coupled: the draft's draw of a row is the target's draw of the same row (the same
    noise), so a draft equal to the target passes every token."""
    q = logits_to_probs(np.random.default_rng(1).normal(0, 2, 50), SamplingConfig(1.0))
    assert all(draft_draws(3, "coupled").draw(q, pos) == Noise(3).draw(q, pos)
               for pos in range(30))
    drafts = [draft_draws(3, "rejection").draw(q, pos) for pos in range(30)]
    assert drafts != [Noise(3).draw(q, pos) for pos in range(30)]


def test_the_drafts_32_bit_draws_agree_on_a_large_vocabulary():
    """DraftNoise computes Noise.draw in float32 (speed): on a 49k vocabulary, flat or sharp,
    it agrees with the float64 draw (a disagreement would cost a rejection, not the text)."""
    rng, draft, noise = np.random.default_rng(4), draft_draws(9, "coupled"), Noise(9)
    for scale in (0.3, 3.0):
        q = logits_to_probs(rng.normal(0, scale, 49152).astype(np.float32), SamplingConfig(1.0))
        same = sum(draft.draw(q, pos) == noise.draw(q, pos) for pos in range(200))
        assert same >= 198


@pytest.mark.parametrize("temperature", [1.0])
def test_real_pair_seeded_text_is_vanillas(smol_pair, temperature):
    """smol-self, float32: the same seed gives the same text for every method. One
    temperature: the real backends' coupled draws (llama.cpp's float32 noise, the target's
    rows) take one path at any; every temperature runs on the fakes above (0.5 here too
    cost a vanilla of 24 single steps, sps and duo: about 4 CPU seconds)."""
    ids = smol_pair.prompt_ids("Tell me a very short story about a robot who learns to paint.")
    sampling = SamplingConfig(temperature)

    def text(method, **kw):
        cfg = GenConfig(method=method, max_new_tokens=24, sampling=sampling, seed=11, **kw)
        return [t for ev in smol_pair.generate(ids, cfg) for t in ev.tokens]
    want = text("vanilla")
    assert text("sps", gamma=3) == want
    assert text("duo", static_k=2) == want
