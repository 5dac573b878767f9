"""Start the DuoDecoding app: the page and the OpenAI-compatible API (/v1) on one server; the
page comes up at once and says how loading goes.

    python app/main.py [--pair NAME] [--host 127.0.0.1] [--port 7860] [--no-ui]
                       [--api-key KEY] [--max-queue 16] [--cors ORIGIN ...] [--share]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # a local app calls no one home
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cors import origins, use_cors  # noqa: E402
from app.cli import Parser, add_model_args, fail, load_options, quiet_logs  # noqa: E402
from models.pairs.catalog import PairError, get_pair  # noqa: E402


def parse(argv=None) -> argparse.Namespace:
    p = Parser(description="DuoDecoding chat app")
    add_model_args(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: this machine only)")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--share", action="store_true", help="also make a public gradio.live link")
    p.add_argument("--no-ui", action="store_true", help="serve the API alone (no web page)")
    p.add_argument("--api-key", default=os.environ.get("DUO_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1 (default: DUO_API_KEY)")
    p.add_argument("--max-queue", type=int, default=16,
                   help="API requests waiting or running before more are refused (429)")
    p.add_argument("--cors", action="append", metavar="ORIGIN",
                   help="let web pages from ORIGIN (e.g. http://localhost:3000) call the API "
                        "from a browser; repeat or give a comma list (default: none)")
    args = p.parse_args(argv)
    if args.max_queue < 1:
        p.error(f"--max-queue must be >= 1, got {args.max_queue}")
    if not 1 <= args.port <= 65535:
        p.error(f"--port must be 1..65535, got {args.port}")
    return args


LOCAL = ("127.0.0.1", "localhost", "::1")


def main(argv=None) -> None:
    t0 = time.perf_counter()
    args = parse(argv)
    quiet_logs(progress=sys.stdout)  # a normal start says nothing on stderr
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        get_pair(args.pair)
        options = load_options(args)
    except (PairError, ValueError) as e:
        fail(str(e))
    from app.api import Api, router
    from app.host import ModelHost, real_pair

    if args.host not in LOCAL and not args.api_key:
        print(f"warning: serving on {args.host} without --api-key: anyone who can reach "
              "this port can use the model", file=sys.stderr)
    host = ModelHost(real_pair(options))
    host.start_loading(args.pair)  # in the background: the page is up meanwhile
    api = router(Api(host, args.api_key, args.max_queue))
    try:
        (serve_api if args.no_ui else serve_ui)(host, api, args, t0)
    finally:
        host.close()


def serve_api(host, api, args, t0: float) -> None:
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI(title="DuoDecoding API", docs_url=None, redoc_url=None)
    app.include_router(api)
    use_cors(app, origins(args.cors))
    print(f"API on http://{args.host}:{args.port}/v1 after {time.perf_counter() - t0:.1f} s; "
          f"loading '{args.pair}' in the background", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port,
                                           log_level="warning"))
    threading.Thread(target=_wait, args=(host, t0), daemon=True).start()
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind
        fail(f"cannot serve on {args.host}:{args.port} (port taken or address not available)")


def serve_ui(host, api, args, t0: float) -> None:
    import gradio as gr

    from app.ui import CSS, App, build

    demo = build(App(host, args.pair))
    demo.queue(default_concurrency_limit=1)
    theme = gr.themes.Soft(font=["ui-sans-serif", "system-ui", "sans-serif"],
                           font_mono=["ui-monospace", "monospace"])  # no web fonts fetched
    try:
        demo.launch(server_name=args.host, server_port=args.port, share=args.share, css=CSS,
                    theme=theme, ssr_mode=False, prevent_thread_lock=True, quiet=True,
                    footer_links=["api"], run_history=False)
    except OSError as e:  # port taken, address not available
        fail(f"cannot serve on {args.host}:{args.port}: {e}")
    demo.app.include_router(api)  # the API shares the page's server and its one model
    use_cors(demo.app, origins(args.cors))  # ours in place of gradio's rule
    print(f"page up at {demo.local_url} (API at {demo.local_url}v1) after "
          f"{time.perf_counter() - t0:.1f} s; loading '{args.pair}' in the background",
          flush=True)
    try:
        _wait(host, t0)
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        demo.close()


def _wait(host, t0: float) -> None:
    """Say when the models are ready (the page says so too); a failed load on stderr."""
    while host.loading is not None:
        time.sleep(0.2)
    ready = host.state == "ready"
    state = f"ready ('{host.name}')" if ready else f"not ready: {host.progress()}"
    print(f"models {state} after {time.perf_counter() - t0:.1f} s",
          file=sys.stdout if ready else sys.stderr, flush=True)


if __name__ == "__main__":
    main()
