"""A fake Hugging Face Hub on 127.0.0.1 in the Hub's URL layout and headers (model info API, /resolve,
LFS redirects to a second "CDN" origin, Range, gated repos) with injected transfer faults, for tests."""
from __future__ import annotations

import hashlib
import json
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".model")
TOKEN = "hf_fake_token_for_tests"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, bytes]
    gated: bool = False
    commit: str = ""

    def __post_init__(self):
        if not self.commit:
            self.commit = hashlib.sha1(self.repo_id.encode()).hexdigest()

    @staticmethod
    def is_lfs(name: str) -> bool:
        return name.endswith(LFS_SUFFIXES)

    def sibling(self, name: str) -> dict:
        data = self.files[name]
        s = {"rfilename": name, "size": len(data), "blobId": git_blob_sha1(data)}
        if self.is_lfs(name):
            s["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
        return s

    def etag(self, name: str) -> str:
        data = self.files[name]
        return hashlib.sha256(data).hexdigest() if self.is_lfs(name) else git_blob_sha1(data)


@dataclass
class FakeHub:
    """Serves repos at http://127.0.0.1:PORT; faults maps a file name to 'cut_once', 'corrupt'
    or 'corrupt_once'. requests logs (method, path, Range header) for the tests to inspect;
    CDN requests are logged as /blob/{repo}/{file}."""
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    faults: dict[str, str] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)

    def add(self, repo: FakeRepo) -> None:
        self.repos[repo.repo_id] = repo

    def start(self) -> "FakeHub":
        self.hub = _serve(self, cdn=False)
        self.cdn = _serve(self, cdn=True)
        return self

    def stop(self) -> None:
        for server in (self.hub, self.cdn):
            server.shutdown()
            server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self.cdn.server_address[1]}"

    def take_fault(self, name: str) -> str | None:
        fault = self.faults.get(name)
        if fault and fault.endswith("_once"):
            del self.faults[name]
        return fault


def _serve(hub: FakeHub, cdn: bool) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"hub": hub, "is_cdn": cdn})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub
    is_cdn: bool

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._route(body=True)

    def do_HEAD(self) -> None:
        self._route(body=False)

    def _route(self, body: bool) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        if self.is_cdn:
            query = parse_qs(url.query)
            self._log(f"/blob/{query.get('repo', [''])[0]}/{query.get('file', [''])[0]}")
            return self._cdn(query, body)
        self._log(path)
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            return self._info("/".join(parts[2:4]))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), body)
        self._error(404, "NotFound", "no such route")

    def _log(self, path: str) -> None:
        self.hub.requests.append((self.command, path, self.headers.get("Range")))

    # -- API ------------------------------------------------------------------------------------

    def _info(self, repo_id: str) -> None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        payload = {"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                   "gated": "manual" if repo.gated else False, "disabled": False,
                   "siblings": [repo.sibling(n) for n in sorted(repo.files)]}
        self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json"}, True)

    def _resolve(self, repo_id: str, rev: str, name: str, body: bool) -> None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if rev not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", "Invalid rev id")
        if repo.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            status = 403 if self.headers.get("Authorization") else 401
            return self._error(status, "GatedRepo", f"Access to model {repo_id} is restricted.")
        if name not in repo.files:
            return self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo.commit})
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{repo.etag(name)}"'}
        if repo.is_lfs(name):
            return self._redirect_lfs(repo, name, headers)
        self._content(repo.files[name], headers, body)

    def _redirect_lfs(self, repo: FakeRepo, name: str, headers: dict) -> None:
        """Like the Hub: 302 to another origin, metadata in X-Linked-* on the redirect itself."""
        size = len(repo.files[name])
        headers.update({"Location": f"{self.hub.cdn_url}/blob?repo={repo.repo_id}&file={name}",
                        "X-Linked-Etag": f'"{repo.etag(name)}"', "X-Linked-Size": str(size)})
        self._send(302, b"", headers, False)

    # -- CDN ------------------------------------------------------------------------------------

    def _cdn(self, query: dict, body: bool) -> None:
        repo = self.hub.repos.get(query.get("repo", [""])[0])
        name = query.get("file", [""])[0]
        if repo is None or name not in repo.files:
            return self._error(404, "NotFound", "no such blob")
        data = repo.files[name]
        fault = self.hub.take_fault(name) if body else None
        if fault and fault.startswith("corrupt"):
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        headers = {"ETag": f'"{repo.etag(name)}"',
                   "Content-Disposition": f"inline; filename*=UTF-8''{name}; filename=\"{name}\";"}
        self._content(data, headers, body, cut=fault == "cut_once")

    # -- responses ------------------------------------------------------------------------------

    def _content(self, data: bytes, headers: dict, body: bool, cut: bool = False) -> None:
        start, status = self._range(len(data))
        if status == 416:
            return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, True)
        part = data[start:]
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        headers["Accept-Ranges"] = "bytes"
        if cut:  # announce everything, send half, hang up: the client sees a broken transfer
            self._send(status, part[: len(part) // 2], {**headers, "Content-Length": str(len(part))}, True)
            self.close_connection = True
            return
        self._send(status, part, headers, body)

    def _range(self, size: int) -> tuple[int, int]:
        spec = self.headers.get("Range")
        if not spec or not spec.startswith("bytes="):
            return 0, 200
        start = int(spec[6:].split("-")[0] or 0)
        return (start, 206) if start < size else (start, 416)

    def _error(self, status: int, code: str, message: str, extra: dict | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"X-Error-Code": code, "X-Error-Message": message,
                                  "Content-Type": "application/json", **(extra or {})}, True)

    def _send(self, status: int, data: bytes, headers: dict, body: bool) -> None:
        self.send_response(status)
        headers.setdefault("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(data)


def make_gguf(tokens: list[str], extra: dict[str, int] | None = None) -> bytes:
    """A minimal GGUF v3 file: a few metadata keys and tokenizer.ggml.tokens, no tensors."""
    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    kvs = [s("general.architecture") + struct.pack("<I", 8) + s("llama")]
    kvs += [s(k) + struct.pack("<I", 4) + struct.pack("<I", v) for k, v in (extra or {}).items()]
    kvs.append(s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, len(tokens))
               + struct.pack(f"<{len(tokens)}f", *([0.0] * len(tokens))))
    kvs.append(s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(s(t) for t in tokens))
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)


def tokenizer_json(tokens: list[str]) -> bytes:
    """A tokenizers-library tokenizer.json (WordLevel) with these tokens as ids 0..n-1."""
    tj = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
          "post_processor": None, "decoder": None,
          "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(tokens)}, "unk_token": tokens[0]}}
    return json.dumps(tj).encode()
