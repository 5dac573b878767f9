"""A real browser on the app: headless Debian Chromium, driven by Playwright, opens the page,
types a prompt, presses Generate, waits for the answer and the speed panel, stops a long answer,
runs Compare, and saves screenshots under test-artifacts/."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")  # Debian's package; never a downloaded browser build
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKENS = 24
WAIT_MS = 90_000

pytestmark = pytest.mark.skipif(not CHROMIUM.exists() or shutil.which("chromium") is None,
                                reason="needs Debian's chromium (make test installs it)")


@pytest.fixture(scope="module")
def page(tmp_path_factory, app_process):
    playwright = pytest.importorskip("playwright.sync_api")
    tmp = tmp_path_factory.mktemp("browser")
    url = app_process[0]  # the app tests' process (tests/conftest.py)
    with playwright.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp / "profile"), executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 1000})
        try:
            pg = ctx.new_page()
            pg.set_default_timeout(WAIT_MS)
            pg.goto(url, wait_until="domcontentloaded")
            yield pg
        finally:
            ctx.close()


@pytest.fixture(autouse=True)
def screenshot_after(request, page):
    """Every test leaves a picture of the page behind (handy when one fails)."""
    yield
    shot(page, f"after_{request.node.name}.png")


def set_slider(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[data-testid='number-input']")
    box.fill(str(value))
    box.press("Enter")
    page.wait_for_function(
        f"document.querySelector(\"#{elem_id} input[type='range']\").value === '{value}'")


def wait_text(page, selector: str, text: str) -> None:
    """Wait until the element exists and its visible text contains `text`."""
    page.wait_for_function("([sel, text]) => (document.querySelector(sel)?.innerText || '')"
                           ".includes(text)", arg=[selector, text])


def generate(page, prompt: str) -> None:
    page.fill("#prompt textarea", prompt)
    page.click("#generate")


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


def test_page_says_loading_or_ready_then_ready(page):
    status = page.locator("#status")
    assert re.search(r"Loading|Ready", status.inner_text())
    wait_text(page, "#status", "Ready")
    assert "draft" in page.inner_text("#placement") and "CPU" in page.inner_text("#placement")


def test_duo_answer_streams_with_speed_panel(page):
    set_slider(page, "max-new", TOKENS)
    generate(page, "Name three colors.")
    wait_text(page, "#speed", "final · duo")
    answer = page.locator("#chat [data-testid='bot']").last
    assert answer.inner_text().strip()
    speed = page.inner_text("#speed")
    for field in ("tokens/s", "time to first token", "acceptance rate", "gamma in use",
                  "overlap efficiency", "draft busy / idle", "target busy / idle"):
        assert field in speed
    assert "accepted draft" in page.inner_text("#sources")  # the legend of token sources
    page.locator("#timeline img").wait_for()  # the picture renders a moment after the panel
    assert shot(page, "browser_duo.png").stat().st_size > 10_000


def test_regenerate_export_and_context_meter(page):
    wait_text(page, "#context", "tokens (")  # counted after the answer above
    assert page.locator("#system textarea").count() == 1
    bots = page.locator("#chat [data-testid='bot']").count()
    page.fill("#prompt textarea", "")
    set_slider(page, "temperature", 1)
    page.click("#regenerate")
    wait_text(page, "#status", "· seed ")  # sampling: a fresh random seed, shown
    set_slider(page, "temperature", 0)
    assert page.locator("#chat [data-testid='bot']").count() == bots  # replaced, not added
    with page.expect_download() as info:
        page.click("#export-json")
    assert re.fullmatch(r"chat-\d{8}-\d{6}\.json", info.value.suggested_filename)
    assert '"role": "assistant"' in Path(info.value.path()).read_text()


def test_stop_then_next_request_works(page):
    set_slider(page, "max-new", 600)
    generate(page, "Tell me a long story about a dragon and a knight.")
    wait_text(page, "#speed", "live")
    page.click("#stop")
    wait_text(page, "#status", "stopped")
    set_slider(page, "max-new", TOKENS)
    generate(page, "Say hello.")
    wait_text(page, "#status", "done:")
    assert page.locator("#chat [data-testid='bot']").count() >= 3


def test_clear_then_compare_shows_three_methods(page):
    page.click("#clear")
    wait_text(page, "#status", "cleared")
    assert page.locator("#chat [data-testid='bot']").count() == 0
    page.fill("#prompt textarea", "Name a fruit.")
    page.click("#compare")
    wait_text(page, "#compare-table", "all texts are identical")
    table = page.inner_text("#compare-table")
    for method in ("vanilla", "sps", "duo"):
        assert method in table
    assert "speed-up vs vanilla" in table
    assert shot(page, "browser_compare.png").stat().st_size > 10_000
