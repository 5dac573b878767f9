"""Loads a named pair (target + draft + tokenizer + budget profile) and runs generations on it.

long: one object the CLI, the app and the benchmark share, from the load's choices and the
placement to the profiles and the generation."""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from core.backends import TargetOutOfMemory
from core.learned import Learned
from core.engine import METHOD, GenConfig, generate
from core.output import Event
from core.suffix import SuffixMemory
from models.pairs.catalog import PairError, draft_path, get_pair, target_source
from models.pairs.convert import converted_dir
from models.grammar import Grammars
from models.fit.placement import Threads, apply, draft_share, plan
from models.prompt_text import ContextOverflow, check_prompt
from models.target.choice import pick_ctx
from models.target.eager import pick_device, pick_dtype

log = logging.getLogger("duo.loader")


@dataclass
class LoadOptions:
    device: str | None = None  # None: cuda when present, else cpu
    dtype: str = "auto"  # target weights: auto (cuda bfloat16, cpu float32), or a torch dtype
    draft_prefill: str = "auto"  # prompt prefill: auto (the Q8_0 copy where faster), copy, own
    draft_attention: str = "auto"  # auto (the kernel that decoded faster here), flash, plain
    n_ctx: int | None = None  # None: the trained window, capped by memory (--ctx-size)
    target_compile: str = "auto"  # auto (cuda: on; CPU: off), on, off
    compile_buckets: tuple[int, ...] | None = None  # chunk lengths compiled (None: default)
    target_quant: str = "auto"  # auto (cuda: best that fits; CPU: fastest), none, int8, int4
    remeasure: bool = False  # time the draft threads and the budget profile again
    target_pack: bool = True  # an eager CPU target on packed weights where they fit
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)


@dataclass(frozen=True)
class TargetOptions:
    """What the target is built from, decided before it loads."""
    model_dir: Path
    device: str
    dtype: str
    n_ctx: int
    compile: str
    buckets: tuple[int, ...] | None
    quant: str
    group: int | None  # int4's group size (GGUF blocks are 32 wide), None: the default
    pack: bool  # the eager CPU target's layers on packed weights where they fit


LOOKUP_MEMORY_TOKENS = 1 << 17  # earlier requests' tokens the lookup keeps (oldest go first)
OVERLAP = "overlap: the draft beside the target on the GPU"
SPS_LOOP = "sps loop: the target shares the draft's cores"


class Pair:
    """A loaded draft/target pair: the one object the CLI, benchmark and app talk to."""

    def __init__(self, name: str, opts: LoadOptions | None = None,
                 progress: Callable[[str], None] | None = None):
        from transformers import AutoTokenizer

        from models.quiet import quiet_libraries
        from models.target.choice import load_target

        quiet_libraries()
        self.spec, self.opts = get_pair(name), opts or LoadOptions()
        say = self._progress = progress or (lambda m: log.info(m))
        t0 = time.perf_counter()
        self.cores = max(1, self.opts.cores)
        self.target_opts = t = self._target_options(say)
        say(f"loading target {target_source(self.spec)[1].name} on {t.device} ({t.dtype}, "
            f"weights {t.quant}, context {t.n_ctx})")
        self.target = _build_target(load_target, t, say, plan(t.device, self.cores, 1).target)
        self.drafter = None
        # a fast tokenizer is not thread-safe: the page's meter and /tokenize run beside decoding
        self.tokenizer_lock = threading.RLock()
        try:  # a load that fails half-way frees what it loaded (a GPU must not keep it)
            self.tokenizer = _tokenizer(AutoTokenizer, t.model_dir, self.spec.name)
            self.drafter = self._load_draft(t.n_ctx, say)
            self.threads = self._plan(self.opts.remeasure)
        except BaseException:
            self.close()
            raise
        self.load_s = time.perf_counter() - t0
        self.grammars = Grammars(self.tokenizer, self.target.vocab_size, self.target.eos_ids)
        self.profile = None
        self.learned = Learned()  # budget, odds, draft health across generations
        # earlier prompts and outputs, for the lookup (the benchmark clears it per measured run)
        self.lookup_memory = SuffixMemory(cap_tokens=LOOKUP_MEMORY_TOKENS)
        self._measure_again = self.opts.remeasure  # --remeasure: the first profile too

    @property
    def target_dir(self) -> Path:
        return self.target_opts.model_dir

    def _target_options(self, say) -> TargetOptions:
        """The target's device, dtype, window and precision, from the options and memory."""
        from models.target.choice import pick_quant_kind

        o = self.opts
        kind, target_file = target_source(self.spec)
        device = _check_device(o.device or pick_device())
        dtype = pick_dtype(device, o.dtype)
        model_dir = (converted_dir(_check_gguf(target_file), say, dtype) if kind == "gguf"
                     else target_file)
        group = 32 if kind == "gguf" else None  # GGUF blocks are 32 wide: int4 stays near-exact
        n_ctx, self.ctx_reason = pick_ctx(model_dir, device, dtype, o.n_ctx, o.target_quant, group)
        quant, self.quant_reason = pick_quant_kind(model_dir, device, dtype, n_ctx,
                                                   o.target_quant, group, say)
        return TargetOptions(model_dir, device, dtype, n_ctx, o.target_compile,
                             o.compile_buckets, quant, group, o.target_pack)

    def _load_draft(self, n_ctx: int, say):
        """The draft on its chosen attention kernel, with its vocabulary and prefill copy."""
        from models.draft.attention import choose_attention
        from models.draft.llama import LlamaDrafter
        from models.draft.prefill import choose_prefill

        gguf = self.draft_gguf = _check_gguf(draft_path(self.spec))
        o = self.opts
        self.attention_choice = choose_attention(gguf, o.draft_attention, self.cores,
                                                 o.remeasure, say)
        say(f"loading draft {gguf.name} on the CPU")
        drafter = LlamaDrafter(gguf, n_threads=1,
                               n_ctx=draft_window(n_ctx, self.spec.same_tokenizer),
                               attention=self.attention_choice.kind)
        self.drafter = drafter  # closed with the pair should what follows fail
        drafter.vocab = self._vocab()
        drafter.prefill, self.prefill_choice = choose_prefill(
            drafter, gguf, o.draft_prefill, self.cores, o.remeasure, say)
        return drafter

    def _plan(self, remeasure: bool) -> Threads:
        """The frozen thread plan: the draft's count measured within its share."""
        from models.fit.profiler import fastest_threads, pick_draft_threads

        device = self.target.device
        self.thread_times = pick_draft_threads(self.spec.name, self.drafter,
                                               draft_share(device, self.cores), self._progress,
                                               remeasure)
        threads = plan(device, self.cores, fastest_threads(self.thread_times))
        apply(threads, self.drafter, self.target)
        return threads

    def _vocab(self):
        """The load-time analysis (cached on disk) decides, byte by byte: identical
        vocabularies pass ids through, others get a translating vocabulary (the catalog's
        `same_tokenizer` is only a hint); PairError when the two cannot work together."""
        from models.pairs.vocab_build import build_vocab

        try:
            return build_vocab(self.drafter, self.tokenizer, self.target.vocab_size,
                               set(self.target.eos_ids), log.info)
        except PairError as e:
            raise PairError(f"pair '{self.spec.name}': {e}") from e

    # -- the budget profile -----------------------------------------------------------------
    @property
    def overlapped(self) -> bool:
        """Whether duo's draft runs beside the target (else sps's loop, with the lookup)."""
        return self.threads.overlapped

    def ensure_profile(self, remeasure: bool = False):
        """The budget profile (one for the pair: its thread plan is fixed): cached, or measured
        when asked or at --remeasure. A generation's times that drift off it are the budget's
        online scales (core/budget.py), not a measurement before its first token (a second
        or more, and many under load)."""
        from models.fit.profiler import load_or_measure

        again, self._measure_again = remeasure or self._measure_again, False
        self.profile = load_or_measure(self.spec.name, self.drafter, self.target,
                                       (self.threads.draft, self.threads.target), again,
                                       self._progress)
        return self.profile

    def use_target(self, target) -> None:
        """Verify with `target` from now on (the benchmark's emulated GPU target): the thread
        plan is made again for its device (the draft's count measured), the profile looked up
        again. The caller closes the one it replaces."""
        self.target = target
        self.threads, self.profile = self._plan(False), None

    def remeasure(self) -> None:
        """Time this machine again (the page's button): the draft's threads, then the budget
        profile."""
        self.threads = self._plan(remeasure=True)
        self.ensure_profile(remeasure=True)

    # -- prompts and generation ---------------------------------------------------------
    def prompt_ids(self, prompt: str | list[dict], raw: bool = False,
                   tools: list[dict] | None = None) -> list[int]:
        """`tools` (JSON-schema function definitions) go to the chat template."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        check_prompt(messages, self.target.n_ctx)  # before tokenizing: a 2 MB paste is quick
        with self.tokenizer_lock:
            if raw or not self.tokenizer.chat_template:
                text = "".join(m["content"] for m in messages)
                ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
            else:
                ids = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=True,
                                                         add_generation_prompt=True)["input_ids"]
        limit = self.target.n_ctx - 1
        if len(ids) > limit:
            raise ContextOverflow(f"the prompt is {len(ids)} tokens; the context window "
                             f"({self.target.n_ctx} tokens) allows {limit}")
        return list(ids)

    def check_room(self, ids: list[int], max_new_tokens: int) -> None:
        """The one context rule, checked before generating: prompt plus new tokens fit."""
        room = self.target.n_ctx - len(ids)
        if max_new_tokens > room:
            raise ContextOverflow(f"the prompt ({len(ids)} tokens) plus {max_new_tokens} new tokens "
                             f"exceed the context window of {self.target.n_ctx} tokens; at "
                             f"most {room} new tokens fit")

    def decode(self, ids: list[int]) -> str:
        with self.tokenizer_lock:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_text(self, token: int) -> str:
        """One token's text (logprobs name their tokens by it)."""
        with self.tokenizer_lock:
            return self.tokenizer.decode([token])

    def check_format(self, response_format: dict | None) -> None:
        """ValueError naming what is wrong with a response_format (its grammar is compiled)."""
        self.grammars.compile(response_format)

    def generate(self, prompt_ids: list[int], cfg: GenConfig,
                 stop: Callable[[], bool] | None = None) -> Iterator[Event]:
        cfg.validate()
        does = METHOD[cfg.method]
        profile = self.ensure_profile() if does.budgeted else None
        apply(self.threads, self.drafter, self.target)  # the plan, once a generation
        drafter = self.drafter if does.drafts else None
        grammar = self.grammars.compile(cfg.response_format)
        out: list[int] = []
        try:
            for ev in self._events(generate(self.target, drafter, prompt_ids, cfg, self.decode,
                                            profile, stop, learned=self.learned, grammar=grammar,
                                            lookup_memory=self.lookup_memory,
                                            shared_cores=not self.overlapped), cfg.method):
                out += ev.tokens
                if ev.done:  # the lookup remembers it for later requests
                    self.lookup_memory.add(list(prompt_ids) + out)
                yield ev
        except TargetOutOfMemory:
            _empty_cuda_cache(self.target.device)  # the next generation starts with room
            raise

    def _events(self, events: Iterator[Event], method: str) -> Iterator[Event]:
        for ev in events:
            if ev.stats is not None:
                t = self.target
                ev.stats["threads"] = self.threads.to_dict()
                if METHOD[method].overlaps:
                    ev.stats["schedule"] = OVERLAP if self.overlapped else SPS_LOOP
                ev.stats.update(vocab=self.drafter.vocab.stats(), target_dtype=t.dtype,
                                target_device=t.device, target_path=t.path, target_quant=t.quant,
                                target_packed=t.packed, draft_prefill=self.prefill_choice.to_dict(),
                                draft_attention=self.attention_choice.to_dict())
            yield ev

    def describe(self) -> dict:
        """The placement for the app: `summary`, one short line's two halves (where the draft
        and the target run, at what precision), and under `draft` and `target` the reasons
        and measured figures behind each choice."""
        return {"draft": f"CPU, {self.threads.draft} thread(s), {self.draft_gguf.name}, "
                         f"attention: {self.attention_choice.reason}, prompt "
                         f"prefill: {self.prefill_choice.reason}",
                "target": f"{self.target.device_name()}, {self.target.dtype}, weights "
                          f"{self.target.quant} ({self.quant_reason.split(' [')[0]}), "
                          f"{self.target.path} ({self.target.compile_choice}), "
                          f"{self.target.pack_choice}",
                "summary": summary(self.threads.draft, self.target)}

    def close(self) -> None:
        if self.drafter is not None:
            self.drafter.close()
        self.target.close()


PATH_WORDS = {"static-compiled": "compiled", "static": "static cache", "eager": "eager"}


def summary(draft_threads: int, target) -> dict:
    """Where the draft and the target run and at what precision, a few words each:
    {"draft": "CPU, 1 thread", "target": "CPU, float32, compiled"}."""
    precision = target.dtype if target.quant == "none" else f"{target.quant} weights, {target.dtype}"
    threads = f"{draft_threads} thread" + ("" if draft_threads == 1 else "s")
    return {"draft": f"CPU, {threads}",
            "target": f"{target.device_name()}, {precision}, "
                      f"{PATH_WORDS.get(target.path, target.path)}"}


def draft_window(n_ctx: int, same_tokenizer: bool) -> int:
    """The draft's window from the target's: the same text may take more draft tokens with another
    tokenizer (twice is ample), plus room for one chunk. LlamaDrafter keeps it within the draft's
    trained window; past its window the draft proposes nothing and the target goes on alone."""
    return (n_ctx if same_tokenizer else 2 * n_ctx) + 64


def _build_target(load_target, t: TargetOptions, say, threads: int):
    """The target at the plan's thread count (a compiled CPU target's graphs keep it)."""
    import torch

    if not t.device.startswith("cuda"):
        torch.set_num_threads(threads)
    return load_target(t.model_dir, t.device, t.dtype, t.n_ctx, t.compile, t.buckets, say,
                       t.quant, t.group, t.pack)


def _tokenizer(auto, model_dir, pair: str):
    """The target's tokenizer; PairError in one line where the folder has none."""
    try:
        return auto.from_pretrained(str(model_dir))
    except (OSError, ValueError) as e:
        why = (str(e).strip() or type(e).__name__).splitlines()[0]  # transformers': 5 lines
        raise PairError(f"pair '{pair}': no tokenizer loads from {model_dir}: {why}") from e


def _empty_cuda_cache(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _check_device(device: str) -> str:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PairError(f"--device {device}: this machine's torch sees no CUDA GPU "
                        f"(torch {torch.__version__}); use --device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise PairError(f"--device must be cpu or cuda, got '{device}'")
    return device


def _check_gguf(path: Path) -> Path:
    """A readable GGUF file, or a one-line reason why not."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise PairError(f"cannot read model file {path}: {e.strerror}") from None
    if magic != b"GGUF":
        raise PairError(f"{path} is not a GGUF model file")
    return path
