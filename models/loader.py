"""Loads a named pair (target + draft + tokenizer + budget profile) and runs generations on it.

long: one object the CLI, the app and the benchmark share, from the load's choices and the
placement to the profiles and the generation."""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

from core.backends import TargetOutOfMemory
from core.learned import Learned
from core.config import SCHEDULES
from core.engine import GenConfig, generate
from core.output import Event
from core.suffix import SuffixMemory
from core.turns import TURNS, Schedule, choose
from models.pairs.catalog import PairError, draft_path, get_pair, target_source
from models.pairs.convert import converted_dir
from models.draft.format import pick_draft
from models.grammar import Grammars
from models.fit.placement import Placement, Threads, draft_share, target_share
from models.prompt_text import ContextOverflow, check_prompt
from models.target.choice import pick_ctx
from models.target.eager import pick_device, pick_dtype

log = logging.getLogger("duo.loader")


@dataclass
class LoadOptions:
    device: str | None = None  # None: cuda when present, else cpu
    dtype: str = "auto"  # target weights: auto (cuda bfloat16, cpu float32), or a torch dtype
    draft_format: str = "original"  # draft weights: original, or q8_0 (a cached copy)
    draft_prefill: str = "auto"  # prompt prefill: auto (the Q8_0 copy where faster), copy, own
    draft_attention: str = "auto"  # auto (the kernel that decoded faster here), flash, plain
    n_ctx: int | None = None  # None: the trained window, capped by memory (--ctx-size)
    target_compile: str = "auto"  # auto (cuda: on; CPU: what measured faster for duo), on, off
    compile_buckets: tuple[int, ...] | None = None  # chunk lengths compiled (None: default)
    target_quant: str = "auto"  # auto (cuda: best that fits; CPU: fastest), none, int8, int4
    target_pack: str = "auto"  # auto (a float32 CPU target, where the copy fits), on, off
    remeasure: bool = False  # time the path, the draft threads and the budget profiles again
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    # duo's schedule where a generation leaves it auto (core/turns.py): auto (priced each
    # generation), overlap or turns; from DUO_SCHEDULE (the suite holds overlap: conftest.py)
    schedule: str = field(default_factory=lambda: os.environ.get("DUO_SCHEDULE", "auto"))


LOOKUP_MEMORY_TOKENS = 1 << 17  # earlier requests' tokens the lookup keeps (oldest go first)


class Pair:
    """A loaded draft/target pair: the one object the CLI, benchmark and app talk to."""

    def __init__(self, name: str, opts: LoadOptions | None = None,
                 progress: Callable[[str], None] | None = None):
        from transformers import AutoTokenizer

        from models.draft.attention import choose_attention
        from models.draft.llama import LlamaDrafter
        from models.draft.prefill import choose_prefill
        from models.quiet import quiet_libraries
        from models.target.choice import load_target, pick_quant_kind

        quiet_libraries()
        self.spec, self.opts = get_pair(name), opts or LoadOptions()
        say = progress or (lambda m: log.info(m))
        t0 = time.perf_counter()
        kind, target_file = target_source(self.spec)
        self.draft_format = pick_draft(_check_gguf(draft_path(self.spec)),
                                       self.opts.draft_format, say)
        draft_gguf = self.draft_format.path
        device = _check_device(self.opts.device or pick_device())
        dtype = pick_dtype(device, self.opts.dtype)
        model_dir = (converted_dir(_check_gguf(target_file), say, dtype) if kind == "gguf"
                     else target_file)
        self.target_dir = model_dir
        group = 32 if kind == "gguf" else None  # GGUF blocks are 32 wide: int4 stays near-exact
        n_ctx, self.ctx_reason = pick_ctx(model_dir, device, dtype, self.opts.n_ctx,
                                          self.opts.target_quant, group)
        quant, self.quant_reason = pick_quant_kind(model_dir, device, dtype, n_ctx,
                                                   self.opts.target_quant, group, say)
        say(f"loading target {target_file.name} on {device} ({dtype}, weights {quant}, "
            f"context {n_ctx})")
        self._target_args = (model_dir, device, dtype, n_ctx, self.opts.target_compile,
                             self.opts.compile_buckets, say, quant, group, self.opts.target_pack)
        self._duo_share = target_share(device, max(1, self.opts.cores))  # the path is timed at it
        self.target = load_target(*self._target_args, remeasure=self.opts.remeasure,
                                  threads=self._duo_share, cores=max(1, self.opts.cores))
        self.drafter = None
        # a fast tokenizer is not thread-safe: the page's meter and /tokenize run beside decoding
        self.tokenizer_lock = threading.RLock()
        try:  # a load that fails half-way frees what it loaded (a GPU must not keep it)
            self.tokenizer = _tokenizer(AutoTokenizer, model_dir, self.spec.name)
            cores = max(1, self.opts.cores)
            self.attention_choice = choose_attention(draft_gguf, self.opts.draft_attention,
                                                     cores, self.opts.remeasure, say)
            say(f"loading draft {draft_gguf.name} on the CPU")
            self.drafter = LlamaDrafter(draft_gguf, n_threads=1,
                                        n_ctx=draft_window(n_ctx, self.spec.same_tokenizer),
                                        attention=self.attention_choice.kind)
            self.drafter.vocab = self._vocab()
            self.drafter.prefill, self.prefill_choice = choose_prefill(
                self.drafter, draft_gguf, self.opts.draft_prefill, cores, self.opts.remeasure, say)
        except BaseException:
            self.close()
            raise
        self.load_s = time.perf_counter() - t0
        self.grammars = Grammars(self.tokenizer, self.target.vocab_size, self.target.eos_ids)
        self.profile = None
        # budget, odds, draft health across generations; DUO_DRIFT_CHECKS=off: tests/profiles.py
        self.learned = Learned(drift_checks=os.environ.get("DUO_DRIFT_CHECKS") != "off")
        # earlier prompts and outputs, for the lookup (the benchmark clears it per measured run)
        self.lookup_memory = SuffixMemory(cap_tokens=LOOKUP_MEMORY_TOKENS)
        self._remeasured: set[tuple[int, int]] = set()
        self._placement: Placement | None = None
        self._thread_times: dict[int, float] = {}  # draft threads -> s/token
        self._time_threads_again = self.opts.remeasure  # --remeasure: at the first placement
        self._progress = say

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

    # -- placement and the budget profile ------------------------------------------------
    def placement(self) -> Placement:
        """Devices and thread counts, computed once (the draft's thread count is measured)."""
        if self._placement is None:
            from models.fit.profiler import fastest_threads, pick_draft_threads

            device, cores = self.target.device, max(1, self.opts.cores)
            times = self._thread_times = pick_draft_threads(
                self.spec.name, self.drafter, cores, self._progress, self._time_threads_again)
            self._time_threads_again = False
            share = draft_share(device, cores)
            beside = fastest_threads({n: s for n, s in times.items() if n <= share})
            # an OpenMP build's threads slept at its barriers under models/__init__.py's
            # passive wait policy (LlamaDrafter.thread_pool): it keeps its share alone too
            openmp = getattr(self.drafter, "thread_pool", "") == "openmp"
            alone = beside if openmp else fastest_threads(times)
            self._placement = Placement(device, cores, beside, self.target.graph_threads, alone)
        return self._placement

    def threads(self, method: str) -> Threads:
        """`method`'s thread settings (one question to the placement)."""
        return self.placement().for_method(method)

    def apply_threads(self, method: str) -> Threads:
        """`method`'s thread settings, set on the draft and the target."""
        return self.placement().apply(self.threads(method), self.drafter, self.target)

    def ensure_profile(self, method: str, remeasure: bool = False,
                       threads: Threads | None = None, key: str | None = None):
        """The budget profile for `method`'s thread split (`threads`: already applied; else
        asked and applied here): cached, or measured when asked, at --remeasure, or when the
        last generation's times drifted WIDE off it (the learned budget `key`, else
        `method`'s: duo in turns keeps its own on sps's profile)."""
        from models.fit.profiler import load_or_measure, spot_check

        threads = threads or self.apply_threads(method)
        split = (threads.draft, threads.target)
        key = key or method
        drift = self.learned.drifted(key)  # online times far off the profile
        again = remeasure or (self.opts.remeasure and split not in self._remeasured)
        if drift and not again:  # a second's spot check first: the whole profile takes many
            old = self.learned.budgets[key]["profile"]
            again = not self.learned.measured_again(key, old,
                                                    spot_check(self.drafter, self.target))
        self.profile = load_or_measure(self.spec.name, self.drafter, self.target, split,
                                       again, self._progress)
        if drift and again:
            self.learned.measured_again(key, self.learned.budgets[key]["profile"],
                                        self.profile)
        self.profile.draft_threads = dict(self._thread_times)
        solo, solo_threads = self._solo(method, threads, again)  # then both priced as run:
        self.profile.verify_s = self.target.pad_chunks(self.profile.verify_s, threads.target)
        if solo:
            solo = self.target.pad_chunks(solo, solo_threads)
        self.profile.solo_verify_s, self.profile.solo_threads = solo, solo_threads
        self._remeasured.add(split)  # --remeasure: once per thread split, not every call
        return self.profile

    def _solo(self, method: str, threads: Threads, again: bool) -> tuple[list[float], int]:
        """duo's solo lookup rounds' times and thread count (profiler.solo_times), or none."""
        from models.fit.profiler import solo_times

        if method != "duo" or self.target.device.startswith("cuda"):
            return [], 0  # a GPU verify loses nothing to the draft beside it
        split = (threads.alone or threads.draft, threads.prefill)  # sps's: measured once for both
        again = again and split not in self._remeasured
        self._remeasured.add(split)
        return solo_times(self.spec.name, self.drafter, self.target, threads, self.profile,
                          again, self._progress)

    def remeasure(self) -> None:
        """Time this machine again (the page's button): the compiled-vs-eager verdict where it
        was timed (the target is loaded again when it changes), the draft's threads and the
        budget profiles of duo and sps."""
        from models.target.choice import load_target

        model_dir, device, dtype, n_ctx, compile = self._target_args[:5]
        if compile == "auto" and device == "cpu":
            self.target.close()
            self.target = load_target(*self._target_args, remeasure=True,
                                      threads=self._duo_share, cores=max(1, self.opts.cores))
        self._placement, self._time_threads_again = None, True
        for method in ("sps", "duo"):  # sps's profile serves duo's solo rounds too
            self.ensure_profile(method, remeasure=True)

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
        cfg, schedule, priced = self._schedule(cfg)
        side = "sps" if cfg.turns else cfg.method  # duo in turns: sps's threads and profile
        threads = self.apply_threads(side)  # asked once, applied once, passed down
        cfg = replace(cfg, prefill_threads=threads.prefill)
        profile = priced.get(side)  # the schedule's pricing looked it up already
        if profile is None and cfg.method != "vanilla":
            profile = self.ensure_profile(side, threads=threads, key=TURNS if cfg.turns else None)
        drafter = None if cfg.method in ("vanilla", "lookup") else self.drafter
        grammar = self.grammars.compile(cfg.response_format)
        out: list[int] = []
        try:
            for ev in self._events(generate(self.target, drafter, prompt_ids, cfg, self.decode,
                                            profile, stop, learned=self.learned, grammar=grammar,
                                            lookup_memory=self.lookup_memory), threads,
                                   schedule):
                out += ev.tokens
                if ev.done:  # the lookup remembers it for later requests
                    self.lookup_memory.add(list(prompt_ids) + out)
                yield ev
        except TargetOutOfMemory:
            _empty_cuda_cache(self.target.device)  # the next generation starts with room
            raise

    def _schedule(self, cfg: GenConfig) -> tuple[GenConfig, Schedule | None, dict]:
        """duo's schedule (core/turns.py): the user's (the generation's, else the pair's
        default); the overlap where the target does not share the draft's cores (cuda) or an
        option applies to it alone (--sequential, --static-k); else the one priced faster
        from both profiles (each measured once, then cached), returned by side (duo, sps)."""
        if cfg.method != "duo":
            return cfg, None, {}
        wanted = cfg.schedule if cfg.schedule != "auto" else self.opts.schedule
        if wanted not in SCHEDULES:
            raise ValueError(f"unknown schedule '{wanted}' (DUO_SCHEDULE); known: "
                             f"{', '.join(SCHEDULES)}")
        if wanted != "auto":
            by = "asked for" if cfg.schedule != "auto" else "the default (DUO_SCHEDULE)"
            schedule = Schedule(wanted, f"{wanted}: {by}")
        elif self.placement().on_cuda:
            schedule = Schedule("overlap", "overlap: the target runs on the GPU, beside the "
                                           "draft's cores")
        elif cfg.sequential or cfg.static_k:
            schedule = Schedule("overlap", "overlap: --sequential or --static-k asked for it")
        else:  # sps's split serves the turns, whose drift is their own budget's
            priced = {"duo": self.ensure_profile("duo"),
                      "sps": self.ensure_profile("sps", key=TURNS)}
            schedule = choose(self.learned, priced["duo"], priced["sps"], cfg.gamma)
            return replace(cfg, schedule=schedule.kind), schedule, priced
        return replace(cfg, schedule=schedule.kind), schedule, {}

    def _events(self, events: Iterator[Event], threads: Threads,
                schedule: Schedule | None) -> Iterator[Event]:
        for ev in events:
            if ev.stats is not None:
                ev.stats["threads"] = threads.to_dict()
                if schedule is not None:
                    ev.stats["schedule"] = schedule.to_dict()
                ev.stats["vocab"] = self.drafter.vocab.stats()
                ev.stats["target_dtype"] = self.target.dtype
                ev.stats["target_device"] = self.target.device
                ev.stats["target_path"] = self.target.path
                ev.stats["target_quant"] = self.target.quant
                ev.stats["draft_format"] = self.draft_format.to_dict()
                ev.stats["draft_prefill"] = self.prefill_choice.to_dict()
                ev.stats["draft_attention"] = self.attention_choice.to_dict()
            yield ev

    def describe(self) -> dict:
        """The placement for the app: `summary`, one short line's two halves (where the draft
        and the target run, at what precision), and under `draft` and `target` the reasons
        and measured figures behind each choice."""
        duo = self.threads("duo")
        fmt = self.draft_format
        alone = f" ({duo.alone} alone)" if duo.alone else ""
        return {"draft": f"CPU, {duo.draft} thread(s){alone}, {fmt.path.name} ({fmt.kind}), "
                         f"attention: {self.attention_choice.reason}, prompt "
                         f"prefill: {self.prefill_choice.reason}",
                "target": f"{self.target.device_name()}, {self.target.dtype}, weights "
                          f"{self.target.quant} ({self.quant_reason.split(' [')[0]}), "
                          f"{self.target.path} ({self.target.compile_choice}), "
                          f"packed weights: {self.target.pack_choice}",
                "summary": summary(duo.draft, self.target)}

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
    """The draft's window from the target's: the same text may take more draft tokens with
    another tokenizer (twice is ample), plus room for one chunk. LlamaDrafter keeps it
    within the draft's trained window; past its window the draft proposes nothing and the
    target goes on alone."""
    return (n_ctx if same_tokenizer else 2 * n_ctx) + 64


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


__all__ = ["Pair", "LoadOptions", "PairError", "pick_device"]
