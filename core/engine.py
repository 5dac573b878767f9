"""The decoding methods: `vanilla` (target only, the oracle), `sps` (draft then verify), `duo`
(draft the next chunk while the target verifies this one; with the suffix index's lookup
fused in, core/fusion.py) and `lookup` (the target and the index alone). Each is a generator
of Events, so streaming is free; core/telemetry.py gathers the stats beside them. Where the
target shares the draft's cores (a CPU target) duo runs sps's loop with the lookup."""
from __future__ import annotations

import time
from contextlib import closing
from typing import Callable, Iterator

from core.align import common_prefix
from core.backends import Draft, Drafter, SampleCheck, Target, TargetOutOfMemory
from core.budget import DraftBudget, Profile
from core.config import METHOD, METHODS, GenConfig  # noqa: F401 - callers import them here
from core.constraints import Grammar, Penalties, adjuster
from core.fusion import LookupPolicy
from core.logprobs import emitted
from core.learned import Learned
from core.metrics import GenerationStats
from core.output import Event, Output
from core.rounds import (branch_policy, close_worker, draft_worker, flat_profile, plain_round,
                         predraft_plan)
from core.rounds import predraft_policy as _predraft_policy  # tests force plans through it
from core.sampling import Noise
from core.suffix import ContextLookup, SuffixMemory
from core.telemetry import Lesson, Telemetry
from core.verify import Verdict, verify_greedy, verify_sampled


# a prompt token's prefill against a draft decode step (llama.cpp on one AMD EPYC core:
# 700 tokens in 1.4 s on the Q8_0 copy against 6.4 ms a decoded token)
PREFILL_TOKEN_SHARE = 0.3


class Run:
    """One generation: the context, the output, the stats, what earlier generations learned,
    the lookup (duo and lookup: the suffix index over the context and `lookup_memory`), and
    the verify step."""

    def __init__(self, target: Target, prompt: list[int], cfg: GenConfig,
                 decode: Callable[[list[int]], str], learned: Learned | None = None,
                 grammar: Grammar | None = None, lookup_memory: SuffixMemory | None = None):
        cfg.validate()
        if not prompt:
            raise ValueError("the prompt is empty")
        self.target, self.cfg = target, cfg
        self.ctx = list(prompt)
        room = target.n_ctx - len(prompt)  # the target's cache holds no more
        self.out = Output(decode, target.eos_ids, min(cfg.max_new_tokens, room), cfg.stop_strings)
        if room < cfg.max_new_tokens:
            self.out.limit_reason = "context_window"
        self.stats = GenerationStats(method=cfg.method)
        self.noise = Noise(cfg.seed)
        penalties = Penalties(dict(cfg.logit_bias), cfg.presence_penalty, cfg.frequency_penalty)
        self.adjust = adjuster(len(prompt), grammar, penalties, cfg.logprobs)
        self.logprobs = None  # the last verify's, for commit
        self.t0 = time.perf_counter()
        self.learned = learned if learned is not None else Learned()
        self.odds = self.learned.odds
        self.telemetry = Telemetry(self.stats, self.t0)
        self.lookup: LookupPolicy | None = None
        if cfg.uses_lookup:
            self.lookup = LookupPolicy(ContextLookup(prompt, lookup_memory),
                                       self.learned.bands(cfg.method), cfg.lookup,
                                       sampled=not cfg.sampling.greedy)
        keep = cached_prefix(target, prompt) if cfg.cache_prompt else 0
        target.rollback(keep)
        self.stats.prompt_tokens, self.stats.cached_tokens = len(prompt), keep

    def learn(self, budget: DraftBudget, lesson: Lesson) -> None:
        """A round's lesson to the learners that own it: the draft budget, the lookup's
        bands, the first-token odds."""
        budget.observe(lesson.trials, lesson.passed, draft_s=lesson.draft_s, draft_n=lesson.draft_n,
                       verify_s=lesson.verify_s, verify_n=lesson.verify_n)
        if lesson.band is not None:
            self.lookup.bands.observe(*lesson.band)
        if lesson.rank is not None:
            self.odds.observe(*lesson.rank)

    def verify(self, draft: Draft) -> tuple[Verdict, tuple[float, float]]:
        """One target forward over the uncached context plus the draft; rolls the target's
        cache back to the verified prefix."""
        t0 = time.perf_counter()
        new = self.ctx[self.target.n_cached:] + draft.tokens
        cfg, check = self.cfg, None
        if not cfg.sampling.greedy:
            coupled = cfg.sampler == "coupled"
            check = SampleCheck(draft.tokens, None if coupled else draft.q_draft, self.noise,
                                len(self.ctx), coupled)
        adjust = self.adjust and self.adjust.for_verify(self.ctx, draft.tokens)
        scores = self.target.score(new, len(draft) + 1, cfg.sampling, check,
                                   **({"adjust": adjust} if adjust else {}))
        if scores.choice is not None:  # greedy, or the coupled sampler's draws
            verdict = verify_greedy(draft.tokens, scores.choice)
        else:
            verdict = verify_sampled(draft.tokens, draft.q_draft, scores, self.noise,
                                     base=len(self.ctx))
        self.logprobs = scores.logprobs
        self.target.rollback(len(self.ctx) + verdict.accepted)
        t1 = time.perf_counter()
        self.telemetry.verified(len(new), t1 - t0)
        return verdict, (t0, t1)

    def commit(self, draft: Draft, verdict: Verdict) -> Event:
        new = draft.tokens[:verdict.accepted] + [verdict.token]
        self.ctx += new
        lp = None if self.logprobs is None else emitted(self.logprobs, draft.tokens,
                                                        verdict.accepted, verdict.token)
        if self.lookup is not None:
            self.lookup.extend(new)
        ev = self.out.push(new, draft.sources()[:verdict.accepted] + ["target"], lp)
        self.telemetry.emitted(ev.tokens, ev.sources)
        return ev

    def finish(self, last: Event) -> Event:
        s = self.stats
        s.wall_s = time.perf_counter() - self.t0
        s.new_tokens = len(self.out.ids)
        s.stop_reason = self.out.reason or "stopped"
        last.done, last.stats = True, s.to_dict()
        return last

    @property
    def prefilling(self) -> bool:
        """Whether the next verify prefills the prompt (more than one token is uncached)."""
        return len(self.ctx) - self.target.n_cached > 1

    def draft_room(self, gamma: int, ahead: int = 0) -> int:
        """Never draft past what may still be emitted or past the target's window; `ahead`:
        draft tokens already pending before this chunk (duo drafts from ctx + draft)."""
        room = min(self.out.remaining - 1, self.target.n_ctx - len(self.ctx) - 2) - ahead
        return max(0, min(gamma, room))


def generate(target: Target, drafter: Drafter | None, prompt: list[int], cfg: GenConfig,
             decode: Callable[[list[int]], str], profile: Profile | None = None,
             stop: Callable[[], bool] | None = None, learned: Learned | None = None,
             grammar: Grammar | None = None, lookup_memory: SuffixMemory | None = None,
             shared_cores: bool = False) -> Iterator[Event]:
    """Yield Events as tokens are verified; the last one has done=True and the stats. `stop()`
    turning true ends the generation after the event just yielded (reason 'stopped'), still with the
    stats. `learned`: what earlier generations of this pair learned (budget, first-token odds, draft
    health, lookup bands), updated in place. The target keeps what it holds of the prompt
    (cfg.cache_prompt). `grammar`: cfg.response_format compiled (models/grammar.py), fresh for this
    generation. `lookup_memory`: earlier requests the lookup consults beside this context (read
    only). `shared_cores`: the target runs on the draft's cores, so duo drafts, then verifies (sps's
    loop, with the lookup) instead of the two side by side."""
    learned = learned if learned is not None else Learned()
    does = METHOD[cfg.method]
    if does.drafts and drafter is None:
        raise ValueError(f"method '{cfg.method}' needs a draft model")
    run = Run(target, prompt, cfg, decode, learned, grammar, lookup_memory)
    overlap = does.overlaps and not shared_cores
    loop = {"vanilla": _vanilla, "sps": _sps, "duo": _duo if overlap else _sps,
            "lookup": _lookup}[cfg.method]
    key, budget = cfg.method, None
    if does.budgeted:
        budget = learned.budget(key, profile or flat_profile(), overlap=overlap, fixed=cfg.gamma)
        run.stats.gamma = cfg.gamma or "auto"
        loop = loop if not does.drafts or _draft_ready(run, drafter) else _vanilla
    try:
        last = yield from _events(run, loop(run, drafter, budget), stop)
    except Exception as e:
        if not TargetOutOfMemory.caused(e):
            raise
        target.rollback(0)
        raise TargetOutOfMemory(
            f"the target ran out of memory after {len(run.out.ids)} new tokens "
            f"({len(run.ctx)} in context): try a shorter prompt or fewer new tokens, or load "
            "the pair with a smaller target precision (--target-quant int8 or int4)") from e
    if budget is not None:
        learned.keep(key, budget)
        run.stats.gamma_profile = budget.explain()
    yield run.finish(last)


def cached_prefix(target: Target, prompt: list[int]) -> int:
    """Prompt tokens whose KV the target already holds (a chat's next turn starts with the
    last one); the last prompt token is always computed again, for its logits."""
    return max(0, min(common_prefix(target.cached_ids, prompt), len(prompt) - 1))


def _events(run: Run, loop: Iterator[Event], stop: Callable[[], bool] | None):
    """Yield the loop's events until one is done or `stop()` turns true; returns the last."""
    with closing(loop) as events:  # closing joins the draft worker
        for ev in events:
            if ev.done:
                return ev
            yield ev
            if stop is not None and stop():
                return run.out.stop()
    return Event()


def _draft_ready(run: Run, drafter: Drafter) -> bool:
    """After a draft failure: a fresh draft state, or the target alone while it still hangs."""
    learned = run.learned
    if not learned.draft_free():
        run.telemetry.warn("the draft is still busy after an earlier failure; the target ran "
                           "alone")
        return False
    if learned.reset_draft or not run.cfg.cache_prompt:  # cold: the draft forgets too
        drafter.rollback(0)
        learned.reset_draft = False
    return True


def _vanilla(run: Run, drafter, budget) -> Iterator[Event]:
    empty = Draft()
    while True:
        verdict, span = run.verify(empty)
        run.telemetry.vanilla_round()
        yield run.commit(empty, verdict)


def _lookup(run: Run, drafter, budget: DraftBudget) -> Iterator[Event]:
    """The target and the suffix index alone (no draft model): each round verifies the
    index's continuation when the budget says it pays, else one target token."""
    while True:
        yield plain_round(run, budget, time.perf_counter())


def _long_prefill(run: Run, budget: DraftBudget) -> bool:
    """Whether the profile prices the draft's prompt prefill above a target forward."""
    p = budget.profile
    return len(run.ctx) * p.draft_token_s * PREFILL_TOKEN_SHARE > p.verify(1)


def _prefill_beside(run: Run, worker, budget: DraftBudget) -> Iterator[Event]:
    """A long prompt's draft prefill on its thread beside the target's prefill, the target
    going on a round at a time (a lookup's continuation or one token) until the draft has
    caught up, rather than wait for it; returns whether a round ended the generation."""
    job = worker.submit(run.ctx, 0)
    while True:
        ev = plain_round(run, budget, time.perf_counter())
        if ev.done or job.done() or job.overdue():
            break
        yield ev
    if ev.done:  # the prefill is not wanted: it stops between batches
        job.cancel()
    job.result()  # a draft that hung is a failure: the target goes on alone
    yield ev
    return ev.done


def _sps(run: Run, drafter: Drafter, budget: DraftBudget) -> Iterator[Event]:
    """Draft a chunk, then verify it. The first round is the target's prefill alone (the
    draft prefills at its first chunk), so the first token comes as soon as vanilla's. With
    the lookup (duo where the target shares the draft's cores) each round verifies the best
    of the chunk, the index's continuation and the two fused (core/fusion.py)."""
    worker = draft_worker(run, drafter, sequential=True)
    first = True
    try:
        while True:
            start = time.perf_counter()
            gamma = 0 if worker.failed or first else run.draft_room(budget.gamma)
            first = False
            if not gamma:
                yield plain_round(run, budget, start)
                continue
            chunk = worker.inline(run.ctx, gamma)
            draft = chunk.proposal.main
            if run.lookup is not None:
                pick = run.lookup.pick(run, budget, draft, beside=False)
                draft = pick.draft
                run.telemetry.drafting(draft, pick.source, pick.offered)
            verdict, vspan = run.verify(draft)
            run.learn(budget, run.telemetry.sps_round(budget, start, chunk, vspan, verdict,
                                                      len(draft)))
            yield run.commit(draft, verdict)
    finally:
        close_worker(run, worker)


def _duo(run: Run, drafter: Drafter, budget: DraftBudget) -> Iterator[Event]:
    """While the target verifies `draft`, the worker drafts the next chunk from ctx + draft: its
    first token guesses the target's own next token. When every draft token passes and the guess
    matches, the rest of the chunk is the next round's draft. The worker also pre-drafts from ctx +
    draft[:j] + a for likely rejections at j by the target's `a` (the policy prices them): when the
    verdict is one of them, its pre-draft is the next draft; otherwise the chunk is dropped and the
    next round verifies no draft (one target token) while the worker drafts afresh from the verified
    context. With the lookup (core/fusion.py) each round may verify the index's continuation
    instead, or the chunk extended by it. The worker drafts after the model's part only: its chunk
    is the next draft when it wrote what the target kept past that part (the lookup's tokens that
    passed and the target's own), so a lookup that misses leaves the model's chunk ready."""
    worker = draft_worker(run, drafter, sequential=run.cfg.sequential)
    branching, telemetry = branch_policy(run, budget), run.telemetry
    predraft = _predraft_policy(run, budget)
    draft, short = Draft(), False
    try:
        # a short prompt: the first round verifies no draft while the worker prefills and
        # drafts its first chunk
        if _long_prefill(run, budget) and (yield from _prefill_beside(run, worker, budget)):
            return
        while True:
            start = time.perf_counter()
            if branching is not None:  # the policy prices sequences with the learned alpha
                branching.alpha = budget.alpha
            if worker.failed or (not draft and budget.gamma == 0):  # no draft, or it cannot pay
                ev = plain_round(run, budget, start)
                yield ev
                if ev.done:
                    return
                continue
            pick = run.lookup.pick(run, budget, draft, beside=True) if run.lookup else None
            if pick is not None and pick.draft is not draft:  # the lookup's, or fused
                draft, short = pick.draft, False
            size = budget.chunk_beside(len(draft), draft.n_lookup() > 0, short)
            model = draft[:draft.n_model()]  # the worker drafts after the model's part
            plan = predraft_plan(run, predraft, budget, model, branching)
            room = run.draft_room(size, len(model))
            guess = run.lookup.guess(run, budget, model.tokens, room) if run.lookup else []
            job = worker.submit(run.ctx + model.tokens, room, branching=branching,
                                predraft=plan, guess=guess)
            verdict, vspan = run.verify(draft)
            telemetry.drafting(draft, pick.source if pick else "model" if draft else "plain",
                               bool(pick and pick.offered))
            ev = run.commit(draft, verdict)
            n, passed, short = len(draft), verdict.bonus(len(draft)), False
            past = draft.tokens[len(model):verdict.accepted] + [verdict.token]
            reached = verdict.accepted >= len(model) and len(past) <= size and not ev.done
            rejected = not (passed or ev.done)
            pre = rejected and plan is not None and plan.covers(verdict.accepted, verdict.token)
            if pre:  # only the pre-draft is wanted: the main chunk stops
                job.cancel()
            chunk = job.result() if pre or reached else None
            if chunk is None or worker.failed:
                job.cancel()
                run.learn(budget, telemetry.chunk_dropped(budget, start, vspan, n, verdict, job))
                draft = Draft()
            elif reached:  # the model's part passed: the chunk goes on if it wrote the rest
                follow = chunk.proposal.follow(past)
                run.learn(budget, telemetry.chunk_used(budget, start, vspan, n, verdict, chunk,
                                                       hit=follow is not None))
                draft = follow or Draft()
            else:
                draft = chunk.proposal.predraft_for(verdict.accepted, verdict.token) or Draft()
                short = True
                run.learn(budget, telemetry.predraft_used(budget, start, vspan, n, verdict, chunk))
            telemetry.predrafted(plan, rejected, rejected and bool(draft), vspan)
            yield ev
            if ev.done:
                return
    finally:
        close_worker(run, worker)
