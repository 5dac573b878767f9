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
from app.infill import text_ids
from app.tool_prompt import ToolPlan, tool_plan
from app.tools import ToolStream, split_calls
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

    def prompt(self, pair, req, ids_of=None) -> tuple[list[list[int]], list[int], ToolPlan | None]:
        """Each prompt's ids (a chat has one; a prompt list one each; `ids_of(pair)` makes
        them where given) and tokens to generate (what was asked, checked against the
        window, or else up to the window), and a chat's tool plan."""
        chat, wanted, plan = isinstance(req, ChatRequest), req.wanted_tokens(), None
        try:
            with pair.tokenizer_lock:
                if ids_of is not None:
                    ids = ids_of(pair)
                elif chat:
                    plan = tool_plan(pair, req)
                    extra = {"tools": plan.template_tools} if plan.template_tools else {}
                    ids = [pair.prompt_ids(plan.messages, raw=not pair.spec.chat, **extra)]
                else:
                    ids = [text_ids(pair, text, req.suffix) for text in req.texts()]
            for one in ids:
                pair.check_room(one, wanted or 1)
        except ValueError as e:
            code = ("context_length_exceeded" if isinstance(e, ContextOverflow)
                    else "invalid_value")
            raise ApiError(400, str(e), param=_param_of(e) or ("messages" if chat else "prompt"),
                           code=code) from None
        return ids, [wanted or pair.target.n_ctx - len(one) for one in ids], plan

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
        job, shapes, tools = await self.start(req)
        if req.stream:
            usage = req.stream_options.include_usage
            return StreamingResponse(self._stream(job, shapes, tools, usage),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        answers = await self.collect(job, request, tools)
        return Response(status_code=499) if answers is None else JSONResponse(
            shapes.whole(answers))

    async def start(self, req, ids_of=None) -> tuple[Job, Shapes, bool]:
        """A checked request's generations queued (Job), the shapes of its answer and
        whether tool calls are parsed out of it; a 4xx ApiError for what is wrong."""
        chat = isinstance(req, ChatRequest)
        name, pair = self.served(req.model)
        seed = req.base_seed()
        try:
            prompts, max_new, plan = await run_in_threadpool(self.prompt, pair, req, ids_of)
            grammar = plan and plan.grammar
            cfgs = [req.gen_config(max_new[i // req.n], seed + i)
                    for i in range(len(prompts) * req.n)]
            for cfg in cfgs:
                cfg.validate()
                cfg.response_format = grammar or cfg.response_format
            if cfgs[0].response_format is not None:  # a bad schema: 400 before generating
                await run_in_threadpool(pair.check_format, cfgs[0].response_format)
        except ValueError as e:
            raise ApiError(400, str(e), param=_param_of(e), code="invalid_value") from None
        if not self.gate.enter():
            raise ApiError(429, f"the server is busy ({self.gate.limit} requests waiting or "
                                "running); try again shortly", type="rate_limit_error",
                           code="queue_full")
        token_text = pair.token_text if cfgs[0].logprobs is not None else None
        job = Job(self.host, name, [ids for ids in prompts for _ in range(req.n)], cfgs, self.gate)
        shapes = Shapes(chat, name, seed, token_text, per_prompt=req.n)
        return job, shapes, grammar is not None

    async def collect(self, job: Job, request: Request, tools: bool) -> list[Answer] | None:
        """The job's whole answers (tool calls taken out); None if the client went away."""
        answers, looked = [Answer() for _ in job.cfgs], time.monotonic()
        try:
            while True:
                try:
                    item = await asyncio.wait_for(job.next(), POLL_S)
                except asyncio.TimeoutError:
                    item = False
                if time.monotonic() - looked >= POLL_S:  # events may never pause
                    if await request.is_disconnected():
                        return None
                    looked = time.monotonic()
                if item is None:
                    for a in answers if tools else ():
                        a.text, a.tool_calls = split_calls(a.text)
                        a.text = a.text.strip() if a.tool_calls else a.text
                    return answers
                if item:
                    answers[item[0]].add(item[1])
        finally:
            job.cancel.set()

    async def _stream(self, job: Job, shapes: Shapes, tools: bool, usage: bool):
        """SSE chunks: each choice's role, text and finish (its tool calls before that), then
        usage when asked; an error after the first chunk arrives as an error event; a client
        that goes away cancels the generation (this generator is closed)."""
        answers = [Answer() for _ in job.cfgs]
        held = [ToolStream() if tools else None for _ in job.cfgs]
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
            yield sse(e.body())
        finally:
            job.cancel.set()


def _param_of(e: ValueError) -> str | None:
    """The field a GenConfig or grammar error names, when it starts with one."""
    head = str(e).split(":", 1)[0]
    return head if head in ("response_format", "logit_bias", "logprobs", "tools", "lookup") \
        else None


def _pieces(shapes: Shapes, i: int, ev, answer: Answer, held: ToolStream | None):
    """The chunks one event of choice i makes: its text (and tool call pieces), and at its
    end what was held back and the finish reason."""
    pieces = held.feed(ev.text) if held else [("text", ev.text)] * bool(ev.text)
    if ev.logprobs and not any(kind == "text" for kind, _ in pieces):
        pieces.insert(0, ("text", ""))
    if ev.stats is not None:
        answer.stats = ev.stats
        if held:
            pieces += held.finish()
            answer.tool_calls = held.calls
    for n, (kind, value) in enumerate(pieces):
        lp = ev.logprobs if n == 0 else None
        yield (shapes.chunk(i, value, logprobs=lp) if kind == "text"
               else shapes.chunk(i, tool_calls=[value], logprobs=lp))
    if ev.stats is not None:
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
