"""The engine's round helpers: a round without the model's draft (plain, or the lookup's alone),
the prefills, the policies a `duo` round consults, and the draft worker's end."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from core.backends import Draft, Drafter, Plan, Target
from core.branching import BranchPolicy
from core.budget import DraftBudget, Profile
from core.fusion import Pick
from core.output import Event
from core.predraft import PredraftPolicy
from core.scheduler import DraftJob, DraftWorker

CAUGHT_UP = 8  # tokens the draft may be behind when duo's rounds start (the first chunk syncs them)
# duo, shared cores: a prompt of at most this many new tokens prefills the target at its own
# count beside the draft's prefill (prefill_duo). On a 2-core Intel Xeon, smol-self: 36 to 83
# tokens 0.96-0.97x the wall of the target's prefill on every core first; 87 to 126 mixed;
# 170 to 613 1.01-1.06x (docs/draft.md#prompt-prefill). duo in turns (core/turns.py): such
# a prompt's draft prefills first, a longer one's at the draft's first chunk
TOGETHER = 96


def flat_profile() -> Profile:
    """Used when nothing was measured: verification cost grows slowly with length."""
    return Profile(draft_token_s=0.005, verify_s=[0.02 + 0.001 * n for n in range(32)])


def plain_round(run, budget: DraftBudget, start: float, solo: bool = True) -> Event:
    """One round without the model's draft: the lookup's continuation when it pays
    (run.lookup), else one target token (the budget fell back to plain decoding, or the draft
    is prefilling), on every core where the worker is idle. `solo` False: the worker is busy
    (no round on every core)."""
    pick = run.lookup.pick(run, budget, Draft(), beside=False, solo=solo) if run.lookup else None
    if pick is None or pick.source == "plain":
        pick = Pick(Draft(), "plain", bool(pick and pick.offered), solo and budget.solo)
    return round_alone(run, budget, start, pick)


def round_alone(run, budget: DraftBudget, start: float, pick: Pick) -> Event:
    """Verify `pick` with the worker idle; a solo pick on every core (the profile's count)."""
    draft = pick.draft
    with threads(run.target, budget.profile.solo_threads * pick.solo):
        verdict, vspan = run.verify(draft)
    run.telemetry.drafting(draft, pick.source, pick.offered)
    if len(draft):
        run.telemetry.lookup_alone(budget, start, vspan, verdict, pick.solo)
    else:
        run.telemetry.plain_round(budget, start, vspan, pick.solo)
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
    if not run.cfg.predraft:
        return None
    return PredraftPolicy(budget.profile.draft_step_s, run.odds)


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


@contextmanager
def threads(backend: Target | Drafter, n: int) -> Iterator[None]:
    """Run the block with n threads on `backend`, then give back its own count (0: as is)."""
    if not n:
        yield
        return
    prev = backend.set_threads(n)
    try:
        yield
    finally:
        backend.set_threads(prev)


def prefill_alone(run, budget: DraftBudget, n_threads: int | None = None) -> Event:
    """The target's prompt prefill (its first token) on `n_threads` (None: the prefill's
    count, every core; 0: the target's own)."""
    n = run.cfg.prefill_threads if n_threads is None else n_threads
    with threads(run.target, n):
        verdict, vspan = run.verify(Draft())
    run.telemetry.target_prefill(budget, vspan)
    return run.commit(Draft(), verdict)


def prefill_duo(run, worker: DraftWorker, budget: DraftBudget) -> Iterator[Event]:
    """duo's prefills where the draft and the target share the cores; returns whether a
    round ended the generation. A prompt of at most TOGETHER new tokens: the draft's prefill
    starts first, on its own thread(s), and the target's runs beside it at its own count
    (a short prefill gains little from every core); a longer one: the target's first, on
    every core. Either way the target goes on while the draft finishes (prefill_beside)."""
    together = len(run.ctx) - run.target.n_cached <= TOGETHER
    sent, job = len(run.ctx), worker.submit(run.ctx, 0) if together else None
    try:
        ev = prefill_alone(run, budget, 0 if together else None)
        yield ev  # closed here (GeneratorExit) when this token ended the generation
    except BaseException:  # the draft's prefill is not wanted: it ends within a batch
        _end(job)
        raise
    if ev.done:
        _end(job)
        return True
    return (yield from prefill_beside(run, worker, budget, job, sent))


def prefill_beside(run, worker: DraftWorker, budget: DraftBudget,
                   job: DraftJob | None = None, sent: int = 0) -> Iterator[Event]:
    """The draft's prompt prefill on its own thread(s) (`job`, submitted when the context
    was `sent` tokens long, or a new one) while the target goes on at its own count, a round
    at a time (the lookup's, or one token), then its catch-up with what the target wrote
    meanwhile, until it is at most CAUGHT_UP tokens behind (the next chunk's job syncs
    those); returns whether a round ended the generation. A copying answer gets on without
    waiting for the draft."""
    while True:
        if job is None:
            sent, job = len(run.ctx), worker.submit(run.ctx, 0)
        try:
            while not (job.done() or job.late()):  # a hung draft: the target goes on alone
                ev = plain_round(run, budget, time.perf_counter(), solo=False)
                yield ev
                if ev.done:
                    return True
        finally:  # closed at the event that ended it: the prefill is not wanted; it ends
            _end(job)  # within a batch, or by its timeout it is a hung draft
        run.telemetry.draft_prefill(job.result().timing)
        if worker.failed or len(run.ctx) - sent <= CAUGHT_UP:
            return False
        job = None


def _end(job: DraftJob | None) -> None:
    """Stop an unfinished job and wait for it."""
    if job is not None and not job.done():
        job.cancel()
        job.result()


def prefill_draft(run, drafter: Drafter, worker: DraftWorker) -> None:
    """`sps`'s draft prompt prefill, with all cores (the draft and the target take turns)."""
    with threads(drafter, run.cfg.prefill_threads):
        done = worker.submit(run.ctx, 0).result()
    run.telemetry.draft_prefill(done.timing)
