"""A live OpenAI-compatible server (app.api on uvicorn, 127.0.0.1, a free port, an API key)
over a loaded pair, for the tests that talk to it over HTTP."""
from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import openai
import pytest

KEY = "test-key"


class Served:
    """One pair (served as smol-self) behind app.api on a free port, with an API key; `post`
    sends this server's key unless given another (None: no key)."""

    def __init__(self, pair, key: str = KEY, cors: list[str] | None = None):
        import uvicorn
        from fastapi import FastAPI

        from app.api import Api, router
        from app.cors import use_cors
        from app.host import ModelHost

        self.host = ModelHost(lambda name, say: pair)
        self.host.start_loading("smol-self")
        while self.host.loading:
            time.sleep(0.05)
        self.key, self.api = key, Api(self.host, key, max_waiting=16)
        app = FastAPI()
        app.include_router(router(self.api))
        use_cors(app, cors or [])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        # idle connections kept past any pause of the tests: the module's clients reuse them
        # (uvicorn's 5 s default could close one as a request goes out on it)
        self.server = uvicorn.Server(uvicorn.Config(app, "127.0.0.1", self.port,
                                                    log_level="warning", timeout_keep_alive=600))
        threading.Thread(target=self.server.run, daemon=True).start()
        while not self.server.started:
            time.sleep(0.05)
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.base + "/v1"
        # one HTTP client and one SDK client for the module's requests: a client a request
        # loaded the certificates again, about 30 CPU ms each (hundreds of requests a suite)
        self.http = httpx.Client()
        self.sdk = openai.OpenAI(base_url=self.url, api_key=key, max_retries=0)

    def client(self, **kw) -> openai.OpenAI:
        """The module's SDK client; a new one for other settings (a timeout)."""
        if not kw:
            return self.sdk
        return openai.OpenAI(base_url=self.url, api_key=self.key, max_retries=0, **kw)

    def post(self, path: str, body, key: str | None = "", timeout: float = 120) -> httpx.Response:
        key = self.key if key == "" else key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.http.post(self.url + path, content=content, headers=headers, timeout=timeout)

    def idle(self, within_s: float) -> bool:
        """True once no generation holds the pair (within `within_s`)."""
        end = time.monotonic() + within_s
        while time.monotonic() < end:
            if not self.host._run.locked():
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        """Stop serving; a generation still running (a cancelled one ends within a round)
        must end before the suite's pair is closed under it."""
        self.server.should_exit = True
        self.http.close()
        self.sdk.close()
        if self.host._run.acquire(timeout=120):
            self.host._run.release()


@pytest.fixture(scope="module")
def served(smol_pair):
    """The suite's smol-self pair served for one test module (import it into the module)."""
    s = Served(smol_pair)
    yield s
    s.close()


def chat(served: Served, messages: list[dict], max_tokens: int = 24, **kw):
    """A greedy chat completion through the openai SDK."""
    return served.client().chat.completions.create(
        model="smol-self", messages=messages, temperature=0, max_tokens=max_tokens, **kw)
