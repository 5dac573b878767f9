"""llama-server's native generation routes: POST /completion and POST /infill with its body
(tools/server/README.md: prompt, n_predict, stream, cache_prompt, ...) and its answer (content,
stop, tokens_predicted, tokens_evaluated, timings), whole or as SSE `data: {...}` chunks. The
body becomes a /v1/completions request on the same queue; a field we cannot honour is a 400
that names it, as is any field llama-server does not document."""
from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.infill import infill_ids
from app.openai_io import (MAX_PROMPTS, ApiError, CompletionRequest, guarded, load_json, parse,
                           read_body)
from app.openai_shapes import Answer, sse, timings

# honoured: passed on as the /v1/completions field of the same name (or the one named)
PASSED = {"prompt": "prompt", "n_predict": "n_predict", "temperature": "temperature",
          "top_k": "top_k", "top_p": "top_p", "seed": "seed", "stop": "stop",
          "stream": "stream", "cache_prompt": "cache_prompt", "n_cmpl": "n",
          "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
          "model": "model", "method": "method", "gamma": "gamma", "multi_seq": "multi_seq",
          "theta_scale": "theta_scale", "predraft": "predraft", "lookup": "lookup"}
LOCAL = {"return_tokens", "logit_bias", "json_schema", "input_prefix", "input_suffix",
         "input_extra"}  # honoured here
# llama-server's defaults where ours differ (its sampling chain: top_k 40, top_p 0.95, 0.8)
DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95}
ANY = object()
# accepted only at the value that leaves the output as ours is (ANY: a setting of a
# sampler that is off, or one that does not change the tokens)
NEUTRAL = {"min_p": 0, "typical_p": 1, "repeat_penalty": 1, "mirostat": 0, "ignore_eos": False,
           "dynatemp_range": 0, "xtc_probability": 0, "dry_multiplier": 0, "n_probs": 0,
           "min_keep": 0, "n_indent": 0, "n_cache_reuse": 0, "t_max_predict_ms": 0,
           "timings_per_token": False, "return_progress": False, "post_sampling_probs": False,
           "grammar": "", "lora": [], "id_slot": ANY, "n_keep": ANY, "repeat_last_n": ANY,
           "dynatemp_exponent": ANY, "xtc_threshold": ANY, "dry_base": ANY,
           "dry_allowed_length": ANY, "dry_penalty_last_n": ANY, "dry_sequence_breakers": ANY,
           "mirostat_tau": ANY, "mirostat_eta": ANY, "sse_ping_interval": ANY}
STOP_TYPE = {"eos": "eos", "stop_string": "word", "max_new_tokens": "limit",
             "context_window": "limit", "stopped": "none"}


def add_native_routes(r: APIRouter, api) -> None:
    @r.post("/completion")
    async def completion(request: Request):
        return await guarded(_generate(api, request, infill=False))

    @r.post("/infill")
    async def infill(request: Request):
        return await guarded(_generate(api, request, infill=True))


def check_fields(data: dict, infill: bool) -> None:
    """400 naming the first field we do not take or cannot honour at its value."""
    for name, value in data.items():
        if name in PASSED or name in LOCAL and (infill or not name.startswith("input_")):
            continue
        if name not in NEUTRAL:
            raise ApiError(400, f"{name}: not a field of llama-server's /"
                                f"{'infill' if infill else 'completion'} that this server "
                                "takes", param=name, code="unsupported_parameter")
        if NEUTRAL[name] is not ANY and value != NEUTRAL[name]:
            raise ApiError(400, f"{name}: only {json.dumps(NEUTRAL[name])} is supported (the "
                                "server would answer differently)", param=name,
                           code="unsupported_parameter")
    if data.get("input_extra"):
        raise ApiError(400, "input_extra: extra files for the infill context are not "
                            "supported", param="input_extra", code="unsupported_parameter")


def split_prompt(prompt) -> tuple[list[str] | None, list[list[int]] | None]:
    """(strings, None) or (None, token id lists) of llama-server's prompt shapes; 400 for
    mixed ones."""
    if isinstance(prompt, str):
        return [prompt], None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return None, [prompt]
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return prompt, None
    if isinstance(prompt, list) and all(isinstance(p, list) and p and all(
            isinstance(t, int) for t in p) for p in prompt):
        return None, prompt
    raise ApiError(400, "prompt: a string, a list of strings, a list of token ids or a list "
                        "of such lists (mixed strings and ids are not supported)",
                   param="prompt", code="invalid_value")


def logit_bias(value) -> dict:
    """llama-server's [[id, bias or false], ...] (or OpenAI's object) as OpenAI's object."""
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and all(isinstance(p, list) and len(p) == 2
                                       and isinstance(p[0], int) for p in value):
        return {str(t): (-100 if b is False else b) for t, b in value}
    raise ApiError(400, "logit_bias: [[token id, bias or false], ...] or {\"id\": bias}",
                   param="logit_bias", code="invalid_value")


def openai_body(data: dict, model: str, infill: bool) -> tuple[dict, list | None]:
    """The /v1/completions body of a native one, and its token-id prompts (if given)."""
    check_fields(data, infill)
    body = {**DEFAULTS, "model": model}
    body.update({PASSED[k]: v for k, v in data.items() if k in PASSED})
    body.setdefault("prompt", "")
    ids = None
    if not infill:
        texts, ids = split_prompt(body["prompt"])
        body["prompt"] = texts or ["x"] * len(ids)  # ids: the prompts' count, checked there
    if "logit_bias" in data:
        body["logit_bias"] = logit_bias(data["logit_bias"])
    if data.get("json_schema") is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "schema": data["json_schema"], "strict": True}}
    return body, ids


async def _generate(api, request: Request, infill: bool) -> Response:
    api.check_key(request)
    data = {k: v for k, v in load_json(await read_body(request)).items() if v is not None}
    name = api.loaded() and api.host.name
    body, ids = openai_body(data, data.get("model", name), infill)
    req = parse(CompletionRequest, json.dumps(body).encode())
    if infill:
        texts = {k: data.get(k, "") for k in ("input_prefix", "input_suffix", "prompt")}
        for k, v in texts.items():
            if not isinstance(v, str):
                raise ApiError(400, f"{k}: must be a string", param=k, code="invalid_value")
        def ids_of(pair):
            return [infill_ids(pair, texts["input_prefix"], texts["input_suffix"],
                               texts["prompt"], field="input_prefix")]
    elif ids is not None:
        if len(ids) > MAX_PROMPTS:
            raise ApiError(400, f"prompt: at most {MAX_PROMPTS} prompts", param="prompt",
                           code="invalid_value")
        ids_of = lambda pair: [check_ids(pair, p) for p in ids]  # noqa: E731
    else:
        ids_of = None
    job, shapes, _ = await api.start(req, ids_of)
    native = Native(api, name, req, job.ids, data.get("return_tokens", False))
    if req.stream:
        return StreamingResponse(native.stream(job), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    answers = await api.collect(job, request, tools=False)
    if answers is None:
        return Response(status_code=499)
    bodies = [native.body(i, a) for i, a in enumerate(answers)]
    return JSONResponse(bodies[0] if len(bodies) == 1 else bodies)


def check_ids(pair, ids: list[int]) -> list[int]:
    n = pair.target.vocab_size
    bad = [t for t in ids if not 0 <= t < n]
    if bad:
        raise ApiError(400, f"prompt: {bad[0]} is not a token id of this model (0..{n - 1})",
                       param="prompt", code="invalid_value")
    if len(ids) > pair.target.n_ctx - 1:
        raise ApiError(400, f"prompt: {len(ids)} tokens; the context window allows "
                            f"{pair.target.n_ctx - 1}", param="prompt",
                       code="context_length_exceeded")
    return list(ids)


class Native:
    """llama-server's answer shapes for one request's choices."""

    def __init__(self, api, name: str, req, ids: list, return_tokens: bool):
        self.api, self.name, self.req, self.return_tokens = api, name, req, return_tokens
        self.ids = ids  # each choice's prompt ids

    def settings(self) -> dict:
        r = self.req
        return {"n_predict": r.n_predict or -1, "temperature": r.temperature, "top_k": r.top_k,
                "top_p": r.top_p, "seed": r.seed if r.seed is not None else -1,
                "stop": list(r.stops()), "stream": r.stream, "cache_prompt": r.cache_prompt,
                "n_ctx": self.api.host.pair.target.n_ctx, "model": self.name,
                "method": r.method}

    def body(self, i: int, a: Answer) -> dict:
        stats = a.stats
        pair = self.api.host.pair
        with pair.tokenizer_lock:
            prompt = pair.tokenizer.decode(self.ids[i])
        return {"index": i, "content": a.text, "tokens": a.tokens if self.return_tokens else [],
                "id_slot": 0, "stop": True, "model": self.name,
                "tokens_predicted": int(stats.get("new_tokens", len(a.tokens))),
                "tokens_evaluated": int(stats.get("prompt_tokens", len(self.ids[i]))),
                "tokens_cached": int(stats.get("cached_tokens", 0)),
                "generation_settings": self.settings(), "prompt": prompt,
                "has_new_line": "\n" in a.text, "truncated": False,
                "stop_type": STOP_TYPE.get(stats.get("stop_reason"), "none"),
                "stopping_word": "", "timings": timings(stats)}

    async def stream(self, job):
        """A chunk per event ({index, content, tokens, stop: false}), then each choice's
        whole answer with content "" and stop: true; no [DONE], as llama-server."""
        answers = [Answer() for _ in job.cfgs]
        try:
            while (item := await job.next()) is not None:
                i, ev = item
                answers[i].add(ev)
                if ev.text or ev.tokens:
                    yield sse({"index": i, "content": ev.text, "tokens": ev.tokens,
                               "stop": False, "id_slot": 0})
                if ev.stats is not None:
                    yield sse({**self.body(i, answers[i]), "content": ""})
        except ApiError as e:
            yield sse(e.body())
        finally:
            job.cancel.set()
