"""Statistics gathered beside the decoding loop: one call per round outcome records the round
into GenerationStats, counts sequences and ranks, and returns the round's Lesson: what the
draft budget, the lookup's bands and the first-token odds learn from it (Run.learn hands it
to them; Telemetry changes none of them)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from core.backends import Draft, Plan, Proposal
from core.branching import step_ratio
from core.budget import DraftBudget
from core.metrics import GenerationStats, RoundRecord
from core.scheduler import DraftJob, Drafted
from core.verify import Verdict


@dataclass
class Lesson:
    """One round's outcome as its learners read it: the model draft's trials and passes, the
    draft's time per single step, a verify's time where it sampled its length (verify_n 0:
    none); the lookup's confidences and passes (`band`); the draft's top first-token
    probability and the target token's rank among its candidates (`rank`)."""
    trials: int
    passed: int
    draft_s: float = 0.0
    draft_n: float = 0.0
    verify_s: float = 0.0
    verify_n: int = 0
    band: tuple[list[float], int, str] | None = None
    rank: tuple[float, int] | None = None


class Telemetry:
    """The engine's stats for one generation; times are perf_counter values, stored relative to
    the generation's start `t0`."""

    def __init__(self, stats: GenerationStats, t0: float):
        self.stats, self.t0 = stats, t0
        self.last_scored = 0  # tokens in the last target forward
        self._dropped: list[tuple[RoundRecord, DraftJob]] = []
        self._rejected_at: float | None = None  # when the last rejected round's verify ended
        self._band: tuple[list[float], int, str] | None = None  # this round's, for its Lesson
        self._rank: tuple[float, int] | None = None
        # this round's draft: its source, model tokens, lookup confidences, Lookup.source
        self._drafting: tuple[str, int, list[float], str] | None = None

    # -- every method ----------------------------------------------------------------------
    def verified(self, n_scored: int, busy_s: float) -> None:
        self.last_scored = n_scored
        self.stats.target_busy_s += busy_s
        if self._rejected_at is not None:  # the target's wait after a rejection
            began = time.perf_counter() - busy_s
            self.stats.rejection_idle_s += max(0.0, began - self._rejected_at)
            self._rejected_at = None

    def emitted(self, tokens: list[int], sources: list[str] = ()) -> None:
        if not self.stats.ttft_s and tokens:
            self.stats.ttft_s = time.perf_counter() - self.t0
        self.stats.lookup_emitted += list(sources).count("lookup")

    def drafting(self, draft: Draft, source: str, offered: bool) -> None:
        """What this round verifies (before its outcome is recorded): the draft's source
        (model, lookup, fused, plain) and whether the suffix index had a proposal."""
        n_lookup = draft.n_lookup()
        s = self.stats
        s.lookup_rounds += offered
        s.lookup_won += n_lookup > 0
        s.lookup_memory += n_lookup > 0 and draft.lookup_source == "memory"
        s.lookup_proposed += n_lookup
        conf = (draft.conf or [])[len(draft) - n_lookup:]
        self._drafting = (source, len(draft) - n_lookup, conf, draft.lookup_source)

    def vanilla_round(self) -> None:
        self.stats.rounds += 1

    # -- sps and duo -------------------------------------------------------------------------
    def sps_round(self, budget: DraftBudget, start: float, chunk: Drafted, vspan,
                  verdict: Verdict, drafted: int) -> Lesson:
        """Draft, then verify `drafted` tokens (the chunk, or what the lookup made of it): the
        draft's span and the verdict."""
        timing = chunk.timing
        rec = self.round(start, timing.span if drafted else (start, start), vspan, drafted,
                         verdict.accepted, timing.busy_s)
        return self.lesson(budget, rec, drafted, verdict.accepted, chunk)

    def chunk_used(self, budget: DraftBudget, start: float, vspan, drafted: int,
                   verdict: Verdict, chunk: Drafted, hit: bool) -> Lesson:
        """duo: the chunk drafted during the verify is kept; `hit`: one of its sequences starts
        with the target's own token (the guess counts as one more draft token tried)."""
        proposal, timing = chunk
        rec = self.round(start, timing.span, vspan, drafted, verdict.accepted, timing.busy_s)
        rec.seqs = proposal.n_seqs
        self._count_seqs(proposal, verdict.token)
        return self.lesson(budget, rec, drafted + 1, verdict.accepted + hit, chunk)

    def chunk_dropped(self, budget: DraftBudget, start: float, vspan, drafted: int,
                      verdict: Verdict, job: DraftJob) -> Lesson:
        """duo: the chunk is not wanted; its draft time is settled when the job ends."""
        rec = self.round(start, (start, start), vspan, drafted, verdict.accepted)
        self._dropped.append((rec, job))
        return self.lesson(budget, rec, drafted, verdict.accepted, None)

    def predraft_used(self, budget: DraftBudget, start: float, vspan, drafted: int,
                      verdict: Verdict, chunk: Drafted) -> Lesson:
        """duo: a rejection the worker had pre-drafted for; the main chunk was stopped, so
        the round is no sample of draft time."""
        proposal, timing = chunk
        rec = self.round(start, timing.span, vspan, drafted, verdict.accepted, timing.busy_s)
        rec.seqs = proposal.n_seqs + len(proposal.predrafts)
        return self.lesson(budget, rec, drafted, verdict.accepted, None)

    def predrafted(self, plan: Plan | None, rejected: bool, hit: bool, vspan) -> None:
        """duo: what this round pre-drafted, and whether a rejection found its draft ready."""
        s = self.stats
        s.predraft_rounds += bool(plan)
        s.predraft_outcomes += len(plan or ())
        if s.rounds_log:
            s.rounds_log[-1].predrafted, s.rounds_log[-1].predraft_hit = len(plan or ()), hit
        if rejected:
            s.rejections += 1
            s.predraft_hits += hit
            self._rejected_at = vspan[1]

    def idle_round(self, budget: DraftBudget, start: float, vspan, verdict: Verdict) -> Lesson:
        """A round with the worker idle: one target token (the budget fell back to plain
        decoding), or the lookup's continuation (its tokens learned per band)."""
        n = self._drafting[1] + len(self._drafting[2]) if self._drafting else 0
        accepted = verdict.accepted if n else 0
        self.stats.plain_rounds += 1
        rec = self.round(start, (start, start), vspan, n, accepted)
        return self.lesson(budget, rec, n, accepted, None)

    def settle_dropped(self) -> None:
        """Dropped chunks still took draft time: put their real spans in the timeline (a job
        that failed or still runs has none; never raises, so no error is masked)."""
        for rec, job in self._dropped:
            chunk = job.finished()
            if chunk is None:
                continue
            self.stats.draft_busy_s += chunk.timing.busy_s
            rec.draft_span = (chunk.timing.span[0] - self.t0, chunk.timing.span[1] - self.t0)
        self._dropped.clear()

    def warn(self, message: str) -> None:
        if message not in self.stats.warnings:
            self.stats.warnings.append(message)

    # -- the parts -------------------------------------------------------------------------
    def round(self, start: float, dspan, vspan, drafted: int, accepted: int,
              busy_s: float = 0.0) -> RoundRecord:
        t0 = self.t0
        self.stats.draft_busy_s += busy_s
        rec = RoundRecord(start - t0, time.perf_counter() - t0, (dspan[0] - t0, dspan[1] - t0),
                          (vspan[0] - t0, vspan[1] - t0), drafted, accepted,
                          source="model" if drafted else "plain")
        if self._drafting is not None:
            rec.source, model_n, conf, found_in = self._drafting
            if conf and accepted >= model_n:  # the lookup's part was reached
                self.stats.lookup_accepted += accepted - model_n
                self._band = (conf, accepted - model_n, found_in)
        self.stats.record_round(rec)
        return rec

    def lesson(self, budget: DraftBudget, rec: RoundRecord, trials: int, passed: int,
               chunk: Drafted | None) -> Lesson:
        """The round's Lesson: pass rate, draft time per token (without catching up with the
        context, a k-sequence step counted as its cost in single steps at the budget's
        measured step times), verify time per length (a prefill round is no sample of verify
        time), and what the lookup's bands and the odds saw."""
        self.stats.gammas_used[budget.gamma] += 1
        trials, passed = self._model_part(rec, trials, passed)
        scored = self.last_scored if self.last_scored == rec.drafted + 1 else 0
        proposal, timing = chunk if chunk else (None, None)
        n = 0
        if proposal is not None and len(proposal.main):
            steps, k = budget.profile.draft_step_s, proposal.n_seqs
            n = len(proposal.main) * step_ratio(steps, k)
            if proposal.predrafts:  # their steps ran in the same batches
                depth = max(map(len, proposal.predrafts.values()))
                n += depth * (step_ratio(steps, k + len(proposal.predrafts)) - step_ratio(steps, k))
        band, rank, self._band, self._rank = self._band, self._rank, None, None
        return Lesson(trials, passed, draft_s=timing.busy_s - proposal.sync_s if n else 0.0,
                      draft_n=n, verify_s=rec.verify_span[1] - rec.verify_span[0],
                      verify_n=scored, band=band, rank=rank)

    def _model_part(self, rec: RoundRecord, trials: int, passed: int) -> tuple[int, int]:
        """The model draft's trials and passes of a round (the lookup's tokens are learned apart,
        per band): its tokens, and the guess of the chunk drafted beside when every token passed."""
        drafting, self._drafting = self._drafting, None
        if drafting is None or not drafting[2]:
            return trials, passed
        model_n, full = drafting[1], rec.accepted == rec.drafted
        if not full:
            return model_n, min(rec.accepted, model_n)
        return model_n + trials - rec.drafted, model_n + passed - rec.accepted

    def _count_seqs(self, proposal: Proposal, target_token: int) -> None:
        """Sequences per round (Figure 5) and sequences vs the target token's draft rank
        (Table 4); the rank goes to the first-token odds in the round's Lesson."""
        self.stats.seq_hist[proposal.n_seqs] += 1
        if not proposal.first_ranking:
            return
        rank = proposal.rank_of(target_token)
        row = self.stats.seq_confusion.setdefault(str(proposal.n_seqs), {})
        key = str(rank or "other")
        row[key] = row.get(key, 0) + 1
        self._rank = (proposal.first_top_p, rank)
