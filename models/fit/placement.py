"""Where each model of a pair runs and on how many threads: one frozen plan per loaded pair
(`Threads`), answered once at load and applied once per generation."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threads:
    """The pair's thread plan. `draft`: its decodes; `target`: torch's CPU threads (1 on
    cuda: the thread that launches its kernels); `prefill`: the draft's prompt prefill (its
    Q8_0 copy, models/draft/prefill.py); `overlapped`: draft and target decode at the same
    time (duo with the target on a GPU), so the draft keeps a core for the target."""
    draft: int
    target: int
    prefill: int
    overlapped: bool

    def to_dict(self) -> dict:
        return {"draft": self.draft, "target": self.target, "prefill": self.prefill,
                "overlapped": self.overlapped}


def plan(device: str, cores: int, draft_threads: int) -> Threads:
    """On cuda the target keeps one core and the draft (its measured count within the rest)
    runs beside it; on a CPU-only machine the two take turns (duo runs sps's loop), each on
    every core (the draft at its measured count)."""
    cores = max(1, cores)
    if device.startswith("cuda"):
        return Threads(draft_threads, 1, draft_share(device, cores), True)
    return Threads(draft_threads, cores, cores, False)


def draft_share(device: str, cores: int) -> int:
    """The most threads the draft may take: all but the target's launcher core on cuda,
    every core when the target shares the CPU (the two take turns). llama.cpp's threads
    spin at barriers, so beside a running target it never takes that core."""
    cores = max(1, cores)
    return max(1, cores - 1) if device.startswith("cuda") else cores


def apply(threads: Threads, drafter, target) -> None:
    """Set the plan on the draft (its prefill copy too) and the target."""
    if drafter is not None:
        drafter.set_threads(threads.draft)
        if getattr(drafter, "prefill", None) is not None:
            drafter.prefill.set_threads(threads.prefill)
    target.set_threads(threads.target)
