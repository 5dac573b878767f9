"""Hardware-aware draft budget: how many tokens to draft per round, from measured times.

Model of a `duo` round that verifies gamma draft tokens: the target scores gamma + 1 tokens
(T(gamma + 1)) while the draft writes the next chunk of gamma + 1 tokens (its guess of the
target's next token plus gamma). The round takes the max of the two. A chunk is usable when
every token passed and its guess matched (alpha^(gamma+1)); otherwise the next round has no
draft and yields one target token. A two-state Markov chain gives the expected tokens/s.
For `sps` the two run one after the other.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# the longest verify the budget plans: a chunk and the target's own token fill the largest
# compiled bucket (models/target/static.py), past which a forward leaves its graphs (a
# 33-token verify took 101 ms against 74 for 32, compiled smol-self, 2-core Intel Xeon)
MAX_VERIFY = 32
MAX_GAMMA = MAX_VERIFY - 1
PROBE_EVERY = 16  # in plain decoding, every 16th round drafts again to re-measure


@dataclass
class Profile:
    draft_token_s: float  # draft time per token (decode step)
    verify_s: list[float]  # verify_s[n - 1]: target forward of n tokens
    draft_step_s: dict = field(default_factory=dict)  # k branches -> time of one batched step
    device: str = "cpu"
    load: float | None = None  # other processes' share of the cores while it was measured

    def verify(self, n: int) -> float:
        return _curve(self.verify_s, n)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        steps = {int(k): v for k, v in d.get("draft_step_s", {}).items()}
        return cls(d["draft_token_s"], list(d["verify_s"]), steps, d.get("device", "cpu"),
                   d.get("load"))


def _curve(times: list[float], n: int) -> float:
    """times[n - 1], past the end extended by its last increment."""
    n = max(1, n)
    if n <= len(times):
        return times[n - 1]
    last, prev = times[-1], times[-2] if len(times) > 1 else 0.0
    return last + (n - len(times)) * max(last - prev, 0.0)


class DraftBudget:
    """Picks gamma; adapts to the running acceptance rate and to measured round times."""

    def __init__(self, profile: Profile, overlap: bool = True, fixed: int | None = None,
                 alpha: float = 0.8, max_gamma: int = MAX_GAMMA, ema: float = 0.3):
        self.profile, self.overlap, self.fixed = profile, overlap, fixed
        self.alpha, self.max_gamma, self.ema = alpha, max_gamma, ema
        self.draft_scale = self.verify_scale = 1.0  # measured / profiled, for context growth
        self.length_scales: dict[int, float] = {}  # per verify length bucket, once measured
        self.reason = ""
        self.since_probe = 0  # plain rounds since a round last drafted (carried on: state())
        self.gamma = fixed if fixed else self._choose()

    # -- the cost model -------------------------------------------------------------------
    def draft_s(self, n: int) -> float:
        return n * self.profile.draft_token_s * self.draft_scale

    def batch_s(self, k: int) -> float:
        """One draft decode of k tokens at once (k sequences a step, or k positions of one):
        the profile's batched steps, past the largest extended by its last increment."""
        steps = self.profile.draft_step_s
        if not steps:
            return k * self.draft_s(1)
        if k in steps:
            return steps[k] * self.draft_scale
        top = max(steps)
        slope = max(steps[top] - steps.get(top - 1, 0.0), 0.0)
        return (steps[top] + (k - top) * slope) * self.draft_scale

    def batch_pays(self, n: int) -> bool:
        """Whether a batched decode of some k <= n tokens costs less than k single steps."""
        return any(self.batch_s(k) < k * self.draft_s(1) for k in range(2, n + 1))

    def verify_s(self, n: int) -> float:
        """The verify of `n` tokens: the profile's time scaled by what verifies of about that
        length measured (a long chunk beside the drafting thread may slow more than a short
        one), or by the scale of all lengths until one is measured."""
        scale = self.length_scales.get(length_bucket(n), self.verify_scale)
        return self.profile.verify(n) * scale

    def expected_rate(self, gamma: int, alpha: float | None = None) -> float:
        a = min(max(self.alpha if alpha is None else alpha, 0.01), 0.995)
        tokens_full = (1 - a ** (gamma + 1)) / (1 - a)  # accepted + the target's own token
        if not self.overlap:
            return tokens_full / (self.draft_s(gamma) + self.verify_s(gamma + 1))
        t_full = max(self.verify_s(gamma + 1), self.draft_s(gamma + 1))
        t_empty = max(self.verify_s(1), self.draft_s(self.empty_chunk(gamma)))
        stay, enter = a ** (gamma + 1), a  # P(full -> full), P(empty -> full)
        pi_full = enter / (enter + 1 - stay)
        tokens = pi_full * tokens_full + (1 - pi_full)
        return tokens / (pi_full * t_full + (1 - pi_full) * t_empty)

    def predraft_rate(self, gamma: int, hit: float, depth: int, extra_s: float,
                      alpha: float | None = None) -> float:
        """expected_rate (duo) when a round ends with probability `hit` in a rejection whose
        next draft (`depth` tokens) was pre-drafted during the verify, for `extra_s` more draft
        time a round: a chain of full, pre-drafted and empty rounds (hit 0: expected_rate)."""
        a = min(max(self.alpha if alpha is None else alpha, 0.01), 0.995)
        fitted = self.draft_s(self.empty_chunk(gamma, depth)) + extra_s
        times = (max(self.verify_s(gamma + 1), self.draft_s(gamma + 1) + extra_s),
                 max(self.verify_s(depth + 1), fitted),
                 max(self.verify_s(1), self.draft_s(self.empty_chunk(gamma))))
        tokens = ((1 - a ** (gamma + 1)) / (1 - a), (1 - a ** (depth + 1)) / (1 - a), 1.0)
        rows = []
        for stay in (a ** (gamma + 1), a ** (depth + 1)):  # full, pre-drafted: -> full, pre, empty
            h = min(hit, 1 - stay)
            rows.append((stay, h, 1 - stay - h))
        pi = _stationary3(rows + [(a, 0.0, 1 - a)])
        return (sum(p * n for p, n in zip(pi, tokens)) /
                sum(p * t for p, t in zip(pi, times)))

    def empty_chunk(self, gamma: int | None = None, pending: int = 0) -> int:
        """Chunk to draft while the target verifies no draft (after a rejection), or a short
        pre-drafted one of `pending` tokens: what fits in its forward, so that round does not
        wait for a full chunk."""
        gamma = self.gamma if gamma is None else gamma
        if self.fixed:  # a fixed gamma fixes every chunk: the profile's times, not today's
            fits = int(self.profile.verify(pending + 1) / max(self.profile.draft_token_s, 1e-9))
        else:
            fits = int(self.verify_s(pending + 1) / max(self.draft_s(1), 1e-9))
        return max(2, min(gamma + 1, fits))

    def chunk_beside(self, pending: int, lookup: bool, short: bool = False) -> int:
        """Tokens the worker drafts while a draft of `pending` tokens is verified: beside
        lookup tokens what fits in the verify (lookup_chunk), after a full draft a full chunk,
        after none or a `short` pre-draft what fits (empty_chunk)."""
        if lookup:
            return self.lookup_chunk(pending)
        return self.gamma + 1 if pending and not short else self.empty_chunk(pending=pending)

    def lookup_chunk(self, pending: int) -> int:
        """Chunk to draft beside a draft with lookup tokens (`pending` in all): what fits in
        its verify, at least a full chunk, so a lookup that passes only in part still finds
        the model's chunk going on past it."""
        fits = int(self.verify_s(pending + 1) / max(self.draft_s(1), 1e-9))
        return max(self.gamma + 1, min(self.max_gamma + 1, fits))

    def balanced_gamma(self) -> int:
        """Largest gamma whose drafting fits inside its verification."""
        fits = [g for g in range(1, self.max_gamma + 1)
                if self.draft_s(g + 1) <= self.verify_s(g + 1)]
        return max(fits) if fits else 1

    def _best(self, alpha: float | None = None) -> tuple[int, float]:
        """The gamma of the highest expected tokens/s (the fixed one when fixed; ties: the
        shorter), and that rate, at `alpha` (None: the learned acceptance)."""
        gammas = [self.fixed] if self.fixed else range(1, self.max_gamma + 1)
        return max(((g, self.expected_rate(g, alpha)) for g in gammas), key=lambda gr: gr[1])

    def plain_rate(self) -> float:
        """Tokens/s of the target alone (gamma 0: no draft)."""
        return 1.0 / max(self.verify_s(1), 1e-9)

    def _choose(self) -> int:
        """The best gamma; 0 (plain decoding) when no gamma beats the target alone, with a
        probe round every PROBE_EVERY rounds so acceptance and timings are measured again."""
        bal = self.balanced_gamma()
        (best, rate), plain = self._best(), self.plain_rate()
        if rate < plain:
            probe = self.since_probe >= PROBE_EVERY - 1  # this is the PROBE_EVERY-th round
            self.reason = (f"plain decoding: the target alone ({plain:.1f} tok/s) beats the best"
                           f" draft budget ({best}: {rate:.1f} tok/s at acceptance"
                           f" {self.alpha:.2f})" + ("; probing with a draft" if probe else ""))
            return best if probe else 0
        self.reason = (f"balance: drafting {bal + 1} tokens ({self.draft_s(bal + 1) * 1e3:.1f} ms)"
                       f" fits verifying {bal + 1} ({self.verify_s(bal + 1) * 1e3:.1f} ms);"
                       f" refined to {best}: expected {rate:.1f} tok/s"
                       f" at acceptance {self.alpha:.2f} (target alone {plain:.1f})")
        return best

    # -- online adaptation ----------------------------------------------------------------
    def observe(self, drafted: int, accepted: int, draft_s: float = 0.0, draft_n: float = 0,
                verify_s: float = 0.0, verify_n: int = 0) -> int:
        """Feed one round's outcome and times; returns the gamma for the next round."""
        self.since_probe = 0 if self.gamma else self.since_probe + 1  # this round's gamma
        if drafted:  # per-token pass rate: the passes, plus one failure if any was rejected
            self.alpha += self.ema * (accepted / (accepted + (accepted < drafted)) - self.alpha)
        if draft_n and draft_s > 0:
            ratio = draft_s / (draft_n * self.profile.draft_token_s)
            self.draft_scale += self.ema * (ratio - self.draft_scale)
        if verify_n and verify_s > 0:
            ratio = verify_s / self.profile.verify(verify_n)
            bucket = length_bucket(verify_n)
            own = self.length_scales.get(bucket, self.verify_scale)
            self.length_scales[bucket] = own + self.ema * (ratio - own)
            self.verify_scale += self.ema * (ratio - self.verify_scale)
        if not self.fixed:
            self.gamma = self._choose()
        return self.gamma

    # -- carried across generations (core/learned.py) --------------------------------------
    def state(self) -> dict:
        """What this budget learned: acceptance, timing scales for its profile, and the plain
        rounds since the last probe (so short generations still probe, every PROBE_EVERY)."""
        return {"alpha": self.alpha, "draft_scale": self.draft_scale,
                "verify_scale": self.verify_scale, "length_scales": dict(self.length_scales),
                "profile": self.profile,
                "since_probe": self.since_probe}

    def restore(self, state: dict | None) -> None:
        """Start from an earlier generation's state; its timing scales only when they were
        measured against the same profile."""
        if not state:
            return
        self.alpha, self.since_probe = state["alpha"], state.get("since_probe", 0)
        if state["profile"] == self.profile:
            self.draft_scale, self.verify_scale = state["draft_scale"], state["verify_scale"]
            self.length_scales = dict(state.get("length_scales", {}))
        if not self.fixed:
            self.gamma = self._choose()

    def explain(self) -> dict:
        return {"gamma": self.gamma, "fixed": bool(self.fixed), "reason": self.reason or
                f"fixed by the user: {self.fixed}", "alpha": round(self.alpha, 3),
                "draft_scale": round(self.draft_scale, 3),
                "verify_scale": round(self.verify_scale, 3),
                "length_scales": {bucket_label(b): round(v, 3)
                                  for b, v in sorted(self.length_scales.items())},
                "profile": self.profile.to_dict()}


def length_bucket(n: int) -> int:
    """Verify lengths priced alike: 1, 2, 3-4, 5-8, ..., 17-32, 33-64 (the compiled target's
    chunk sizes are powers of two)."""
    return (max(1, n) - 1).bit_length()


def bucket_label(b: int) -> str:
    """The lengths of bucket `b`, as text: "1", "2", "3-4", "5-8", ..."""
    return str(1 << b) if b < 2 else f"{(1 << (b - 1)) + 1}-{1 << b}"


def _stationary3(t) -> tuple[float, float, float]:
    """Stationary distribution of a three-state chain (t[i][j]: P(i -> j)), by the Markov
    chain tree theorem: each state's weight sums its spanning trees' edges into it."""
    w = (t[1][0] * t[2][0] + t[1][2] * t[2][0] + t[2][1] * t[1][0],
         t[0][1] * t[2][1] + t[0][2] * t[2][1] + t[2][0] * t[0][1],
         t[0][2] * t[1][2] + t[0][1] * t[1][2] + t[1][0] * t[0][2])
    total = sum(w)
    return tuple(x / total for x in w)
