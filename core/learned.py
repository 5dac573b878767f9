"""What a pair's generations learn and hand on to the next one (the Pair owns one): the draft
budget's acceptance, timing scales and plain rounds since a probe per method, the lookup's
pass rates per confidence band, the first-token odds, whether the draft's state must be reset
after a failure, and whether the measured profile disagrees with the online times widely
enough to be measured again."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from core.bands import LookupBands
from core.branching import FirstTokenOdds
from core.budget import DraftBudget, Profile

WIDE = 2.0  # online times this far off the profile (either way): measure the profile again
CLOSE = 0.25  # a fresh profile within this of the old one: the old one was not the cause
CARRIED = ("odds", "budgets", "held", "lookup_bands")  # learned; the rest is the draft's health


@dataclass
class Learned:
    odds: FirstTokenOdds = field(default_factory=FirstTokenOdds)
    budgets: dict = field(default_factory=dict)  # method -> DraftBudget.state()
    reset_draft: bool = False  # the draft failed: roll its cache back before using it again
    busy_draft: Future | None = None  # a hung draft job: the drafter is not free until done
    held: set = field(default_factory=set)  # methods whose drift a fresh profile did not explain
    lookup_bands: dict = field(default_factory=dict)  # method -> LookupBands.alpha
    drift_checks: bool = True  # off: never measured again for a drift (fixed test profiles)

    def budget(self, method: str, profile: Profile, overlap: bool,
               fixed: int | None) -> DraftBudget:
        """A budget for this generation, starting from what the last one of `method` learned."""
        budget = DraftBudget(profile, overlap=overlap, fixed=fixed)
        budget.restore(self.budgets.get(method))
        return budget

    def carried(self) -> dict:
        """What generations learn and hand on (a benchmark keeps one set per label)."""
        return {k: getattr(self, k) for k in CARRIED}

    def carry(self, state: dict) -> None:
        for k in CARRIED:
            setattr(self, k, state[k])

    def keep(self, method: str, budget: DraftBudget) -> None:
        self.budgets[method] = budget.state()

    def bands(self, method: str) -> LookupBands:
        """The lookup's pass rates per confidence band, carried on in place."""
        bands = LookupBands(self.lookup_bands.get(method))
        self.lookup_bands[method] = bands.alpha
        return bands

    def draft_free(self) -> bool:
        """False while a hung draft job from an earlier generation still runs."""
        if self.busy_draft is not None and not self.busy_draft.done():
            return False
        self.busy_draft = None
        return True

    def drifted(self, method: str) -> bool:
        """The last generation of `method` timed the draft or the target WIDE off its
        profile (the budget's scales), and measuring again has not been tried for it."""
        state = self.budgets.get(method)
        if not state or not self.drift_checks:
            return False
        if all(1 / WIDE <= state[k] <= WIDE for k in ("draft_scale", "verify_scale")):
            self.held.discard(method)
            return False
        return method not in self.held

    def measured_again(self, method: str, old: Profile, new: Profile) -> bool:
        """After measuring again for a drift (a spot check or a whole profile): times close to
        the old profile's mean the drift came from elsewhere (a long context): no more
        measuring until the scales come back (True). Otherwise the scales start afresh."""
        if _close(old.draft_token_s, new.draft_token_s) and _close(old.verify(1), new.verify(1)):
            self.held.add(method)
            return True
        self.budgets[method].update(draft_scale=1.0, verify_scale=1.0, length_scales={})
        return False


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= CLOSE * max(a, b)
