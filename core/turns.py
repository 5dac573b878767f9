"""duo in turns: where the target shares the draft's cores (a CPU target), a round may be
faster as the draft's chunk on every core, then its verify on every core (sps's way), than as
the two side by side on half the cores each. The loader prices both schedules for the pair
and the machine before each generation (`choose`); `turns_loop` runs this one. The lookup
drafts here as in the overlapped schedule (core/fusion.py): its continuation alone where
that prices above drafting the model's chunk (the draft then skips the round), or the model's
chunk extended by it."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

from core.backends import Draft, Drafter
from core.budget import DraftBudget, Profile
from core.fusion import LOOKUP_MAX, MARGIN, Pick
from core.learned import Learned
from core.output import Event
from core.rounds import TOGETHER, close_worker, draft_worker, prefill_draft, round_alone
from core.scheduler import Drafted

TURNS = "duo-turns"  # the turns budget's key in Learned.budgets (duo's own: "duo")


@dataclass(frozen=True)
class Schedule:
    """What a duo generation runs: `kind` overlap or turns, and why (the stats say it)."""
    kind: str
    reason: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "reason": self.reason}


def choose(learned: Learned, overlap: Profile, turns: Profile, gamma: int | None) -> Schedule:
    """The schedule whose budget prices more tokens/s: each from its own profile (the thread
    split it runs on) and timing scales, both at the acceptance the newest duo generation
    learned (the draft's acceptance does not depend on the schedule)."""
    alpha = learned.latest_alpha(("duo", TURNS))
    rates = {"overlap": learned.budget("duo", overlap, True, gamma).best_rate(alpha),
             "turns": learned.budget(TURNS, turns, False, gamma).best_rate(alpha)}
    kind = max(rates, key=rates.get)
    other = "turns" if kind == "overlap" else "overlap"
    shown = "the default acceptance" if alpha is None else f"acceptance {alpha:.2f}"
    return Schedule(kind, f"{kind}: {rates[kind]:.1f} tok/s priced against {rates[other]:.1f} "
                          f"in {other}, at {shown}")


def turns_loop(run, drafter: Drafter, budget: DraftBudget) -> Iterator[Event]:
    """Each round: the lookup's continuation where it prices above the model's chunk, else
    the model's chunk (fused with the lookup where that pays), then the verify. A long
    prompt's draft prefill (every core) waits for the draft's first chunk: until then the
    lookup goes first wherever it prices above the target alone, so a copying answer starts
    without it (on copy-heavy prompts 0.92x the wall of the draft's prefill first, 2-core
    Intel Xeon); a short one's goes first, so the target's prefill verifies a chunk."""
    worker = draft_worker(run, drafter, sequential=True)
    try:
        ready = not run.cfg.prefill_threads
        if not ready and len(run.ctx) - run.target.n_cached <= TOGETHER:
            prefill_draft(run, drafter, worker)
            ready = True
        while True:
            start = time.perf_counter()
            gamma = 0 if worker.failed else run.draft_room(budget.gamma)
            pick = _lookup_first(run, budget, gamma if ready else 0)
            if pick is not None:
                yield round_alone(run, budget, start, pick)
                continue
            if not ready:
                prefill_draft(run, drafter, worker)
                ready = True
            chunk = worker.inline(run.ctx, gamma) if gamma else Drafted.nothing()
            draft = chunk.proposal.main
            pick = Pick(draft, "model" if len(draft) else "plain")
            if run.lookup is not None and len(draft):
                pick = run.lookup.pick(run, budget, draft, beside=False, solo=False)
            verdict, vspan = run.verify(pick.draft)
            run.telemetry.drafting(pick.draft, pick.source, pick.offered)
            run.telemetry.sps_round(budget, start, chunk, vspan, verdict)
            yield run.commit(pick.draft, verdict)
    finally:
        close_worker(run, worker)


def _lookup_first(run, budget: DraftBudget, gamma: int) -> Pick | None:
    """The lookup's continuation instead of this round's model chunk: whenever it proposes
    under lookup 'on'; under 'auto' where its best length prices above the chunk of `gamma`
    (its drafting included; 0: the target alone) by MARGIN."""
    lookup = run.lookup
    found = lookup.proposal(run, [], run.draft_room(LOOKUP_MAX)) if lookup else None
    if not found:
        return None
    if lookup.mode != "on":
        rate, n = lookup.best_length(budget, [], found, False, 0.0)
        if rate <= budget.expected_rate(gamma) * (1 + MARGIN):
            return None
        found = found.cut(n)
    return Pick(Draft().plus(found, lookup.sampled), "lookup", True)
