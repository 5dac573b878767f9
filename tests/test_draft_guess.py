"""The lookup's guess to the draft (LlamaDrafter.propose(guess=...)): the guessed tokens are
evaluated in one batch and kept while the draft picks them itself, so its proposal is the
same as without the guess (greedy, seeded sampling, one sequence or the branch decision),
with fewer decodes when the guess is right."""
from __future__ import annotations

import numpy as np
import pytest

from core.align import IdentityVocab
from core.branching import BranchPolicy
from core.sampling import PositionRng, SamplingConfig
from models.draft.llama import LlamaDrafter
from models.pairs.catalog import draft_path, get_pair

TEXT = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a "
        "lantern, a notebook and a flask of tea.")
SAMPLED = SamplingConfig(temperature=0.8, top_p=0.95)


@pytest.fixture(scope="module")
def drafter():
    d = LlamaDrafter(draft_path(get_pair("smol-self")), n_threads=1, n_ctx=512)
    d.vocab = IdentityVocab(d.n_vocab, d.n_vocab)
    yield d
    d.close()


def propose(drafter, ids, sampling, guess=(), branching=None):
    drafter.rollback(0)
    drafter._sync(ids)  # the context first: what follows counts the drafting's decodes
    decodes, run = [], drafter._decode
    drafter._decode = lambda: decodes.append(1) or run()
    try:
        p = drafter.propose(ids, 12, sampling, PositionRng(7, 3), branching=branching,
                            guess=list(guess))
    finally:
        drafter._decode = run
    rows = None if p.main.q_draft is None else np.asarray(p.main.q_draft)
    return p.main.tokens, rows, len(decodes), drafter.tokens


@pytest.mark.parametrize("sampling", [SamplingConfig(), SAMPLED], ids=["greedy", "sampled"])
def test_a_guess_changes_no_token_and_a_right_one_spares_decodes(drafter, sampling):
    ids = drafter.tokenize(TEXT)
    ref, ref_q, ref_decodes, _ = propose(drafter, ids, sampling)
    wrong = [(t + 1) % 1000 for t in ref]
    cases = {"right": ref, "half": ref[:5] + wrong[5:], "wrong": wrong}
    for name, guess in cases.items():
        got, q, decodes, cache = propose(drafter, ids, sampling, guess)
        assert got == ref, name
        if ref_q is not None:
            np.testing.assert_allclose(q, ref_q, rtol=1e-4, atol=1e-6)
        assert cache[len(ids):] == got[:len(cache) - len(ids)], name  # no stale guess
        if name == "right":
            # the context's last token again (for its logits), then one batch, not 11 decodes
            assert (decodes, ref_decodes) == (2, 12)
    branching = BranchPolicy(max_seqs=1, step_s={1: 1.0})  # decides one sequence
    guessed, alone = (propose(drafter, ids, sampling, g, branching) for g in (ref, ()))
    assert guessed[0] == alone[0] == ref
    assert (guessed[2], alone[2]) == (3, 12)  # + the first token's decode, then the batch
