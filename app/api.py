"""The OpenAI-compatible HTTP API on the pair the app has loaded: /v1/models,
/v1/chat/completions, /v1/completions (also without /v1, as llama-server), one generation at
a time with the UI (ModelHost), a bounded wait line (429 past it), and a client that goes away
cancels its generation. llama-server's /health, /tokenize and /detokenize: app/llama_routes.py."""
from __future__ import annotations

import asyncio
import hmac
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.jobs import Gate, Job
from app.llama_routes import add_llama_routes
from app.openai_io import (MAX_BODY, ApiError, ChatRequest, CompletionRequest,  # noqa: F401
                           guarded, parse, read_body)
from app.openai_shapes import Answer, Shapes, sse
from app.tools import HeldText, split_calls, template_takes_tools
from models.prompt_text import ContextOverflow

POLL_S = 0.25  # how often a non-streaming request looks for its client


class Api:
    def __init__(self, host, api_key: str | None = None, max_waiting: int = 16):
        self.host, self.api_key, self.gate = host, api_key, Gate(max_waiting)

    # -- checks ---------------------------------------------------------------------------
    def check_key(self, request: Request) -> None:
        if not self.api_key:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            raise ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)",
                           type="authentication_error", code="invalid_api_key")

    def loaded(self):
        """The loaded pair, or 503 while none is."""
        host = self.host
        if host.pair is None or host.name is None or host.loading is not None:
            raise ApiError(503, f"no model is loaded yet: {host.progress()}",
                           type="server_error", code="model_loading")
        return host.pair

    def served(self, model: str) -> tuple[str, object]:
        pair = self.loaded()
        if model != self.host.name:
            raise ApiError(404, f"model '{model}' is not served here; this server serves "
                                f"'{self.host.name}'", param="model", code="model_not_found")
        return self.host.name, pair

    def prompt(self, pair, req) -> tuple[list[int], int]:
        """Prompt ids and the tokens to generate: what was asked, checked against the
        window, or else up to the window."""
        chat, tools = isinstance(req, ChatRequest), req.tool_list()
        wanted = req.wanted_tokens()
        try:
            with pair.tokenizer_lock:
                if tools is not None:
                    self._check_tools(pair)
                extra = {"tools": tools} if tools is not None else {}
                ids = (pair.prompt_ids(req.conversation(), raw=not pair.spec.chat, **extra)
                       if chat else pair.prompt_ids(req.text(), raw=True))
            pair.check_room(ids, wanted or 1)
        except ValueError as e:
            code = ("context_length_exceeded" if isinstance(e, ContextOverflow)
                    else "invalid_value")
            raise ApiError(400, str(e), param="messages" if chat else "prompt",
                           code=code) from None
        return ids, wanted or pair.target.n_ctx - len(ids)

    def _check_tools(self, pair) -> None:
        if not pair.spec.chat or not template_takes_tools(pair.tokenizer):
            raise ApiError(400, f"tools: the chat template of '{self.host.name}' has no tool "
                                "syntax, so this model cannot be offered tools",
                           param="tools", code="unsupported_parameter")

    # -- endpoints --------------------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        self.check_key(request)
        names = [self.host.name] if self.host.name else []
        return JSONResponse({"object": "list", "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "duodecoding"}
            for n in names]})

    async def complete(self, request: Request, chat: bool) -> Response:
        self.check_key(request)
        req = parse(ChatRequest if chat else CompletionRequest, await read_body(request))
        name, pair = self.served(req.model)
        seed = req.base_seed()
        try:
            ids, max_new = await run_in_threadpool(self.prompt, pair, req)
            cfgs = [req.gen_config(max_new, seed + i) for i in range(req.n)]
            for cfg in cfgs:
                cfg.validate()
            if cfgs[0].response_format is not None:  # a bad schema: 400 before generating
                await run_in_threadpool(pair.check_format, cfgs[0].response_format)
        except ValueError as e:
            raise ApiError(400, str(e), param=_param_of(e)) from None
        if not self.gate.enter():
            raise ApiError(429, f"the server is busy ({self.gate.limit} requests waiting or "
                                "running); try again shortly", type="rate_limit_error",
                           code="queue_full")
        token_text = pair.token_text if cfgs[0].logprobs is not None else None
        job = Job(self.host, name, ids, cfgs, self.gate)
        shapes = Shapes(chat, name, seed, token_text)
        tools = req.tool_list() is not None
        if req.stream:
            usage = req.stream_options.include_usage
            return StreamingResponse(self._stream(job, shapes, tools, usage),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await self._whole(job, shapes, tools, request)

    async def _whole(self, job: Job, shapes: Shapes, tools: bool, request: Request) -> Response:
        answers, looked = [Answer() for _ in job.cfgs], time.monotonic()
        try:
            while True:
                try:
                    item = await asyncio.wait_for(job.next(), POLL_S)
                except asyncio.TimeoutError:
                    item = False
                if time.monotonic() - looked >= POLL_S:  # events may never pause
                    if await request.is_disconnected():
                        return Response(status_code=499)
                    looked = time.monotonic()
                if item is None:
                    if tools:
                        _take_calls(answers)
                    return JSONResponse(shapes.whole(answers))
                if item:
                    i, ev = item
                    answers[i].text += ev.text
                    answers[i].stats = ev.stats or answers[i].stats
                    answers[i].logprobs += ev.logprobs or []
        finally:
            job.cancel.set()

    async def _stream(self, job: Job, shapes: Shapes, tools: bool, usage: bool):
        """SSE chunks: each choice's role, text and finish (its tool calls before that), then
        usage when asked; an error after the first chunk arrives as an error event; a client
        that goes away cancels the generation (this generator is closed)."""
        answers = [Answer() for _ in job.cfgs]
        held = [HeldText() if tools else None for _ in job.cfgs]
        opened = {0}
        try:
            yield sse(shapes.chunk(0, first=True))
            while (item := await job.next()) is not None:
                i, ev = item
                if i not in opened:
                    opened.add(i)
                    yield sse(shapes.chunk(i, first=True))
                for body in _pieces(shapes, i, ev, answers[i], held[i]):
                    yield sse(body)
            if usage:
                yield sse(shapes.usage_chunk(answers))
            yield sse("[DONE]")
        except ApiError as e:
            yield sse({"error": {"message": e.message, "type": e.type, "param": e.param,
                                 "code": e.code}})
        finally:
            job.cancel.set()


def _param_of(e: ValueError) -> str | None:
    """The field a GenConfig or grammar error names, when it starts with one."""
    head = str(e).split(":", 1)[0]
    return head if head in ("response_format", "logit_bias", "logprobs") else None


def _take_calls(answers: list[Answer]) -> None:
    for a in answers:
        a.text, a.tool_calls = split_calls(a.text)
        a.text = a.text.strip() if a.tool_calls else a.text


def _pieces(shapes: Shapes, i: int, ev, answer: Answer, held: HeldText | None):
    """The chunks one event of choice i makes: its text, and at its end what was held back,
    the tool calls and the finish reason."""
    text = held.feed(ev.text) if held else ev.text
    if text or ev.logprobs:
        yield shapes.chunk(i, text, logprobs=ev.logprobs)
    if ev.stats is None:
        return
    answer.stats = ev.stats
    if held:
        rest, answer.tool_calls = held.finish()
        if rest:
            yield shapes.chunk(i, rest)
        if answer.tool_calls:
            yield shapes.chunk(i, tool_calls=answer.tool_calls)
    yield shapes.chunk(i, finish=answer.finish)


def router(api: Api) -> APIRouter:
    """The routes, with and without /v1; every error goes out in the OpenAI shape."""
    r = APIRouter()
    for prefix in ("/v1", ""):
        r.add_api_route(prefix + "/models", _endpoint(api.models), methods=["GET"])
        r.add_api_route(prefix + "/chat/completions",
                        _endpoint(lambda q: api.complete(q, chat=True)), methods=["POST"])
        r.add_api_route(prefix + "/completions",
                        _endpoint(lambda q: api.complete(q, chat=False)), methods=["POST"])
    add_llama_routes(r, api)
    return r


def _endpoint(call):
    async def endpoint(request: Request):
        return await guarded(call(request))
    return endpoint
