"""Where each model of a pair runs and on how many threads: one value, computed once per
loaded pair; the loader applies it and the engine reads its prefill count from GenConfig."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """llama.cpp's threads spin at barriers, so the draft never takes every core: with a core
    short (another process, or torch beside it) a decode stalls. On cuda the target keeps one
    core to launch its kernels; on a CPU-only machine duo splits the cores, and vanilla/sps
    give the target all of them. A compiled CPU target keeps the count it was compiled with
    (its graphs are guarded on it)."""
    target_device: str
    cores: int
    draft_threads: int  # the fastest measured within draft_share()
    target_fixed: int | None = None

    @property
    def on_cuda(self) -> bool:
        return self.target_device.startswith("cuda")

    def threads(self, method: str) -> tuple[int, int]:
        """(draft, target) threads while `method` decodes."""
        if self.on_cuda:
            return self.draft_threads, 1
        if self.target_fixed:
            return self.draft_threads, self.target_fixed
        return self.draft_threads, half_up(self.cores) if method == "duo" else self.cores

    def prefill_threads(self, method: str) -> int:
        """Threads for the prompt prefills, which run alone before the draft and target
        overlap: every core on a CPU-only machine, 0 (keep the decode counts) otherwise."""
        return 0 if method == "vanilla" or self.on_cuda else self.cores

    def apply(self, method: str, drafter, target) -> tuple[int, int]:
        draft_n, target_n = self.threads(method)
        drafter.set_threads(draft_n)
        target.set_threads(target_n)
        return draft_n, target_n


def draft_share(target_device: str, cores: int) -> int:
    """The most threads the draft may take: all but the target's launcher core on cuda, the
    lower half of the cores when the target shares the CPU."""
    cores = max(1, cores)
    return max(1, cores - 1 if target_device.startswith("cuda") else cores // 2)


def half_up(cores: int) -> int:
    return max(1, cores - cores // 2)
