"""Refresh docs/screenshot.png: start the app, ask one prompt on the default pair in headless
Chromium (Debian's, driven by Playwright, as tests/test_browser.py does) and save the page.

    .venv/bin/python scripts/screenshot.py [--out docs/screenshot.png] [--prompt TEXT]
"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"  # Debian's package; never a downloaded browser build
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 600_000  # a first start may convert weights and time the target's paths


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    p.add_argument("--prompt", default="Why is the sky blue? Answer in a short paragraph.")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=1100)
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"the app exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"the app did not answer at {url} within {timeout_s:.0f} s")


def wait_text(page, selector: str, text: str) -> None:
    page.wait_for_function("([sel, text]) => (document.querySelector(sel)?.innerText || '')"
                           ".includes(text)", arg=[selector, text])


def set_number(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[data-testid='number-input']")
    box.fill(str(value))
    box.press("Enter")


def capture(url: str, args: argparse.Namespace) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": args.width, "height": args.height})
        try:
            page = ctx.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(url, wait_until="domcontentloaded")
            wait_text(page, "#status", "Ready")
            set_number(page, "max-new", args.max_new_tokens)
            page.fill("#prompt textarea", args.prompt)
            page.click("#generate")
            wait_text(page, "#speed", "final · duo")
            page.locator("#timeline img").wait_for()
            page.wait_for_timeout(1000)  # let the plots settle
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out))  # the window: chat, speed panel, timeline
        finally:
            ctx.close()


def main(argv=None) -> None:
    args = parse(argv)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen([sys.executable, "app/main.py", "--port", str(port)], cwd=ROOT)
    try:
        wait_up(url, proc)
        capture(url, args)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
