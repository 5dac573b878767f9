"""Peer methods the benchmark compares with: transformers' own generate on the pair's target
weights (assisted, prompt lookup, static cache; a model of their own sharing the weights, on
every target path: measure/peer_model.py) and the target's GGUF decoded by llama.cpp alone."""
from __future__ import annotations

import logging
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

from core.sampling import SamplingConfig
from models.pairs.catalog import draft_path, target_source
from models.pairs.convert import converted_dir
from models.draft.llama import extra_buffers_safe
from measure.llama_lookup import counting_lookup, lookup_counts
from measure.peer_model import peer_model

PEERS = ("hf-assisted", "hf-pld", "hf-static", "llamacpp", "llamacpp-lookup")
PLD_TOKENS = 10  # prompt_lookup_num_tokens
MIN_STATIC_LEN = 256  # the static cache is sized in powers of two from here to the window
STATIC_COMPILE = True  # hf-static compiles (tests set False: minutes on a CPU)

log = logging.getLogger("duo.peers")


@dataclass
class PeerConfig:
    method: str
    max_new_tokens: int = 128
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0

    def validate(self) -> None:
        if self.method not in PEERS:
            raise ValueError(f"unknown peer method '{self.method}'; known: {', '.join(PEERS)}")
        if self.max_new_tokens <= 0:
            raise ValueError(f"--max-new-tokens must be > 0, got {self.max_new_tokens}")
        self.sampling.validate()


def peer_config(method: str, gen) -> PeerConfig:
    """The peer's settings from a GenConfig the CLI built (length, sampling, seed)."""
    cfg = PeerConfig(method, gen.max_new_tokens, gen.sampling, gen.seed)
    cfg.validate()
    return cfg


def check(pair, method: str) -> None:
    """ValueError now, before any run, when the pair cannot run this peer."""
    if method in ("llamacpp", "llamacpp-lookup"):
        gguf_target(pair.spec)


def run_peer(pair, prompt_ids: list[int], cfg: PeerConfig) -> dict:
    """One cold generation with a peer method; the stats keys are the engine's."""
    cfg.validate()
    if pair not in _runners:
        _runners[pair] = Peers(pair)
    return _runners[pair].run(prompt_ids, cfg)


_runners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # one per loaded pair


def gguf_target(spec):
    kind, path = target_source(spec)
    if kind != "gguf":
        raise ValueError(f"llamacpp decodes the target's own GGUF; pair '{spec.name}' has a "
                         f"safetensors target ({path})")
    return path


class Peers:
    """The peers on one pair: the transformers peers run a model of their own made from the
    pair's target (its weights shared, attention at SDPA, whatever path the target runs); the
    assistant (the draft's PyTorch weights) and the llama.cpp target load on first use. Each
    peer runs alone, on every core."""

    def __init__(self, pair):
        self.pair = pair
        self.model = None  # peer_model(pair.target), made at the first transformers run
        self.assistant = None  # (model, tokenizer or None when the pair shares one)
        self.llama = None
        self.llama_lookup = None  # the same GGUF with llama.cpp's prompt-lookup drafts
        self.static_len = 0  # the static cache's length so far (it only grows)
        self.compile = STATIC_COMPILE

    def run(self, ids: list[int], cfg: PeerConfig) -> dict:
        go = {"hf-assisted": self._assisted, "hf-pld": self._pld, "hf-static": self._static,
              "llamacpp": self._llamacpp, "llamacpp-lookup": self._llamacpp_lookup}[cfg.method]
        return {"method": cfg.method, **go(ids, cfg)}

    # -- transformers --------------------------------------------------------------------
    def _assisted(self, ids, cfg) -> dict:
        model, tok = self._load_assistant()
        extra = {"assistant_model": model}
        if tok is not None:  # universal assisted decoding: text is the common ground
            extra.update(tokenizer=self.pair.tokenizer, assistant_tokenizer=tok)
        return self._hf(ids, cfg, speculative=True, **extra)

    def _pld(self, ids, cfg) -> dict:
        return self._hf(ids, cfg, speculative=True, prompt_lookup_num_tokens=PLD_TOKENS)

    def _static(self, ids, cfg) -> dict:
        self._grow_static(ids, len(ids) + cfg.max_new_tokens)
        stats = self._static_run(ids, cfg)
        return {**stats, "compiled": self.compile, "static_cache_len": self.static_len}

    def _static_run(self, ids, cfg) -> dict:
        from transformers import CompileConfig

        kw = {"cache_implementation": "static", "max_cache_len": self.static_len}
        if not self.compile:
            return self._hf(ids, cfg, disable_compile=True, **kw)
        compile_config = CompileConfig()
        compile_config._compile_all_devices = True  # transformers compiles on cuda only
        return self._hf(ids, cfg, compile_config=compile_config, **kw)

    def _grow_static(self, ids: list[int], need: int) -> None:
        """Size the static cache for `need` tokens (a power of two, at most the window); when
        it grows, compile for the new size in an untimed run first."""
        size = MIN_STATIC_LEN
        while size < need:
            size *= 2
        size = min(size, self.pair.target.n_ctx)
        if size <= self.static_len:
            return
        self.static_len = size
        if not self.compile:
            return
        t0 = time.perf_counter()
        self._static_run(ids[:16], PeerConfig("hf-static", 2))
        log.info(f"hf-static: static cache grew to {size} tokens; compiled in "
                 f"{time.perf_counter() - t0:.1f} s (not timed)")

    def _hf(self, ids, cfg, speculative: bool = False, **extra) -> dict:
        import torch

        target = self.pair.target
        if self.model is None:
            self.model = peer_model(target)
        model, eos = self.model, sorted(target.eos_ids)
        pad = model.generation_config.pad_token_id
        x = torch.tensor([ids], dtype=torch.long, device=target.device)
        streamer = first_token_streamer()
        prev = torch.get_num_threads()  # the target's set_threads may keep a compiled count
        if not self._on_cuda():
            torch.set_num_threads(self.pair.opts.cores)
        torch.manual_seed(cfg.seed)
        try:
            with torch.inference_mode():
                streamer.start()
                out = model.generate(x, attention_mask=torch.ones_like(x), streamer=streamer,
                                     max_new_tokens=self._room(ids, cfg), eos_token_id=eos,
                                     pad_token_id=pad if pad is not None else eos[0],
                                     **_sampling(cfg.sampling), **extra)
                target.synchronize()
                wall = time.perf_counter() - streamer.t0
        finally:
            torch.set_num_threads(prev)
        tokens, reason = _until_eos(out[0, len(ids):].tolist(), target.eos_ids, cfg)
        rounds = streamer.pushes if speculative else 0
        accepted = streamer.tokens - streamer.pushes if speculative else 0
        return _stats(tokens, wall, streamer.ttft, reason, rounds=rounds, accepted=accepted)

    def _room(self, ids, cfg) -> int:
        return max(1, min(cfg.max_new_tokens, self.pair.target.n_ctx - len(ids)))

    def _on_cuda(self) -> bool:
        return self.pair.target.device.startswith("cuda")

    def _load_assistant(self):
        if self.assistant is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            target = self.pair.target
            folder = converted_dir(draft_path(self.pair.spec), log.info)
            log.info(f"hf-assisted: loading the draft's PyTorch weights ({folder.name}) on "
                     f"{target.device} ({target.model.dtype})")
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=target.model.dtype,
                                                         use_safetensors=True)
            model.to(target.device).eval()
            same = self.pair.spec.same_tokenizer
            self.assistant = (model, None if same else AutoTokenizer.from_pretrained(str(folder)))
        return self.assistant

    # -- llama.cpp -----------------------------------------------------------------------
    def _llamacpp(self, ids, cfg) -> dict:
        return self._llama_run(self._load_llama(), ids, cfg)[0]

    def _llamacpp_lookup(self, ids, cfg) -> dict:
        """llama.cpp with its prompt-lookup drafts on the same GGUF (llama-cpp-python's
        LlamaPromptLookupDecoding, hf-pld's settings)."""
        if self.llama_lookup is None:
            self.llama_lookup = self._load_llama(counting_lookup())
        self.llama_lookup.draft_model.reset()
        stats, emitted = self._llama_run(self.llama_lookup, ids, cfg)
        return {**stats, **lookup_counts(self.llama_lookup.draft_model, emitted)}

    def _llama_run(self, llm, ids, cfg) -> tuple[dict, int]:
        """One cold run; its stats and how many tokens llama gave (eos included)."""
        prompt = self._llama_prompt(llm, ids)
        eos = self.pair.target.eos_ids if self._llama_shares_ids(llm) else {llm.token_eos()}
        n = max(1, min(cfg.max_new_tokens, llm.n_ctx() - len(prompt)))
        s = cfg.sampling
        llm.reset()  # cold: no prefix from the run before
        llm.set_seed(cfg.seed)
        tokens, ttft, reason, emitted = [], 0.0, "max_new_tokens", 0
        t0 = time.perf_counter()
        for tok in llm.generate(prompt, temp=s.temperature, top_k=s.top_k, top_p=s.top_p,
                                min_p=0.0, repeat_penalty=1.0, reset=False):
            ttft, emitted = ttft or time.perf_counter() - t0, emitted + 1
            if tok in eos:
                reason = "eos"
                break
            tokens.append(tok)
            if len(tokens) >= n:
                break
        return _stats(tokens, time.perf_counter() - t0, ttft, reason), emitted

    def _load_llama(self, draft=None):
        """The target's GGUF in llama.cpp (kept as self.llama), or a second copy drafting with
        `draft` (returned), with the logits of every row: llama-cpp-python keeps n_batch rows
        otherwise, and a prompt past them fails once a draft model is set."""
        if self.llama is None or draft is not None:
            import llama_cpp

            path = gguf_target(self.pair.spec)
            gpu = llama_cpp.llama_supports_gpu_offload()
            cores = self.pair.opts.cores
            where = "every layer on the GPU" if gpu else f"the CPU, {cores} threads"
            log.info(f"llamacpp: loading {path.name} in llama.cpp ({where})")
            with _model_defaults(use_extra_bufts=extra_buffers_safe()):
                llm = llama_cpp.Llama(model_path=str(path), n_gpu_layers=-1 if gpu else 0,
                                      n_ctx=self.pair.target.n_ctx, n_threads=cores,
                                      n_threads_batch=cores, verbose=False, draft_model=draft,
                                      logits_all=draft is not None)
            if draft is not None:
                return llm
            self.llama = llm
        return self.llama

    def _llama_shares_ids(self, llm) -> bool:
        """The target's weights were converted from this GGUF, so its ids are llama's ids,
        unless the converted tokenizer's vocabulary size says otherwise."""
        return llm.n_vocab() == len(self.pair.tokenizer)

    def _llama_prompt(self, llm, ids: list[int]) -> list[int]:
        """The target's prompt ids; re-tokenized from the text by llama's own tokenizer only
        when the two vocabularies differ."""
        if self._llama_shares_ids(llm):
            return list(ids)
        text = self.pair.tokenizer.decode(ids, skip_special_tokens=False)
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


@contextmanager
def _model_defaults(**fields):
    """Llama() has no argument for some llama.cpp model params (the extra weight buffers that
    crash where AMX is advertised, as for the drafter); set them in the defaults it reads."""
    import llama_cpp.llama_cpp as C

    default = C.llama_model_default_params

    def params():
        p = default()
        for k, v in fields.items():
            setattr(p, k, v)
        return p
    C.llama_model_default_params = params
    try:
        yield
    finally:
        C.llama_model_default_params = default


def first_token_streamer():
    """A transformers streamer that records when the first new tokens arrive, how many pushes
    there were (one per speculative round) and how many tokens they held."""
    from transformers.generation.streamers import BaseStreamer

    class FirstToken(BaseStreamer):
        def __init__(self):
            self.t0, self.ttft, self.pushes, self.tokens = 0.0, 0.0, -1, 0  # push 0: the prompt

        def start(self) -> None:
            self.t0 = time.perf_counter()

        def put(self, value) -> None:
            self.pushes += 1
            if self.pushes > 0:
                self.ttft = self.ttft or time.perf_counter() - self.t0
                self.tokens += int(value.numel())

        def end(self) -> None:
            pass

    return FirstToken()


def _sampling(s: SamplingConfig) -> dict:
    if s.greedy:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p}


def _until_eos(tokens: list[int], eos_ids: set[int], cfg: PeerConfig) -> tuple[list[int], str]:
    """New ids up to (not including) the first EOS, as the project's output keeps them."""
    for i, tok in enumerate(tokens):
        if tok in eos_ids:
            return tokens[:i], "eos"
    return tokens, "max_new_tokens" if len(tokens) >= cfg.max_new_tokens else "context_window"


def _stats(tokens: list[int], wall: float, ttft: float, reason: str, rounds: int = 0,
           accepted: int = 0) -> dict:
    """The engine's stats keys; a peer's drafted count and busy times are not observable."""
    return {"new_tokens": len(tokens), "wall_s": wall,
            "tokens_per_s": len(tokens) / wall if wall > 0 else 0.0, "ttft_s": ttft,
            "rounds": rounds, "drafted": 0, "accepted": accepted, "draft_busy_s": 0.0,
            "target_busy_s": 0.0, "stop_reason": reason, "token_ids": tokens}
