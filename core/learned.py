"""What a pair's generations learn and hand on to the next one (the Pair owns one): the draft
budget's acceptance and timing scales per method, the first-token odds, and whether the
draft's state must be reset after a failure."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from core.branching import FirstTokenOdds
from core.budget import DraftBudget, Profile


@dataclass
class Learned:
    odds: FirstTokenOdds = field(default_factory=FirstTokenOdds)
    budgets: dict = field(default_factory=dict)  # method -> DraftBudget.state()
    reset_draft: bool = False  # the draft failed: roll its cache back before using it again
    busy_draft: Future | None = None  # a hung draft job: the drafter is not free until done

    def budget(self, method: str, profile: Profile, overlap: bool,
               fixed: int | None) -> DraftBudget:
        """A budget for this generation, starting from what the last one of `method` learned."""
        budget = DraftBudget(profile, overlap=overlap, fixed=fixed)
        budget.restore(self.budgets.get(method))
        return budget

    def keep(self, method: str, budget: DraftBudget) -> None:
        self.budgets[method] = budget.state()

    def draft_free(self) -> bool:
        """False while a hung draft job from an earlier generation still runs."""
        if self.busy_draft is not None and not self.busy_draft.done():
            return False
        self.busy_draft = None
        return True
