"""What one generation is asked to do (`GenConfig`), checked before anything runs."""
from __future__ import annotations

from dataclasses import dataclass, field

from core.constraints import check_adjustments
from core.sampling import SAMPLERS, SamplingConfig, check_finite

@dataclass(frozen=True)
class Method:
    """What a method does, which every file asks instead of its name: it runs the draft
    model, it may draft from the suffix index, it drafts beside the verify (where the target
    has a device of its own). A method that drafts either way keeps a draft budget."""
    drafts: bool
    looks_up: bool
    overlaps: bool

    @property
    def budgeted(self) -> bool:
        return self.drafts or self.looks_up


METHOD = {"vanilla": Method(False, False, False), "sps": Method(True, False, False),
          "duo": Method(True, True, True),
          "lookup": Method(False, True, False)}  # lookup: the target and the suffix index alone
METHODS = tuple(METHOD)
LOOKUP_METHODS = tuple(m for m, does in METHOD.items() if does.looks_up)
LOOKUP_CHOICES = ("auto", "on", "off")  # auto: priced each round; on: whenever it proposes


@dataclass
class GenConfig:
    method: str = "duo"
    max_new_tokens: int = 128
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    sampler: str = "coupled"  # core/verify.py: "coupled" (seeded text = vanilla's) or "rejection"
    gamma: int | None = None  # None: the hardware-aware budget picks it
    stop_strings: tuple[str, ...] = ()
    sequential: bool = False  # duo only: same rounds, no overlap
    multi_seq: bool = True  # duo only: dynamic multi-sequence drafting
    max_seqs: int = 4
    theta_scale: float = 1.0  # theta = p(1,1) * p(2,1) * theta_scale
    static_k: int | None = None  # always k sequences (comparison)
    predraft: bool = True  # duo only: pre-draft likely rejection outcomes (core/predraft.py)
    cache_prompt: bool = True  # keep what the caches hold of this prompt (a chat's next turn)
    draft_timeout_s: float | None = 10.0  # no draft answer by then (+10 ms a context token)
    # what changes the logits of every row, target and draft alike (core/constraints.py)
    response_format: dict | None = None  # OpenAI's; the loader compiles it to a grammar
    logit_bias: dict[int, float] = field(default_factory=dict)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: int | None = None  # report logprobs with this many alternatives per token
    lookup: str = "auto"  # duo and lookup: suffix-index drafts (core/suffix.py); sps: model only

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method '{self.method}'; known: {', '.join(METHODS)}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler '{self.sampler}'; known: {', '.join(SAMPLERS)}")
        self._check_lookup()
        check_finite("--theta-scale", self.theta_scale)
        if self.draft_timeout_s is not None and not self.draft_timeout_s > 0:
            raise ValueError(f"draft_timeout_s must be > 0 or None, got {self.draft_timeout_s}")
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
        check_adjustments(self.logit_bias, self.presence_penalty, self.frequency_penalty,
                          self.logprobs)

    def _check_lookup(self) -> None:
        if self.lookup not in LOOKUP_CHOICES:
            raise ValueError(f"unknown lookup '{self.lookup}'; known: {', '.join(LOOKUP_CHOICES)}")
        does = METHOD[self.method]
        if does.looks_up and not does.drafts and self.lookup == "off":
            raise ValueError(f"lookup: 'off' leaves method '{self.method}' nothing to draft with")
        if not does.looks_up and self.lookup == "on":
            raise ValueError(f"lookup: 'on' applies to duo and lookup, not {self.method} (which "
                             "drafts with the model only, or not at all)")

    @property
    def uses_lookup(self) -> bool:
        return METHOD[self.method].looks_up and self.lookup != "off"
