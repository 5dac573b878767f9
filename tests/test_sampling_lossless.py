"""Sampling losslessness with fakes of known distributions: the joint distribution of the
first tokens from each method matches the target's own (chi-square, fixed seeds)."""
from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from scipy.stats import chisquare

from core.engine import GenConfig, generate
from core.sampling import SamplingConfig, logits_to_probs
from tests.fakes import FakeDrafter, FakeTarget, ScriptedLearned, decode, fake_profile, markov

# Samples per case, by a power calculation: the chi-square at alpha 1e-3 on the joint of the
# first 3 tokens (64 cells; those expected >= 5 kept, the rest pooled: df 30 at t1, 15 at
# t0.8-k3-p0.9) has power 0.99 for a noncentrality N * w^2 >= 67.8 (df 30), where
# w^2 = sum (b - p)^2 / p >= 4 TV^2 for any shift b of the law p (Cauchy-Schwarz). N = 2000:
# every change of the joint by a total variation >= 0.092 (0.083 at t0.8) is caught with
# power 0.99, for every method. The known faults: a verifier that draws the recovered token
# from p instead of norm(max(0, p - q)) has w^2 = 0.17 under sps (N >= 400 catch it; 0.40
# through the translated vocabulary of tests/test_cross_tokenizer.py), ~0.005 under duo
# (power 0.04 at 2000, 0.17 at the 4000 duo had: neither size is for it).
V, N_TOKENS, N_SAMPLES = 4, 3, 2000
N_SPS = N_SAMPLES  # one size for every method (above)
PROMPT = [0, 1]


def n_samples(method: str) -> int:
    return N_SAMPLES if method == "duo" else N_SPS


def exact_joint(P: np.ndarray, sampling: SamplingConfig, skip: int = 0) -> dict:
    """The exact law of N_TOKENS tokens after the prompt and `skip` tokens more."""
    rows = logits_to_probs(np.log(P + 1e-30), sampling)
    start = np.linalg.matrix_power(rows, skip)[PROMPT[-1]]  # the law of the token before
    joint = {}
    for seq in itertools.product(range(V), repeat=N_TOKENS):
        total = 0.0
        for first, p_first in enumerate(start):
            prob, last = p_first, first
            for t in seq:
                prob *= rows[last, t]
                last = t
            total += prob
        joint[seq] = total
    return joint


class DeviceRowsTarget(FakeTarget):
    """A fake whose rows go through the torch targets' device-side transform."""

    def score(self, tokens, n_rows, sampling, check=None):
        import torch

        from models.target.sampling import device_scores
        return device_scores(torch.from_numpy(self.logits(tokens, n_rows)), sampling, check)


def sample_joint(method: str, sampling: SamplingConfig, gamma: int, P, Q, n=None,
                 sequential=False, target_class=FakeTarget, n_tokens=N_TOKENS,
                 **options) -> tuple[dict, FakeDrafter]:
    target, drafter, n = target_class(P), FakeDrafter(Q), n or n_samples(method)
    counts: dict = {}
    options.setdefault("multi_seq", False)
    for seed in range(n):
        cfg = GenConfig(method=method, max_new_tokens=n_tokens, sampling=sampling, seed=seed,
                        gamma=gamma, sequential=sequential, **options)
        toks = [t for ev in generate(target, drafter, PROMPT, cfg, decode, fake_profile())
                for t in ev.tokens]
        counts[tuple(toks)] = counts.get(tuple(toks), 0) + 1
    return counts, drafter


def assert_matches(counts: dict, joint: dict, n: int) -> None:
    keys = sorted(joint)
    expected = np.array([joint[k] * n for k in keys])
    observed = np.array([counts.get(k, 0) for k in keys])
    assert observed.sum() == n, "every sample must have exactly N_TOKENS tokens"
    keep = expected >= 5  # chi-square needs non-tiny cells; pool the rest
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    obs, exp = obs.astype(np.float64), exp.astype(np.float64)
    exp = exp * obs.sum() / exp.sum()  # float rounding of the exact joint
    p_value = chisquare(obs, exp).pvalue
    assert p_value > 1e-3, f"distribution differs from the target's (p={p_value:.2e})"


P_TARGET = markov(V, seed=1, sharp=0.7)
Q_DRAFT = markov(V, seed=2, sharp=0.7)  # deliberately different: many rejections


# coupled: sps and duo give vanilla's text seed for seed (tests/test_seeded.py, duo at gamma 3
# included, at both samplings here), so their counts are vanilla's, tested here. A fault that
# changes the law by a total variation d (what 2000 samples catch from d = 0.092, above)
# changes the text on a share >= d of the seeds: test_seeded's 54 seeds a run see d = 0.092
# with probability 1 - 0.908^54 = 0.995 (at 12 tokens a seed, not 3), so no coupled case here
# sps at gamma 4 ran here too: at N_TOKENS a round drafts 2 at most (none drafts past
# max_new_tokens), so its samples were gamma 2's seed for seed and its chi-square the same
# number (the next test asserts it; 5 CPU seconds for the two samplings)
SAMPLINGS = [SamplingConfig(1.0), SamplingConfig(0.8, top_k=3, top_p=0.9)]


SAMPLING_IDS = ["t1", "t0.8-k3-p0.9"]
# every method at both samplings; duo at gamma 1 (one-token chunks) too, at t1 only: the
# samplings' transforms are the rows' (the same in every method), gamma 3 runs them in duo
JOINT_CASES = [pytest.param(m, g, s, sampling, id=f"{sid}-{m}-{g}-{s}")
               for sampling, sid in zip(SAMPLINGS, SAMPLING_IDS)
               for m, g, s in (("vanilla", None, "coupled"), ("sps", 2, "rejection"),
                               ("duo", 3, "rejection"))]
JOINT_CASES.append(pytest.param("duo", 1, "rejection", SAMPLINGS[0], id="t1-duo-1-rejection"))


@pytest.mark.parametrize("method,gamma,sampler,sampling", JOINT_CASES)
def test_joint_distribution_matches_target(method, gamma, sampler, sampling):
    """duo runs 2 x N_TOKENS and both halves' joints are tested: in its first N_TOKENS the
    worker has drafted little (its first chunk is drafted beside the prefill: 0.56 drafted
    tokens a run here), after them its chunks are verified every round (3.1 drafted tokens
    a run in all at gamma 1, 4.2 at gamma 3; 50 seeds, t1)."""
    n, halves = n_samples(method), 2 if method == "duo" else 1
    counts, _ = sample_joint(method, sampling, gamma, P_TARGET, Q_DRAFT, n, sampler=sampler,
                             n_tokens=N_TOKENS * halves)
    for half in range(halves):
        part = Counter()
        for seq, c in counts.items():
            part[seq[half * N_TOKENS:(half + 1) * N_TOKENS]] += c
        assert_matches(part, exact_joint(P_TARGET, sampling, skip=half * N_TOKENS), n)


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=SAMPLING_IDS)
def test_sps_gamma_4_at_three_tokens_is_gamma_2_seed_for_seed(sampling):
    def texts(gamma):
        target, drafter, out = FakeTarget(P_TARGET), FakeDrafter(Q_DRAFT), []
        for seed in range(100):
            cfg = GenConfig(method="sps", max_new_tokens=N_TOKENS, sampling=sampling,
                            seed=seed, gamma=gamma, sampler="rejection", multi_seq=False)
            out.append([t for ev in generate(target, drafter, PROMPT, cfg, decode,
                                             fake_profile()) for t in ev.tokens])
        return out
    assert texts(4) == texts(2)


@pytest.mark.parametrize("method,gamma,sampler", [("vanilla", None, "coupled"),
                                                  ("duo", 3, "rejection")])
def test_device_side_rows_stay_lossless(method, gamma, sampler):
    """The torch targets reduce rows on their device (models/target/sampling.py): seed for
    seed, the texts are the reference rows' (whose law the chi-squares above test), with the
    rejection sampler's rejections on device rows. Power, as for the coupled cases below: a
    fault that moves the law by a total variation d gives another text on a share >= d of
    the seeds (the coupling inequality: both runs draw from one seed), so SEEDS = 100 see
    d = 0.092 (what 2000 samples catch with power 0.99) with probability 0.99994, and a
    fault that keeps the law but not the text too. (Before: a chi-square of 2000 samples on
    device rows, about 9 CPU seconds for the two; the device's reduction equals the
    reference's row for row on random rows: tests/test_target_static.py.)"""
    sampling = SamplingConfig(0.8, top_k=3, top_p=0.9)
    texts, rejected = {}, 0
    for target_class in (FakeTarget, DeviceRowsTarget):
        target, drafter, texts[target_class] = target_class(P_TARGET), FakeDrafter(Q_DRAFT), []
        for seed in range(SEEDS):
            cfg = GenConfig(method=method, max_new_tokens=N_TOKENS, sampling=sampling,
                            seed=seed, gamma=gamma, sampler=sampler, multi_seq=False)
            events = list(generate(target, drafter, PROMPT, cfg, decode, fake_profile(),
                                   learned=ScriptedLearned()))  # rejections counted
            texts[target_class].append([t for ev in events for t in ev.tokens])
            rejected += events[-1].stats["drafted"] - events[-1].stats["accepted"]
    assert len({tuple(t) for t in texts[FakeTarget]}) > 5  # the seeds vary the text (10 here)
    assert texts[DeviceRowsTarget] == texts[FakeTarget]
    assert (rejected > SEEDS // 2) == (method != "vanilla")  # the residual draws ran


# The cases below run the coupled sampler (the default), whose text is vanilla's seed for
# seed: each checks that, text by text, instead of a chi-square of 2000 samples. Power: a
# fault that moves duo's law by a total variation d gives a text other than vanilla's on a
# share >= d of the seeds (the coupling inequality), so SEEDS = 100 see d = 0.092 (what 2000
# samples catch with power 0.99, above) with probability 1 - 0.908^100 = 0.99994, and a fault
# that keeps the law but not the text too; vanilla's law is the chi-squares' above.
SEEDS = 100


def assert_vanillas_texts(gamma: int, **options) -> FakeDrafter:
    """duo's coupled texts (t1, N_TOKENS) are vanilla's for every seed; duo's drafter, whose
    calls are counted (the budget sees the profile's times: ScriptedLearned)."""
    sampling = SamplingConfig(1.0)
    texts = {}
    for method in ("vanilla", "duo"):
        target, drafter = FakeTarget(P_TARGET), FakeDrafter(Q_DRAFT)
        texts[method] = []
        for seed in range(SEEDS):
            cfg = GenConfig(method=method, max_new_tokens=N_TOKENS, sampling=sampling,
                            seed=seed, gamma=gamma if method == "duo" else None, **options)
            texts[method].append([t for ev in generate(target, drafter, PROMPT, cfg, decode,
                                                       fake_profile(), learned=ScriptedLearned())
                                  for t in ev.tokens])
    assert len({tuple(t) for t in texts["vanilla"]}) > 10  # the seeds vary the text
    assert texts["duo"] == texts["vanilla"]
    return drafter


def test_duo_drops_speculative_chunks_and_stays_lossless():
    """With a poor draft the speculative chunk is often dropped; output must not change."""
    drafter = assert_vanillas_texts(2, sequential=True, multi_seq=False)
    # drafts restarted from a verified context (chunk dropped) many times
    restarts = sum(1 for ctx_len, _ in drafter.calls if ctx_len > len(PROMPT))
    assert restarts > SEEDS // 2


def test_chi_square_detects_a_wrong_distribution():
    """The test above can fail: sampling from the draft alone is caught."""
    sampling = SamplingConfig(1.0)
    counts, _ = sample_joint("vanilla", sampling, None, Q_DRAFT, Q_DRAFT)
    with pytest.raises(AssertionError):
        assert_matches(counts, exact_joint(P_TARGET, sampling), N_SPS)


@pytest.mark.parametrize("options", [{"multi_seq": True, "theta_scale": 0.05, "max_seqs": 4},
                                     {"static_k": 3}], ids=["dynamic", "static-k3"])
def test_multi_sequence_drafting_stays_lossless(options):
    """Several first-token candidates pass theta (a low theta scale, or a static k); the
    sequence whose first token is the target's own continues. Sequential: a chunk dropped
    while its job still runs would be stopped part way, its sequences uncounted."""
    drafter = assert_vanillas_texts(3, **{"multi_seq": False, "sequential": True, **options})
    assert sum(k > 1 for k in drafter.branch_counts) > len(drafter.branch_counts) // 2
