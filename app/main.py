"""Start the DuoDecoding web app: the page comes up at once and says how loading goes.

    python app/main.py [--pair NAME] [--host 127.0.0.1] [--port 7860] [--share]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # a local app calls no one home
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import add_model_args, fail, load_options, quiet_logs  # noqa: E402
from models.catalog import PairError, get_pair  # noqa: E402


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="DuoDecoding chat app")
    add_model_args(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: this machine only)")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--share", action="store_true", help="also make a public gradio.live link")
    return p.parse_args(argv)


def main(argv=None) -> None:
    t0 = time.perf_counter()
    args = parse(argv)
    quiet_logs()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        get_pair(args.pair)
        options = load_options(args)
    except (PairError, ValueError) as e:
        fail(str(e))
    from app.host import ModelHost, real_pair
    from app.ui import CSS, App, build

    import gradio as gr

    host = ModelHost(real_pair(options))
    host.start_loading(args.pair)  # in the background: the page is up meanwhile
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
    print(f"page up at {demo.local_url} after {time.perf_counter() - t0:.1f} s; "
          f"loading '{args.pair}' in the background", file=sys.stderr, flush=True)
    try:
        _wait(host, t0)
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        demo.close()
        host.close()


def _wait(host, t0: float) -> None:
    """Report on stderr when the models are ready (the page says so too)."""
    while host.loading is not None:
        time.sleep(0.2)
    state = f"ready ('{host.name}')" if host.state == "ready" else f"not ready: {host.progress()}"
    print(f"models {state} after {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
