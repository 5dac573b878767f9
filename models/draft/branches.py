"""Several draft sequences in one llama.cpp context: dynamic multi-sequence drafting
(extra first tokens when the first is uncertain) and pre-drafts (sequences that start from
another outcome of a pending token), drafted with one batched decode per step.
A mixin of LlamaDrafter (models/draft/llama.py): it uses the drafter's sequence 0 (`tokens`),
its batch (`_decode_batch`), `_extend`, `rollback` and `ctx`."""
from __future__ import annotations

import numpy as np
from llama_cpp import llama_cpp as C

from core.align import common_prefix
from core.backends import Plan
from core.branching import softmax, top_ids, top_prob


class Branches:
    """The branch verbs of LlamaDrafter; `branches` and `branch_base` are its state."""

    def _branched(self, logits, n, pick, stop, branching, mask, adjusted, predraft, context,
                  guess=()):
        """Dynamic multi-sequence drafting and pre-drafting: decide the sequences, then draft
        them all with one batched decode per step (sequence ids share a prefix's KV cache).
        Pre-drafts (sequences 1..p) start from `a` in place of pending draft token j; the
        first tokens of the extra sequences come after them."""
        first, q0 = pick(logits, [])
        if first is None:
            return [[]], [[]], {}, [], 0.0, {}
        p_first = q0 if q0 is not None else _masked_softmax(adjusted(logits, []), mask)
        ranking = [t for t in top_ids(p_first) if p_first[t] > 0]
        pre, bases = self._fork_predrafts(predraft, context)
        rows0 = self._decode_batch([(first, 0)] + [(a, s) for s, (_, a) in pre.items()])
        extra = [] if branching is None else branching.extra_firsts(
            p_first, top_prob(rows0[0]), first, n, ranked=ranking)
        extra = extra[:self.max_seqs - 1 - len(pre)]
        steps = n if branching is None else branching.steps(n, 1 + len(extra))
        if not extra and not pre and predraft is None and guess[:1] == [first]:
            seq, seq_rows = [first], [q0]  # one sequence: the rest as _extend drafts it
            self._extend(rows0[0], steps - 1, pick, stop, seq, seq_rows, guess[1:])
            return [seq], [seq_rows], {}, ranking, float(p_first[ranking[0]]), {}
        seqs, rows = [[first]] + [[] for _ in pre] + [[c] for c in extra], [[q0]]
        rows += [[] for _ in pre] + [[q0] for _ in extra]
        ranks = {0: [_ranks(p_first)]} if predraft is not None else {}
        ranks.update({s: [] for s in pre})
        limit = [steps] + [predraft.depth for _ in pre] + [steps for _ in extra]
        self._fork(len(extra), 1 + len(pre))
        ready = dict(enumerate(rows0))
        todo = [(c, s) for s, c in enumerate(extra, 1 + len(pre))] if steps > 1 else []
        while todo or ready:
            for s, row in ready.items():
                if len(seqs[s]) < limit[s] and (s in pre or not (stop and stop.is_set())):
                    tok, q = pick(row, seqs[s], bases.get(s))
                    if tok is None:
                        continue
                    if s in ranks:  # greedy: the adjusted row's ranks
                        p = q if q is not None else _masked_softmax(
                            adjusted(row, seqs[s], bases.get(s)), mask)
                        ranks[s].append(_ranks(p))
                    seqs[s].append(tok)
                    rows[s].append(q)
                    if len(seqs[s]) < limit[s]:
                        todo.append((tok, s))
            ready = dict(zip([s for _, s in todo], self._decode_batch(todo))) if todo else {}
            todo = []
        return seqs, rows, ranks, ranking, float(p_first[ranking[0]]), pre

    def _fork_predrafts(self, predraft: Plan | None, context: list[int]) -> tuple[dict, dict]:
        """Sequences 1..p for the plan's outcomes, each sharing seq 0's prefix before the
        pending token it replaces (same tokenizer: draft and target positions agree):
        {seq: (j, a)}, and {seq: the target context its draft follows}."""
        self.branch_base, self.branches = {}, {}
        if not predraft:
            return {}, {}
        pre, bases = {}, {}
        for s, (j, a) in enumerate(predraft.outcomes[:self.max_seqs - 1], 1):
            cut = len(context) - predraft.pending + j
            C.llama_memory_seq_cp(self.ctx.memory, 0, s, 0, cut)
            self.branch_base[s], self.branches[s] = cut, []
            pre[s], bases[s] = (j, a), context[:cut] + [a]
        return pre, bases

    def _fork(self, n_extra: int, first: int = 1) -> None:
        """Sequences first..first+n_extra-1 share the prefix (all but seq 0's first draft token)."""
        base = len(self.tokens) - 1
        for j in range(first, first + n_extra):
            C.llama_memory_seq_cp(self.ctx.memory, 0, j, 0, base)
            self.branch_base[j], self.branches[j] = base, []

    def _settle_branches(self, ids: list[int]) -> None:
        """Drop every branch but sequence 0; when another branch matches the new context
        better, sequence 0 is cut back to that branch's fork and _sync re-evaluates the
        winner's tokens in one batched decode (copying a branch's cells into sequence 0 with
        seq_cp gave wrong logits afterwards in llama.cpp 0.3.36's unified cache)."""
        have = common_prefix(self.tokens, ids)
        better = [base for s, base in self.branch_base.items()
                  if common_prefix(self.tokens[:base] + self.branches[s], ids) > have]
        C.llama_memory_seq_keep(self.ctx.memory, 0)
        self.branches, self.branch_base = {}, {}
        if better:
            self.rollback(min(better))


def _masked_softmax(logits: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    return softmax(logits)


def _ranks(p: np.ndarray, k: int = 4) -> tuple[list[int], list[float]]:
    """The k most likely ids of a probability row and their probabilities (for pre-drafting);
    a cut at 1/1000 of the top keeps the sort small."""
    near = np.flatnonzero(p >= p.max() * 1e-3)
    top = near[np.argsort(-p[near], kind="stable")[:k]] if len(near) <= 4096 else top_ids(p, k)
    return [int(t) for t in top], [float(p[t]) for t in top]
