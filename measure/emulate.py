"""An emulated GPU target for the benchmarks: the real target's greedy verdicts (an oracle,
computed once per prompt with the real pair and cached on disk) on a GPU's clock (a device
profile's forward times scaled to this CPU's draft, or a random-weight shadow model of the
profile's shape run on cuda). The app never imports it (docs/emulation.md)."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

from core.backends import Scores, check_chunk
from core.config import GenConfig
from core.sampling import SamplingConfig
from measure.device_profile import DeviceProfile, load_profile
from measure.oracle import Oracle, Refused, oracle_path
from measure.replay import forget

CLOCKS = ("profile", "shadow")
SHAPES = ("llama8b", "tiny")  # the shadow clock's (measure/gpu_bench.py)
SHADOW_BUCKETS = (1, 8, 32)  # the shadow's compiled chunk lengths (a full 8B compile is minutes)
SCALE_CONTEXT = 64  # the scale's draft probe: 16 tokens after this many, as the profiler's
# the scale is the median of this many probes: one probe's spread on the 2-core AMD EPYC VM
# was 13.7-16.7 ms a token (12 in a row, 2026-12-02), and the scale moves every figure
SCALE_PROBES = 5


def check_config(cfg: GenConfig) -> None:
    """The emulated target knows the real one's greedy argmaxes only: anything that reads
    probabilities or changes logits is refused by name."""
    named = [("--temperature > 0 (sampling)", not cfg.sampling.greedy),
             ("response_format", cfg.response_format is not None),
             ("logprobs", cfg.logprobs is not None), ("logit_bias", bool(cfg.logit_bias)),
             ("presence_penalty", cfg.presence_penalty != 0.0),
             ("frequency_penalty", cfg.frequency_penalty != 0.0)]
    bad = [name for name, used in named if used]
    if bad:
        raise Refused(f"the emulated target verifies greedy only: {', '.join(bad)} cannot be "
                      "emulated")


def add_emulate_args(p) -> None:
    """--emulate, --emulate-clock and --emulate-shape (scripts/benchmark.py, generate.py)."""
    p.add_argument("--emulate", metavar="PROFILE",
                   help="an emulated GPU target: the real target's greedy verdicts on a device "
                        "profile's clock (a name in measure/profiles, or a path; "
                        "docs/emulation.md)")
    p.add_argument("--emulate-clock", choices=CLOCKS, default="profile",
                   help="profile: the profile's times scaled to this CPU's draft; shadow: a "
                        "random-weight target of the profile's shape runs each chunk (cuda)")
    p.add_argument("--emulate-shape", choices=SHAPES, default=None,
                   help="the shadow clock's shape (default: the profile's; tiny runs on a CPU)")


def check_args(args, cfgs: list[GenConfig], refused: list[str] = ()) -> None:
    """The scripts' --emulate options before anything loads: the profile, the clock and
    every config the runs will use; `refused`: methods that decode off the target (peers,
    -json); Refused (a ValueError) by name."""
    if args.emulate and refused:
        raise Refused(f"--emulate runs the engine's methods only; refused: {', '.join(refused)} "
                      "(a peer runs its own target; a -json method reads logits)")
    if args.emulate and getattr(args, "replay", False):
        raise Refused("--emulate does not take --replay (its second pass's prompts have no "
                      "oracle)")
    if not args.emulate:
        if args.emulate_shape or args.emulate_clock != "profile":
            raise Refused("--emulate-clock and --emulate-shape need --emulate")
        return
    check_clock(args.emulate_clock, args.emulate_shape, load_profile(args.emulate))
    for cfg in cfgs:
        check_config(cfg)


# -- clocks -----------------------------------------------------------------------------------
class ProfileClock:
    """Sleeps a forward's time from the device profile, times `scale` (this CPU's draft
    against the profiled machine's): the sleep frees the GIL and the core, as a GPU wait."""
    kind = "profile"

    def __init__(self, profile: DeviceProfile, scale: float, sleep=time.sleep):
        self.profile, self.scale, self.sleep = profile, scale, sleep

    def forward(self, tokens: list[int], filled: int) -> None:
        self.sleep(self.profile.forward_ms(len(tokens), filled) * self.scale / 1e3)

    def rollback(self, n_keep: int) -> None:
        pass

    def close(self) -> None:
        pass


class ShadowClock:
    """A target of the profile's shape with random weights runs the same chunk at the same
    filled length; the call waits for it (its argmaxes are dropped): a real device's time."""
    kind = "shadow"
    scale = 1.0

    def __init__(self, shadow):
        self.shadow = shadow
        self.vocab = shadow.vocab_size

    def forward(self, tokens: list[int], filled: int) -> None:
        s = self.shadow
        if s.n_cached > filled:
            s.rollback(filled)
        if s.n_cached < filled:  # after a preserved block: fill up to the length first
            s.score([1] * (filled - s.n_cached), 1, SamplingConfig())
        s.score([t % self.vocab for t in tokens], 1, SamplingConfig())

    def rollback(self, n_keep: int) -> None:
        if self.shadow.n_cached > n_keep:
            self.shadow.rollback(n_keep)

    def close(self) -> None:
        self.shadow.close()


def shadow_target(shape: str, device: str, n_ctx: int, dtype: str = "bfloat16"):
    """The shadow clock's target: compiled static on cuda (the app's path there), eager on
    the CPU (the tiny shape, for tests and a dry run)."""
    from measure.gpu_bench import LLAMA_8B, TINY, make_target, random_model
    from models.target.eager import DTYPES

    config = {"llama8b": LLAMA_8B, "tiny": TINY}[shape]
    dtype = dtype if device.startswith("cuda") else "float32"
    model = random_model(config, device, DTYPES[dtype])
    path = "compiled" if device.startswith("cuda") else "eager"
    return make_target(path, shape, device, dtype, n_ctx, "none", SHADOW_BUCKETS, model=model)


# -- the target -------------------------------------------------------------------------------
@dataclass
class Emulation:
    """What a result records of the emulation: the profile, the clock and the scale."""
    profile: DeviceProfile
    clock: str
    scale: float
    draft_threads: int
    draft_token_ms_here: float
    shape: str | None = None

    @property
    def title(self) -> str:
        return f"emulated {self.profile.name}" + (" (projected)" if self.profile.projected
                                                  else "")

    def to_dict(self) -> dict:
        return {"profile": self.profile.to_dict(), "clock": self.clock,
                "scale": round(self.scale, 4), "draft_threads": self.draft_threads,
                "draft_token_ms_here": round(self.draft_token_ms_here, 4),
                "shadow_shape": self.shape, "title": self.title}


class EmulatedTarget:
    """The `Target` seam (core/backends.py) with an oracle's verdicts and a clock's time; a
    GPU-like device to the placement, so duo overlaps as on the workstation."""
    device = "cuda"  # what the placement reads: the target beside the draft's cores

    def __init__(self, real, oracle: Oracle, clock, emulation: Emulation):
        self.name = f"emulated:{real.name}"
        self.n_ctx, self.eos_ids, self.vocab_size = real.n_ctx, set(real.eos_ids), real.vocab_size
        self.oracle, self.clock, self.emulation = oracle, clock, emulation
        p = emulation.profile
        self.dtype, self.quant = p.dtype, p.quant
        self.path = f"emulated:{p.name}:{emulation.clock}"
        self.compile_choice = f"emulated ({emulation.clock} clock)"
        self.packed, self.pack_choice = False, "not packed: emulated"
        self.cached_ids: list[int] = []

    @property
    def n_cached(self) -> int:
        return len(self.cached_ids)

    def score(self, tokens: list[int], n_rows: int, sampling, check=None, adjust=None) -> Scores:
        if not sampling.greedy or check is not None or adjust:
            raise Refused("the emulated target verifies greedy only (no sampling, "
                          "response_format, logprobs, logit_bias or penalties)")
        check_chunk(tokens, n_rows, self.n_cached, self.n_ctx)
        filled = self.n_cached
        self.cached_ids += list(tokens)
        self.clock.forward(list(tokens), filled)
        return Scores(choice=self.oracle.rows(self.cached_ids, n_rows))

    def logits(self, tokens, n_rows):
        raise Refused("the emulated target has no logits (greedy verdicts only)")

    def rollback(self, n_keep: int) -> None:
        del self.cached_ids[n_keep:]
        self.clock.rollback(n_keep)

    @contextmanager
    def preserved(self, extent: int):
        saved, self.cached_ids = self.cached_ids, []
        self.clock.rollback(0)
        try:
            yield
        finally:
            self.cached_ids = saved

    def set_threads(self, n: int) -> int:
        return 1  # a GPU target's one launcher thread

    def synchronize(self) -> None:
        pass

    def device_name(self) -> str:
        return self.emulation.title

    def close(self) -> None:
        self.clock.close()


# -- putting it on a pair -----------------------------------------------------------------
def draft_token_s(drafter, threads: int, probes: int = 1) -> float:
    """This CPU's draft time per token at `threads`: the median of `probes` of the
    profiler's probe (16 tokens after a 64-token context, the least of three rounds after a
    warm-up)."""
    import numpy as np

    from models.fit.profiler import draft_once, interleaved

    ctx = [int(t) for t in np.random.default_rng(0).integers(100, 1000, SCALE_CONTEXT)]

    def probe() -> float:
        return interleaved({"d": lambda: draft_once(drafter, ctx, 16) / 16})["d"]

    prev = drafter.set_threads(threads)
    try:
        with drafter.preserved():
            return float(np.median([probe() for _ in range(probes)]))
    finally:
        drafter.set_threads(prev)


def emulate(pair, name: str, prompts: list[list[int]], n_tokens: int, clock: str = "profile",
            shape: str | None = None, progress=None, scale: float | None = None,
            sleep=time.sleep) -> Emulation:
    """Put an emulated target on `pair` in place of its real one (which computes the
    oracle of `prompts` first, then is closed). `clock`: profile, or shadow (cuda; `shape`
    'tiny' runs anywhere). `scale` (tests): instead of the measured one."""
    profile = load_profile(name)
    shape = check_clock(clock, shape, profile)
    paths = {tuple(ids): oracle_path(pair, ids, n_tokens, progress) for ids in prompts}
    forget(pair)  # the oracles' answers: the emulated lookup would copy them
    real = pair.target
    ticker = (ProfileClock(profile, 1.0, sleep) if clock == "profile"
              else ShadowClock(shadow_target(shape, _shadow_device(), real.n_ctx,
                                             profile.dtype)))
    emulation = Emulation(profile, clock, 1.0, 0, 0.0, shape)
    pair.use_target(EmulatedTarget(real, Oracle(paths, real.eos_ids), ticker, emulation))
    real.close()
    emulation.draft_threads = pair.threads.draft
    # a given scale (tests): the probe only records this CPU's time
    here = draft_token_s(pair.drafter, emulation.draft_threads,
                         SCALE_PROBES if clock == "profile" and scale is None else 1)
    emulation.draft_token_ms_here = here * 1e3
    if clock == "profile":
        measured = here / (profile.draft_token_ms / 1e3)
        emulation.scale = ticker.scale = measured if scale is None else scale
    return emulation


def emulate_prompts(pair, args, texts: list, log) -> dict:
    """The scripts' emulation: the prompts' oracles, then the emulated target; logged, and
    returned as the results record it."""
    ids = [pair.prompt_ids(t, raw=args.raw) for t in texts]
    emulation = emulate(pair, args.emulate, ids, args.max_new_tokens, args.emulate_clock,
                        args.emulate_shape, log)
    log(f"{emulation.title}: {emulation.clock} clock, scale {emulation.scale:.2f} (this CPU's "
        f"draft {emulation.draft_token_ms_here:.2f} ms a token on {emulation.draft_threads} "
        f"thread(s), the profile's {emulation.profile.draft_token_ms} ms)")
    return emulation.to_dict()


def check_clock(clock: str, shape: str | None, profile: DeviceProfile) -> str | None:
    """The shadow clock's shape (None for the profile clock); Refused by name otherwise."""
    if clock not in CLOCKS:
        raise Refused(f"--emulate-clock must be one of {', '.join(CLOCKS)}, got '{clock}'")
    if clock != "shadow":
        if shape is not None:
            raise Refused("--emulate-shape applies to --emulate-clock shadow only")
        return None
    shape = shape or profile.shape
    if shape not in SHAPES:
        raise Refused(f"--emulate-shape must be llama8b or tiny, got '{shape}'")
    if shape != "tiny" and _shadow_device() != "cuda":
        raise Refused("--emulate-clock shadow runs the profile's shape on cuda, and this "
                      "machine's torch sees no CUDA GPU (--emulate-shape tiny runs anywhere)")
    return shape


def _shadow_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
