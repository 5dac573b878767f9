"""GenerationStats: the one record of a generation's speed; UI, CLI and benchmark read it."""
from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field, fields


@dataclass
class RoundRecord:
    start: float
    end: float
    draft_span: tuple[float, float]
    verify_span: tuple[float, float]
    drafted: int
    accepted: int
    seqs: int = 1
    predrafted: int = 0  # rejection outcomes pre-drafted during this round's verify
    predraft_hit: bool = False  # it ended in a rejection whose next draft was ready
    source: str = "model"  # what the verified draft was: model, lookup, fused (both), plain

    def to_dict(self) -> dict:
        return {**self.__dict__, "draft_span": list(self.draft_span),
                "verify_span": list(self.verify_span)}


@dataclass
class GenerationStats:
    method: str
    gamma: int | str = 0
    new_tokens: int = 0
    wall_s: float = 0.0
    ttft_s: float = 0.0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_busy_s: float = 0.0
    target_busy_s: float = 0.0
    accept_by_position: list[list[int]] = field(default_factory=list)  # [tried, passed]
    rounds_log: list[RoundRecord] = field(default_factory=list)
    gamma_profile: dict = field(default_factory=dict)
    gammas_used: Counter = field(default_factory=Counter)
    seq_hist: Counter = field(default_factory=Counter)
    seq_confusion: dict = field(default_factory=dict)
    vocab: dict = field(default_factory=dict)
    stop_reason: str = ""
    plain_rounds: int = 0  # rounds without the model's draft: it cannot pay, or it prefills
    # (a lookup may still have drafted: rounds_log's source)
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV the target kept from the last generation
    warnings: list[str] = field(default_factory=list)  # e.g. the draft failed: target alone
    predraft_rounds: int = 0  # duo rounds that pre-drafted rejection outcomes
    predraft_outcomes: int = 0  # outcomes pre-drafted, all rounds
    rejections: int = 0  # duo rounds that ended in a rejection (more text to come)
    predraft_hits: int = 0  # of those, rounds whose next draft was pre-drafted (no plain step)
    rejection_idle_s: float = 0.0  # target idle between a rejection and the next verify
    lookup_rounds: int = 0  # rounds where the suffix index had a proposal
    lookup_won: int = 0  # of those, rounds whose draft used it (lookup alone or fused)
    lookup_memory: int = 0  # of those, rounds whose lookup tokens came from earlier requests
    lookup_proposed: int = 0  # lookup tokens verified
    lookup_accepted: int = 0  # of those, accepted
    lookup_emitted: int = 0  # lookup tokens in the output (accepted, before a stop)

    def record_round(self, rec: RoundRecord) -> None:
        self.rounds += 1
        self.drafted += rec.drafted
        self.accepted += rec.accepted
        self.rounds_log.append(rec)
        for i in range(rec.drafted):
            while len(self.accept_by_position) <= i:
                self.accept_by_position.append([0, 0])
            self.accept_by_position[i][0] += 1
            self.accept_by_position[i][1] += int(i < rec.accepted)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_per_round(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def round_wall_s(self) -> float:
        return sum(r.end - r.start for r in self.rounds_log)

    @property
    def overlap_busy_s(self) -> float:
        """Sum over rounds of max(draft, verify) time inside the round (a dropped chunk's
        drafting that runs on into the next round counts there)."""
        return sum(max(_inside(r.draft_span, r), _inside(r.verify_span, r))
                   for r in self.rounds_log)

    @property
    def overlap_efficiency(self) -> float:
        """overlap_busy_s over total round wall time (1.0 = no side waits on the other)."""
        wall = self.round_wall_s
        return min(1.0, self.overlap_busy_s / wall) if wall > 0 else 0.0

    def to_dict(self) -> dict:
        """A plain dict of the stats; the rounds and counters as lists and dicts of their own
        (a shallow copy: asdict's deep copy of every round took a fifth of a short generation)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        for k in ("gamma_profile", "seq_confusion", "vocab"):
            d[k] = copy.deepcopy(d[k])
        d["accept_by_position"] = [list(p) for p in self.accept_by_position]
        d["warnings"] = list(self.warnings)
        wall = self.round_wall_s
        d.update(
            tokens_per_s=self.tokens_per_s, acceptance_rate=self.acceptance_rate,
            mean_accepted_per_round=self.mean_accepted_per_round,
            overlap_efficiency=self.overlap_efficiency, overlap_busy_s=self.overlap_busy_s,
            round_wall_s=wall,
            draft_idle_s=max(0.0, wall - self.draft_busy_s) if self.drafted else 0.0,
            target_idle_s=max(0.0, wall - self.target_busy_s),
            rounds_log=[r.to_dict() for r in self.rounds_log],
            gammas_used={str(k): v for k, v in sorted(self.gammas_used.items())},
            seq_hist={str(k): v for k, v in sorted(self.seq_hist.items())},
            predraft_per_round=(self.predraft_outcomes / self.predraft_rounds
                                if self.predraft_rounds else 0.0),
            predraft_hit_rate=self.predraft_hits / self.rejections if self.rejections else 0.0,
            lookup=self.lookup_dict(),
        )
        for k in ("lookup_rounds", "lookup_won", "lookup_memory",
                  "lookup_proposed", "lookup_accepted", "lookup_emitted"):
            del d[k]
        return d


    def lookup_dict(self) -> dict:
        """The suffix index's part: rounds it proposed in, rounds it won (from the memory of earlier
        requests), its tokens proposed and accepted, and its share of the new tokens."""
        return {"rounds": self.lookup_rounds, "won": self.lookup_won,
                "memory": self.lookup_memory,
                "proposed": self.lookup_proposed, "accepted": self.lookup_accepted,
                "acceptance": (self.lookup_accepted / self.lookup_proposed
                               if self.lookup_proposed else 0.0),
                "share": self.lookup_emitted / self.new_tokens if self.new_tokens else 0.0}


def _inside(span: tuple[float, float], r: RoundRecord) -> float:
    return max(0.0, min(span[1], r.end) - max(span[0], r.start))
