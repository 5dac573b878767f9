"""What a pair's generations learn and hand on to the next one (the Pair owns one): the draft
budget's acceptance, timing scales and plain rounds since a probe per method, the lookup's
pass rates per confidence band, the first-token odds, and whether the draft's state must be
reset after a failure. The budget's timing scales follow the online times; the profile they
scale is measured at load (or when asked), never before a generation's first token."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from core.bands import LookupBands
from core.branching import FirstTokenOdds
from core.budget import DraftBudget, Profile

CARRIED = ("odds", "budgets", "lookup_bands")  # learned; the rest is the draft's health


@dataclass
class Learned:
    odds: FirstTokenOdds = field(default_factory=FirstTokenOdds)
    budgets: dict = field(default_factory=dict)  # method -> DraftBudget.state()
    reset_draft: bool = False  # the draft failed: roll its cache back before using it again
    busy_draft: Future | None = None  # a hung draft job: the drafter is not free until done
    lookup_bands: dict = field(default_factory=dict)  # method -> LookupBands.alpha

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
