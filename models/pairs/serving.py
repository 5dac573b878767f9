"""The commands that serve a catalog pair on vLLM, SGLang or llama-server, written from the catalog
alone (no model is loaded, nothing is downloaded); a pair an engine cannot take is refused by name."""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from models.pairs.catalog import PairSpec, ServeSpec

SERVE_WINDOW = 8192  # the app's default window (models/fit/memory.DEFAULT_CTX): min(trained window, this)
VLLM_DRAFT_TOKENS = 5  # stated: vLLM has no default for a draft model; its draft_model docs use 5


@dataclass(frozen=True)
class Engine:
    """One serving engine: the version these commands were written for and where its options are."""
    name: str
    title: str
    version: str
    docs: str


ENGINES = {
    "vllm": Engine("vllm", "vLLM", "0.26.0",
                   "docs.vllm.ai/en/v0.26.0 features/speculative_decoding/draft_model; vllm/config/speculative.py"),
    "sglang": Engine("sglang", "SGLang", "0.5.15",
                     "docs/advanced_features/speculative_decoding.md, server_arguments.md (sgl-project/sglang)"),
    "llama-server": Engine("llama-server", "llama.cpp llama-server", "b11004",
                           "tools/server/README.md @ 00dc8057, common/speculative.cpp (ggml-org/llama.cpp)"),
}
DRAFT_SAMPLING = ("greedy", "probabilistic")
DRAFT_ON = ("cpu", "gpu")
WHEN_TO_MOVE = ("# move to a serving engine when several users share the model, when one GPU holds both draft "
                "and target, or when there are several GPUs: see docs/serving.md")


class ServingRefusal(ValueError):
    """The engine cannot serve this pair as asked; the message names the engine's limit."""


def serve_command(spec: PairSpec, engine: str, gpus: int = 1, draft_on: str | None = None,
                  draft_sampling: str = "greedy") -> str:
    """Comment lines (engine version, what runs where, licences), then the shell commands that serve
    `spec` on `engine`; the last one starts the server. `draft_on` (cpu, the default, or gpu) is
    llama-server's choice only: vLLM and SGLang run the draft beside the target. ValueError for an
    unknown engine or setting, ServingRefusal where the engine cannot take the pair as asked."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine '{engine}'; choose from {', '.join(ENGINES)}")
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {gpus}")
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling must be one of {', '.join(DRAFT_SAMPLING)}, got '{draft_sampling}'")
    if draft_on is not None and (engine != "llama-server" or draft_on not in DRAFT_ON):
        raise ValueError(f"draft_on ({', '.join(DRAFT_ON)}) is chosen for llama-server only; "
                         f"the {ENGINES[engine].title} command runs the draft beside the target on the GPU"
                         if engine != "llama-server" else f"draft_on must be cpu or gpu, got '{draft_on}'")
    if engine == "vllm":
        notes, commands = _vllm(spec, spec.serve, gpus, draft_sampling)
    elif engine == "sglang":
        notes, commands = _sglang(spec, spec.serve, gpus, draft_sampling)
    else:
        notes, commands = _llama_server(spec, spec.serve, gpus, draft_on or "cpu", draft_sampling)
    e = ENGINES[engine]
    head = [f"# {e.title} {e.version}: pair '{spec.name}' (options: {e.docs})", *notes]
    gated = [r for r in spec.serve.gated_repos if any(_names(r, c) for c in commands)]
    if gated:
        head.append(f"# gated: accept the licence of {', '.join(gated)} on the Hub, set HF_TOKEN")
    return "\n".join(head + commands)


# ---- one builder per engine: (comment lines, command lines) ---------------------------------------

def _vllm(spec: PairSpec, s: ServeSpec, gpus: int, draft_sampling: str) -> tuple[list[str], list[str]]:
    target = _need(s.target_hf, "vllm", "the target's safetensors repo", spec)
    draft = _need(s.draft_hf, "vllm", "the draft's safetensors repo", spec)
    config = {"method": "draft_model", "model": draft, "num_speculative_tokens": VLLM_DRAFT_TOKENS}
    notes = [f"# target {target} and draft {draft} on the GPU; {VLLM_DRAFT_TOKENS} draft tokens a step "
             f"(stated: vLLM has no default for a draft model)"]
    if not _same_vocab(spec, s):
        if draft_sampling == "probabilistic":
            raise ServingRefusal(
                f"vLLM serves pair '{spec.name}' only with use_heterogeneous_vocab ({_vocab_gap(spec, s)}), "
                f"which supports greedy draft sampling only (SpeculativeConfig: 'use_heterogeneous_vocab "
                f"currently only supports greedy draft sampling'); drop --draft-sampling probabilistic")
        config["use_heterogeneous_vocab"] = True
        notes.append(f"# {_vocab_gap(spec, s)}: use_heterogeneous_vocab drafts from the shared tokens (TLI, "
                     f"lossless), with greedy draft sampling only")
    elif draft_sampling == "probabilistic":
        config["draft_sample_method"] = "probabilistic"
    opts = [["--speculative-config", json.dumps(config)], ["--max-model-len", str(_window(spec))],
            ["--port", "8000"]] + ([["--tensor-parallel-size", str(gpus)]] if gpus > 1 else [])
    return notes, _render(["vllm", "serve", target], opts)


def _sglang(spec: PairSpec, s: ServeSpec, gpus: int, draft_sampling: str) -> tuple[list[str], list[str]]:
    target = _need(s.target_hf, "sglang", "the target's safetensors repo", spec)
    draft = _need(s.draft_hf, "sglang", "the draft's safetensors repo", spec)
    if not _same_vocab(spec, s):
        raise ServingRefusal(
            f"SGLang's STANDALONE drafting needs the draft to share the target's vocabulary, checked at start "
            f"(vocab_size and token map, sgl-project/sglang PR #23838), and pair '{spec.name}' does not "
            f"({_vocab_gap(spec, s)}); cross-vocabulary drafting (TLI, PR #22883) is not in SGLang: "
            f"serve this pair with {'vLLM or llama-server' if spec.same_tokenizer else 'vLLM'}")
    if draft_sampling == "probabilistic":
        raise ServingRefusal("SGLang's speculative options (speculative_decoding.md, full parameter reference) "
                             "have no draft-sampling setting; drop --draft-sampling probabilistic")
    notes = [f"# target {target} and draft {draft} on the GPU; STANDALONE's own defaults set explicitly "
             f"(3 draft steps, top-k 1, 4 tokens verified: SGLang asks for all three or none)"]
    opts = [["--model-path", target], ["--speculative-algorithm", "STANDALONE"],
            ["--speculative-draft-model-path", draft], ["--speculative-num-steps", "3"],
            ["--speculative-eagle-topk", "1"], ["--speculative-num-draft-tokens", "4"],
            ["--context-length", str(_window(spec))], ["--port", "30000"]] + ([["--tp", str(gpus)]] if gpus > 1 else [])
    return notes, _render(["python", "-m", "sglang.launch_server"], opts)


def _llama_server(spec: PairSpec, s: ServeSpec, gpus: int, draft_on: str,
                  draft_sampling: str) -> tuple[list[str], list[str]]:
    target = _need(s.target_gguf, "llama-server", "a GGUF of the target", spec)
    draft = _need(s.draft_gguf, "llama-server", "a GGUF of the draft", spec)
    if not spec.same_tokenizer or abs((s.draft_vocab_size or 0) - (s.target_vocab_size or 0)) > 128:
        raise ServingRefusal(
            f"llama-server's draft-simple needs compatible vocabularies (common_speculative_are_compatible: "
            f"same vocab type, BOS/EOS, sizes at most 128 apart, the same token texts) and stops at load "
            f"otherwise; pair '{spec.name}' has {_vocab_gap(spec, s)}: serve it with vLLM")
    where = "on the CPU (-ngld 0), as in this app" if draft_on == "cpu" else "on the GPU (-ngld all)"
    notes = [f"# target {target['repo']}/{target['file']} on the GPU, draft {draft['repo']}/{draft['file']} "
             f"{where}; 3 draft tokens a step (llama-server's default --spec-draft-n-max)"]
    fetch = [_render(["hf", "download", g["repo"], g["file"]], [["--local-dir", f"gguf/{g['repo']}"]])[0]
             for g in _unique([target, draft])]
    opts = [["-m", f"gguf/{target['repo']}/{target['file']}"], ["-md", f"gguf/{draft['repo']}/{draft['file']}"],
            ["--spec-type", "draft-simple"], ["-ngld", "0" if draft_on == "cpu" else "all"],
            ["--spec-draft-n-max", "3"], ["-c", str(_window(spec))], ["--port", "8080"]]
    opts += [["--spec-draft-sampling", "probabilistic"]] if draft_sampling == "probabilistic" else []
    opts += [["--split-mode", "layer"]] if gpus > 1 else []
    return notes, fetch + _render(["llama-server"], opts)


# ---- helpers ------------------------------------------------------------------------------------

def _need(value, engine: str, what: str, spec: PairSpec):
    if not value:
        raise ServingRefusal(f"{ENGINES[engine].title} needs {what}; pair '{spec.name}' records none "
                             f"(add it under 'serve' in its catalog entry)")
    return value


def _same_vocab(spec: PairSpec, s: ServeSpec) -> bool:
    """Same tokenizer and as many embedding rows (Qwen pads its 7B to 152,064; the 0.5B has 151,936)."""
    return spec.same_tokenizer and (s.draft_vocab_size is None or s.draft_vocab_size == s.target_vocab_size)


def _vocab_gap(spec: PairSpec, s: ServeSpec) -> str:
    sizes = f"target {s.target_vocab_size or '?'} tokens, draft {s.draft_vocab_size or '?'}"
    return f"{'the same tokenizer' if spec.same_tokenizer else 'different tokenizers'}, {sizes}"


def _window(spec: PairSpec) -> int:
    trained = (spec.extra.get("target_config") or {}).get("max_position_embeddings") or SERVE_WINDOW
    return min(int(trained), SERVE_WINDOW)


def _names(repo: str, command: str) -> bool:
    """Whether the command names this repo id (not merely a longer id that starts or ends with it)."""
    return re.search(rf"(?<![\w./-]){re.escape(repo)}(?![\w./-])", command) is not None


def _unique(files: list[dict]) -> list[dict]:
    return [f for i, f in enumerate(files) if f not in files[:i]]


def _render(prog: list[str], opts: list[list[str]]) -> list[str]:
    """One command: the program on the first line, one option (with its value) per continued line."""
    parts = [" ".join(map(shlex.quote, prog))] + ["  " + " ".join(map(shlex.quote, o)) for o in opts]
    return ["\n".join(p + " \\" for p in parts[:-1]) + ("\n" if len(parts) > 1 else "") + parts[-1]]
