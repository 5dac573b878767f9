"""The engine's round helpers: a round without the model's draft (plain, or the lookup's),
the policies a `duo` round consults, and the draft worker's start and end."""
from __future__ import annotations

from core.backends import Draft, Drafter, Plan
from core.branching import BranchPolicy
from core.budget import DraftBudget, Profile
from core.fusion import Pick
from core.output import Event
from core.predraft import PredraftPolicy
from core.scheduler import DraftWorker


def flat_profile() -> Profile:
    """Used when nothing was measured: verification cost grows slowly with length."""
    return Profile(draft_token_s=0.005, verify_s=[0.02 + 0.001 * n for n in range(32)])


def plain_round(run, budget: DraftBudget, start: float) -> Event:
    """One round without the model's draft, the worker idle: the lookup's continuation when
    it pays (run.lookup), else one target token (the budget fell back to plain decoding)."""
    pick = run.lookup.pick(run, budget, Draft(), beside=False) if run.lookup else None
    if pick is None or pick.source == "plain":
        pick = Pick(Draft(), "plain", bool(pick and pick.offered))
    draft = pick.draft
    verdict, vspan = run.verify(draft)
    run.telemetry.drafting(draft, pick.source, pick.offered)
    run.learn(budget, run.telemetry.idle_round(budget, start, vspan, verdict))
    return run.commit(draft, verdict)


def draft_worker(run, drafter: Drafter, sequential: bool) -> DraftWorker:
    """The generation's draft worker; `sequential`: it drafts on the caller's thread."""
    return DraftWorker(drafter, run.cfg.sampling, run.cfg.seed, sequential=sequential,
                       timeout_s=run.cfg.draft_timeout_s, sampler=run.cfg.sampler,
                       adjust=run.adjust and run.adjust.for_draft())


def close_worker(run, worker: DraftWorker) -> None:
    """End the draft thread; its failures become warnings and mark the draft for a reset."""
    run.learned.busy_draft = worker.close()
    run.learned.reset_draft |= worker.failed
    for message in worker.warnings:
        run.telemetry.warn(message)
    run.telemetry.settle_dropped()


def branch_policy(run, budget: DraftBudget) -> BranchPolicy | None:
    cfg = run.cfg
    if not (cfg.multi_seq or cfg.static_k):
        return None
    return BranchPolicy(cfg.max_seqs, cfg.theta_scale, cfg.static_k,
                        budget.profile.draft_step_s, alpha=budget.alpha, odds=run.odds)


def predraft_policy(run, budget: DraftBudget) -> PredraftPolicy | None:
    return PredraftPolicy(budget.profile.draft_step_s, run.odds) if run.cfg.predraft else None


def predraft_plan(run, policy: PredraftPolicy | None, budget: DraftBudget, draft: Draft,
         branching: BranchPolicy | None) -> Plan | None:
    """What to pre-draft during this verify; None: pre-drafting is off, or no plan could pay
    now (drafts carry no ranks; the next round's plan is empty). A lookup's tokens carry no
    ranks: only the model's part of a fused draft is pre-drafted for."""
    if policy is None:
        return None
    seqs = (branching.static_k or 1) if branching is not None else 1
    room = run.draft_room(policy.max_depth, len(draft))
    if not policy.may_pay(budget, room, seqs):
        return None
    return policy.plan(draft, budget, room, seqs)
