"""Which web pages may call the server from a browser (--cors ORIGIN): none unless named, so a
page the user happens to open cannot drive the local model."""
from __future__ import annotations

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware


def origins(values: list[str] | None) -> list[str]:
    """--cors values (repeated, or comma lists) as origins ("https://host:port")."""
    return [o.strip().rstrip("/") for v in values or [] for o in v.split(",") if o.strip()]


def use_cors(app, allowed: list[str]) -> None:
    """Answer browsers from `allowed` origins only, on every route of `app`; a CORS rule
    already there (gradio's lets any page on localhost in) is replaced. Works on a started
    app too: Starlette builds its middleware again on the next request."""
    app.user_middleware = [m for m in app.user_middleware
                           if "CORS" not in getattr(m.cls, "__name__", "")]
    if allowed:
        app.user_middleware.insert(0, Middleware(CORSMiddleware, allow_origins=allowed,
                                                 allow_methods=["GET", "POST"],
                                                 allow_headers=["*"]))
    app.middleware_stack = None
