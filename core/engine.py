"""The decoding methods: `vanilla` (target only, the oracle), `sps` (draft then verify) and
`duo` (draft the next chunk while the target verifies this one). Each is a generator of
Events, so streaming is free."""
from __future__ import annotations

import time
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator


from core.backends import Draft, Drafter, Target
from core.branching import BranchPolicy, FirstTokenOdds, step_ratio
from core.budget import DraftBudget, Profile
from core.metrics import GenerationStats, RoundRecord
from core.output import Event, Output
from core.sampling import PositionRng, SamplingConfig
from core.scheduler import DraftWorker
from core.verify import Verdict, verify_greedy, verify_sampled

METHODS = ("vanilla", "sps", "duo")
VERIFY_STREAM = 0  # the draft worker uses stream 1


@dataclass
class GenConfig:
    method: str = "duo"
    max_new_tokens: int = 128
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    gamma: int | None = None  # None: the hardware-aware budget picks it
    stop_strings: tuple[str, ...] = ()
    sequential: bool = False  # duo only: same rounds, no overlap
    multi_seq: bool = True  # duo only: dynamic multi-sequence drafting
    max_seqs: int = 4
    theta_scale: float = 1.0  # theta = p(1,1) * p(2,1) * theta_scale
    static_k: int | None = None  # always k sequences (comparison)
    prefill_threads: int = 0  # >0: prefills run alone on this many threads (duo: both; sps: draft)

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method '{self.method}'; known: {', '.join(METHODS)}")
        if self.max_new_tokens <= 0:
            raise ValueError(f"--max-new-tokens must be > 0, got {self.max_new_tokens}")
        if self.gamma is not None and not 1 <= self.gamma <= 64:
            raise ValueError(f"gamma must be 'auto' or 1..64, got {self.gamma}")
        if not 1 <= self.max_seqs <= 8:
            raise ValueError(f"--max-seqs must be 1..8, got {self.max_seqs}")
        if self.theta_scale <= 0:
            raise ValueError(f"--theta-scale must be > 0, got {self.theta_scale}")
        if self.static_k is not None and not 1 <= self.static_k <= 8:
            raise ValueError(f"--static-k must be 1..8, got {self.static_k}")
        self.sampling.validate()


class Run:
    """One generation: the context, the output, the stats, and the verify step."""

    def __init__(self, target: Target, prompt: list[int], cfg: GenConfig,
                 decode: Callable[[list[int]], str], odds: FirstTokenOdds | None = None):
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
        self.rng_at = PositionRng(cfg.seed, VERIFY_STREAM)
        self.t0 = time.perf_counter()
        self.last_scored = 0
        self.odds = odds if odds is not None else FirstTokenOdds()
        target.rollback(0)

    def verify(self, draft: Draft) -> tuple[Verdict, tuple[float, float]]:
        """One target forward over the uncached context plus the draft; rolls the target's
        cache back to the verified prefix."""
        t0 = time.perf_counter()
        new = self.ctx[self.target.n_cached:] + draft.tokens
        self.last_scored = len(new)
        scores = self.target.score(new, len(draft) + 1, self.cfg.sampling)
        if self.cfg.sampling.greedy:
            verdict = verify_greedy(draft.tokens, scores.choice)
        else:
            verdict = verify_sampled(draft.tokens, draft.q_draft, scores.p_target, self.rng_at,
                                     base=len(self.ctx))
        self.target.rollback(len(self.ctx) + verdict.accepted)
        t1 = time.perf_counter()
        self.stats.target_busy_s += t1 - t0
        return verdict, (t0, t1)

    def commit(self, draft: Draft, verdict: Verdict) -> Event:
        new = draft.tokens[:verdict.accepted] + [verdict.token]
        self.ctx += new
        ev = self.out.push(new, ["draft"] * verdict.accepted + ["target"])
        if not self.stats.ttft_s and ev.tokens:
            self.stats.ttft_s = time.perf_counter() - self.t0
        return ev

    def finish(self, last: Event) -> Event:
        s = self.stats
        s.wall_s = time.perf_counter() - self.t0
        s.new_tokens = len(self.out.ids)
        s.stop_reason = self.out.reason or "stopped"
        last.done, last.stats = True, s.to_dict()
        return last

    def draft_room(self, gamma: int, ahead: int = 0) -> int:
        """Never draft past what may still be emitted or past the target's window; `ahead`:
        draft tokens already pending before this chunk (duo drafts from ctx + draft)."""
        room = min(self.out.remaining - 1, self.target.n_ctx - len(self.ctx) - 2) - ahead
        return max(0, min(gamma, room))


def generate(target: Target, drafter: Drafter | None, prompt: list[int], cfg: GenConfig,
             decode: Callable[[list[int]], str], profile: Profile | None = None,
             stop: Callable[[], bool] | None = None,
             odds: FirstTokenOdds | None = None) -> Iterator[Event]:
    """Yield Events as tokens are verified; the last one has done=True and the stats.
    `stop()` turning true ends the generation after the event just yielded (reason
    'stopped'), still with the stats. `odds`: first-token odds learned by earlier
    generations of this pair (multi-sequence drafting), updated in place."""
    run = Run(target, prompt, cfg, decode, odds)
    if cfg.method != "vanilla" and drafter is None:
        raise ValueError(f"method '{cfg.method}' needs a draft model")
    loop = {"vanilla": _vanilla, "sps": _sps, "duo": _duo}[cfg.method]
    budget = None
    if cfg.method != "vanilla":
        budget = DraftBudget(profile or _flat_profile(), overlap=cfg.method == "duo",
                             fixed=cfg.gamma)
        run.stats.gamma = cfg.gamma or "auto"
    last = Event()
    with closing(loop(run, drafter, budget)) as events:  # closing joins the draft worker
        for ev in events:
            if ev.done:
                last = ev
                break
            yield ev
            if stop is not None and stop():
                last = run.out.stop()
                break
    if budget is not None:
        run.stats.gamma_profile = budget.explain()
    yield run.finish(last)


def _flat_profile() -> Profile:
    """Used when nothing was measured: verification cost grows slowly with length."""
    return Profile(draft_token_s=0.005, verify_s=[0.02 + 0.001 * n for n in range(32)])


def _vanilla(run: Run, drafter, budget) -> Iterator[Event]:
    empty = Draft()
    while True:
        verdict, span = run.verify(empty)
        run.stats.rounds += 1
        yield run.commit(empty, verdict)


def _sps(run: Run, drafter: Drafter, budget: DraftBudget) -> Iterator[Event]:
    worker = DraftWorker(drafter, run.cfg.sampling, run.cfg.seed, sequential=True)
    if run.cfg.prefill_threads:
        _prefill_draft(run, drafter, worker)
    while True:
        start = time.perf_counter()
        gamma = run.draft_room(budget.gamma)
        draft = worker.submit(run.ctx, gamma).result() if gamma else Draft()
        run.stats.plain_rounds += budget.gamma == 0
        run.stats.draft_busy_s += draft.busy_s
        verdict, vspan = run.verify(draft)
        rec = _record(run, start, draft.span if draft else (start, start), vspan, len(draft),
                      verdict.accepted)
        _observe(run, budget, rec, len(draft), verdict.accepted, draft)
        yield run.commit(draft, verdict)


def _duo(run: Run, drafter: Drafter, budget: DraftBudget) -> Iterator[Event]:
    """While the target verifies `draft`, the worker drafts the next chunk from
    ctx + draft: its first token guesses the target's own next token. When every draft token
    passes and the guess matches, the rest of the chunk is the next round's draft; otherwise
    the chunk is dropped and the next round verifies no draft (one target token) while the
    worker drafts afresh from the verified context."""
    worker = DraftWorker(drafter, run.cfg.sampling, run.cfg.seed, sequential=run.cfg.sequential)
    branching = _branch_policy(run, budget)
    draft, dropped = Draft(), []
    try:
        if run.cfg.prefill_threads:  # cores are shared: the prefills first, with all of them
            ev = _prefill_alone(run, budget)
            yield ev
            if ev.done:
                return
            _prefill_draft(run, drafter, worker)
        while True:
            start = time.perf_counter()
            if not draft and budget.gamma == 0:  # the budget says drafting cannot pay
                ev = _plain_round(run, budget, start)
                yield ev
                if ev.done:
                    return
                continue
            size = budget.gamma + 1 if draft else budget.empty_chunk()
            job = worker.submit(run.ctx + draft.tokens, run.draft_room(size, len(draft)),
                                branching=branching)
            verdict, vspan = run.verify(draft)
            ev = run.commit(draft, verdict)
            if ev.done or not verdict.bonus(len(draft)):
                job.cancel()
                dropped.append((_record(run, start, (start, start), vspan, len(draft),
                                        verdict.accepted), job))
                _observe(run, budget, dropped[-1][0], len(draft), verdict.accepted, None)
                draft = Draft()
            else:
                chunk = job.result()
                run.stats.draft_busy_s += chunk.busy_s
                branch = chunk.branch_for(verdict.token)
                rec = _record(run, start, chunk.span, vspan, len(draft), verdict.accepted)
                rec.seqs = chunk.n_seqs
                _count_seqs(run.stats, run.odds, chunk, verdict.token)
                _observe(run, budget, rec, len(draft) + 1, verdict.accepted + bool(branch), chunk)
                draft = branch.tail(1) if branch else Draft()
            yield ev
            if ev.done:
                return
    finally:
        worker.close()
        _settle_dropped(run, dropped)


def _plain_round(run: Run, budget: DraftBudget, start: float) -> Event:
    """One target token, no draft (the budget fell back to plain decoding)."""
    verdict, vspan = run.verify(Draft())
    run.stats.plain_rounds += 1
    _observe(run, budget, _record(run, start, (start, start), vspan, 0, 0), 0, 0, None)
    return run.commit(Draft(), verdict)


def _branch_policy(run: Run, budget: DraftBudget) -> BranchPolicy | None:
    cfg = run.cfg
    if not (cfg.multi_seq or cfg.static_k):
        return None
    return BranchPolicy(cfg.max_seqs, cfg.theta_scale, cfg.static_k,
                        budget.profile.draft_step_s, alpha=budget.alpha, odds=run.odds)


def _count_seqs(stats: GenerationStats, odds: FirstTokenOdds, chunk: Draft,
                target_token: int) -> None:
    """Sequences per round (Figure 5) and sequences vs the target token's draft rank (Table 4);
    the rank also teaches the first-token odds."""
    stats.seq_hist[chunk.n_seqs] += 1
    if not chunk.first_ranking:
        return
    rank = chunk.rank_of(target_token)
    row, key = stats.seq_confusion.setdefault(str(chunk.n_seqs), {}), str(rank or "other")
    row[key] = row.get(key, 0) + 1
    odds.observe(chunk.first_top_p, rank)


@contextmanager
def _threads(backend: Target | Drafter, n: int) -> Iterator[None]:
    """Run the block with n threads on `backend`, then give back its own count."""
    prev = backend.set_threads(n)
    try:
        yield
    finally:
        backend.set_threads(prev)


def _prefill_alone(run: Run, budget: DraftBudget) -> Event:
    with _threads(run.target, run.cfg.prefill_threads):
        verdict, vspan = run.verify(Draft())
    _record(run, vspan[0], (vspan[0], vspan[0]), vspan, 0, 0)
    run.stats.gammas_used[budget.gamma] += 1
    return run.commit(Draft(), verdict)


def _prefill_draft(run: Run, drafter: Drafter, worker: DraftWorker) -> None:
    """The draft's prompt prefill with all cores too (a long prompt at one thread would
    leave the target decoding alone, token by token, for seconds)."""
    with _threads(drafter, run.cfg.prefill_threads):
        done = worker.submit(run.ctx, 0).result()
    run.stats.draft_busy_s += done.busy_s
    _record(run, done.span[0], done.span, (done.span[0], done.span[0]), 0, 0)


def _settle_dropped(run: Run, dropped: list) -> None:
    """Dropped chunks still took draft time: put their real spans in the timeline."""
    for rec, job in dropped:
        chunk = job.result()
        run.stats.draft_busy_s += chunk.busy_s
        rec.draft_span = (chunk.span[0] - run.t0, chunk.span[1] - run.t0)


def _record(run: Run, start: float, dspan, vspan, drafted: int, accepted: int) -> RoundRecord:
    t0 = run.t0
    rec = RoundRecord(start - t0, time.perf_counter() - t0, (dspan[0] - t0, dspan[1] - t0),
                      (vspan[0] - t0, vspan[1] - t0), drafted, accepted)
    run.stats.record_round(rec)
    return rec


def _observe(run: Run, budget: DraftBudget, rec: RoundRecord, trials: int, passed: int,
             chunk: Draft | None) -> None:
    """Feed the budget one round: pass rate, draft time per token (without catching up with
    the context, a k-sequence step counted as its cost in single steps), verify time per
    length (a prefill round is no sample of verify time)."""
    run.stats.gammas_used[budget.gamma] += 1
    scored = run.last_scored if run.last_scored == rec.drafted + 1 else 0
    n = len(chunk) * step_ratio(budget.profile.draft_step_s, chunk.n_seqs) if chunk else 0
    budget.observe(trials, passed, draft_s=chunk.busy_s - chunk.sync_s if n else 0.0,
                   draft_n=n, verify_s=rec.verify_span[1] - rec.verify_span[0],
                   verify_n=scored)
