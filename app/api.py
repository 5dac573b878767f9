"""The OpenAI-compatible HTTP API (/v1/models, /v1/chat/completions, /v1/completions) on the
pair the app has loaded: one generation at a time with the UI (ModelHost), a bounded wait
line (429 past it), and a client that goes away cancels its generation."""
from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from contextlib import closing

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.openai_io import ApiError, ChatRequest, CompletionRequest, Shapes, parse, sse
from models.catalog import PairError
from models.prompt_text import ContextOverflow

log = logging.getLogger("duo.api")
POLL_S = 0.25  # how often a non-streaming request looks for its client
MAX_BODY = 8 << 20  # bytes of request body read at most (a 2 MB paste is refused later, by length)


class Gate:
    """Requests waiting or running; more than `limit` are refused."""

    def __init__(self, limit: int):
        self.limit, self.n, self._lock = limit, 0, threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.n >= self.limit:
                return False
            self.n += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.n -= 1


class Job:
    """One generation in a worker thread; its events (then None) arrive on an asyncio queue."""

    def __init__(self, host, name: str, ids: list[int], cfg, gate: Gate):
        self.host, self.name, self.ids, self.cfg, self.gate = host, name, ids, cfg, gate
        self.cancel = threading.Event()
        self.events: asyncio.Queue = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._work, daemon=True, name="api-generation").start()

    def _put(self, item) -> None:
        self._loop.call_soon_threadsafe(self.events.put_nowait, item)

    def _work(self) -> None:
        try:
            with self.host.running(self.name) as pair:
                if self.cancel.is_set():  # the client left while waiting its turn
                    return
                with closing(pair.generate(self.ids, self.cfg, stop=self.cancel.is_set)) as evs:
                    for ev in evs:
                        self._put(ev)
        except Exception as e:  # noqa: BLE001 - handed to the request, which reports it
            self._put(e)
        finally:
            self.gate.leave()
            self._put(None)

    async def next(self):
        """The next event; None at the end; an engine error is raised here."""
        item = await self.events.get()
        if isinstance(item, Exception):
            raise _as_api_error(item)
        return item


async def _body(request: Request) -> bytes:
    """The body, or 413 past MAX_BODY (told by its length header, else while reading)."""
    too_big = ApiError(413, f"the request body is over {MAX_BODY} bytes",
                       code="request_too_large")
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        raise too_big
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > MAX_BODY:
            raise too_big
    return bytes(body)


def _as_api_error(e: Exception) -> ApiError:
    if isinstance(e, ApiError):
        return e
    if isinstance(e, (ValueError, PairError)):
        return ApiError(400, str(e))
    log.exception("generation failed", exc_info=e)
    return ApiError(500, f"generation failed: {e}", type="server_error")


class Api:
    def __init__(self, host, api_key: str | None = None, max_waiting: int = 16):
        self.host, self.api_key, self.gate = host, api_key, Gate(max_waiting)
        self._tokenize = threading.Lock()  # one tokenizer call at a time

    # -- checks ---------------------------------------------------------------------------
    def check_key(self, request: Request) -> None:
        if not self.api_key:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            raise ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)",
                           type="authentication_error", code="invalid_api_key")

    def served(self, model: str) -> tuple[str, object]:
        host = self.host
        if host.pair is None or host.name is None:
            raise ApiError(503, f"no model is loaded yet: {host.progress()}",
                           type="server_error", code="model_loading")
        if model != host.name:
            raise ApiError(404, f"model '{model}' is not served here; this server serves "
                                f"'{host.name}'", param="model", code="model_not_found")
        return host.name, host.pair

    def prompt(self, pair, req) -> tuple[list[int], int]:
        """Prompt ids and the tokens to generate: what was asked, checked against the
        window, or else up to the window."""
        chat = isinstance(req, ChatRequest)
        wanted = req.wanted_tokens()
        try:
            with self._tokenize:
                ids = (pair.prompt_ids(req.conversation(), raw=not pair.spec.chat) if chat
                       else pair.prompt_ids(req.text(), raw=True))
            pair.check_room(ids, wanted or 1)
        except ValueError as e:
            code = ("context_length_exceeded" if isinstance(e, ContextOverflow)
                    else "invalid_value")
            raise ApiError(400, str(e), param="messages" if chat else "prompt",
                           code=code) from None
        return ids, wanted or pair.target.n_ctx - len(ids)

    # -- endpoints --------------------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        self.check_key(request)
        names = [self.host.name] if self.host.name else []
        return JSONResponse({"object": "list", "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "duodecoding"}
            for n in names]})

    async def complete(self, request: Request, chat: bool) -> Response:
        self.check_key(request)
        req = parse(ChatRequest if chat else CompletionRequest, await _body(request))
        name, pair = self.served(req.model)
        try:
            ids, max_new = await run_in_threadpool(self.prompt, pair, req)
            cfg = req.gen_config(max_new)
            cfg.validate()
        except ValueError as e:
            raise ApiError(400, str(e)) from None
        if not self.gate.enter():
            raise ApiError(429, f"the server is busy ({self.gate.limit} requests waiting or "
                                "running); try again shortly", type="rate_limit_error",
                           code="queue_full")
        job, shapes = Job(self.host, name, ids, cfg, self.gate), Shapes(chat, name)
        if req.stream:
            return StreamingResponse(self._stream(job, shapes), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await self._whole(job, shapes, request)

    async def _whole(self, job: Job, shapes: Shapes, request: Request) -> Response:
        text, stats, looked = [], {}, time.monotonic()
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(job.next(), POLL_S)
                except asyncio.TimeoutError:
                    ev = False
                if time.monotonic() - looked >= POLL_S:  # events may never pause
                    if await request.is_disconnected():
                        return Response(status_code=499)
                    looked = time.monotonic()
                if ev is None:
                    return JSONResponse(shapes.whole("".join(text), stats))
                if ev:
                    text.append(ev.text)
                    stats = ev.stats or stats
        finally:
            job.cancel.set()

    async def _stream(self, job: Job, shapes: Shapes):
        """SSE chunks; an error after the first chunk arrives as an error event; a client
        that goes away cancels the generation (this generator is closed)."""
        try:
            yield sse(shapes.chunk("", first=True))
            while (ev := await job.next()) is not None:
                if ev.stats is not None:
                    yield sse(shapes.chunk(ev.text, ev.stats))
                elif ev.text:
                    yield sse(shapes.chunk(ev.text))
            yield sse("[DONE]")
        except ApiError as e:
            yield sse({"error": {"message": e.message, "type": e.type, "param": e.param,
                                 "code": e.code}})
        finally:
            job.cancel.set()


def router(api: Api) -> APIRouter:
    """The /v1 routes; every error goes out in the OpenAI shape."""
    r = APIRouter()

    async def guarded(call) -> Response:
        try:
            return await call
        except ApiError as e:
            return e.response()

    @r.get("/v1/models")
    async def models(request: Request):
        return await guarded(api.models(request))

    @r.post("/v1/chat/completions")
    async def chat(request: Request):
        return await guarded(api.complete(request, chat=True))

    @r.post("/v1/completions")
    async def completions(request: Request):
        return await guarded(api.complete(request, chat=False))

    return r
