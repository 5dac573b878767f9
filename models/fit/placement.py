"""Where each model of a pair runs and on how many threads: one value per loaded pair, asked
once per generation (`for_method`) for that method's Threads, which the loader applies and
passes down (the budget profile's key, GenConfig's prefill count, the stats)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threads:
    """One generation's thread settings. `draft` 0: the draft does not run (vanilla);
    `prefill` 0: the prompt prefills keep the decode counts; `overlapped`: draft and target
    decode at the same time (duo), so their sum is what the cores must hold; `alone` (duo):
    the draft's count while the target waits for its chunk (0: `draft`), the target idle."""
    draft: int
    target: int
    prefill: int = 0
    overlapped: bool = False
    alone: int = 0

    @property
    def busy(self) -> int:
        """The most threads busy at once: both sides in duo (or the draft's `alone` count,
        the target waiting), the larger side in sps (draft and verify take turns), the target
        alone in vanilla."""
        if self.overlapped:
            return max(self.draft + self.target, self.alone)
        return max(self.draft, self.target)

    def to_dict(self) -> dict:
        return {"draft": self.draft, "target": self.target, "prefill": self.prefill,
                "alone": self.alone}


@dataclass(frozen=True)
class Placement:
    """llama.cpp's threads spin at barriers, so the draft never takes every core: with a core
    short (another process, or torch beside it) a decode stalls. On cuda the target keeps one
    core to launch its kernels; on a CPU-only machine duo splits the cores (the draft's
    measured count within the lower half, the target the upper half: never more busy threads
    than cores), and vanilla/sps give the target all of them. A compiled CPU target runs at
    the counts it was compiled for (its graphs are guarded on them: `target_counts`, duo's
    share first, every core next), so duo never oversubscribes; a method whose count it
    lacks runs at the first. A draft that runs
    alone (sps's turns; duo's chunk the target waits for) takes `draft_alone`, the fastest
    measured within every core, where that beats its share."""
    target_device: str
    cores: int
    draft_threads: int  # the fastest measured within draft_share()
    target_counts: tuple[int, ...] = ()  # a compiled CPU target's thread counts (): any
    draft_alone: int = 0  # the fastest measured within `cores` (0: draft_threads)

    @property
    def on_cuda(self) -> bool:
        return self.target_device.startswith("cuda")

    def for_method(self, method: str) -> Threads:
        """The Threads while `method` decodes (its prompt prefills too)."""
        draft, alone = self._draft_threads(method)
        if self.on_cuda:
            return Threads(draft, 1, 0, method == "duo", alone)
        target = target_share(self.target_device, self.cores) if method == "duo" else self.cores
        if self.target_counts and target not in self.target_counts:
            target = self.target_counts[0]
        # sps/duo: the prompt's prefills run alone, before the draft and target overlap, on
        # every core (a compiled target's long-prompt prefill is eager: it takes them too;
        # duo's short prompts: the target's at its own count, beside the draft's: rounds.py);
        # vanilla's prefill is its first verify, at the decode count
        prefill = self.cores if draft else 0
        return Threads(draft, target, prefill, method == "duo", alone)

    def _draft_threads(self, method: str) -> tuple[int, int]:
        """The draft's count beside the target and alone (Threads.draft, Threads.alone)."""
        if method in ("vanilla", "lookup"):  # no draft model
            return 0, 0
        alone = self.draft_alone if self.draft_alone > self.draft_threads else 0
        if method == "duo":
            return self.draft_threads, alone
        return alone or self.draft_threads, 0  # sps: the draft always runs alone

    def apply(self, threads: Threads, drafter, target) -> Threads:
        if threads.draft:
            drafter.set_threads(threads.draft)
            if hasattr(drafter, "alone_threads"):
                drafter.alone_threads = threads.alone
        target.set_threads(threads.target)
        return threads


def draft_share(target_device: str, cores: int) -> int:
    """The most threads the draft may take: all but the target's launcher core on cuda, the
    lower half of the cores when the target shares the CPU."""
    cores = max(1, cores)
    return max(1, cores - 1 if target_device.startswith("cuda") else cores // 2)


def target_share(target_device: str, cores: int) -> int:
    """The target's threads while duo decodes: one launcher thread on cuda, the upper half
    of the cores on the CPU (draft_share + target_share <= cores from 2 cores up)."""
    return 1 if target_device.startswith("cuda") else half_up(cores)


def half_up(cores: int) -> int:
    return max(1, cores - cores // 2)
