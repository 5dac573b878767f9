"""The app as a process, one `python app/main.py` for the file: over gradio's client (chat,
cancel, stop, queueing, Compare) and in headless Debian Chromium driven by Playwright (answer
and speed panel, stop, Compare; screenshots under test-artifacts/)."""
from __future__ import annotations

import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.test_app import TOKENS, _up, chat_args

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")  # Debian's package; never a downloaded browser build
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 90_000


@pytest.fixture(scope="module")
def page(tmp_path_factory, app_process):
    if not CHROMIUM.exists() or shutil.which("chromium") is None:
        pytest.skip("needs Debian's chromium (make test installs it)")
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


# -- over gradio's client ------------------------------------------------------------------
@pytest.fixture(scope="module")
def app(app_process):
    from gradio_client import Client

    url, up_s = app_process  # shared with the browser's tests below
    client = Client(url, verbose=False)
    first_status = client.predict(api_name="/status")[0]
    return {"url": url, "client": client, "up_s": up_s, "first_status": first_status}


def answer_of(result) -> tuple[str, dict, str]:
    """(assistant text, stats, status line) from a /chat result."""
    history, stats, status = result[1], result[4], result[8]
    content = history[-1]["content"]
    text = "".join(p.get("text", "") for p in content) if isinstance(content, list) else content
    assert history[-1]["role"] == "assistant"
    return text, stats, status


def test_page_is_up_while_loading(app):
    assert app["first_status"].startswith(("**Loading", "**Ready")), app["first_status"]
    assert _up(app["url"])


def test_chat_returns_text_and_stats(app, app_stderr):
    text, stats, status = answer_of(app["client"].predict(*chat_args("Name three colors."),
                                                          api_name="/chat"))
    assert text.strip()
    assert app_stderr() == ""  # a normal start and answer: nothing on stderr
    assert stats["method"] == "duo"
    assert 0 < stats["new_tokens"] <= TOKENS
    assert stats["tokens_per_s"] > 0 and stats["rounds_log"]
    assert status.startswith("done:")


def test_multi_turn_keeps_history(app):
    client = app["client"]
    history = client.predict(*chat_args("My name is Ada."), api_name="/chat")[1]
    result = client.predict(*chat_args("What is my name?", history=history), api_name="/chat")
    assert len(result[1]) == 4
    assert answer_of(result)[0].strip()


def _streamed_text(job) -> str:
    """The assistant text of the job's latest streamed chat value ('' before any)."""
    for out in reversed(job.outputs()):
        history = out[1]
        if isinstance(history, list) and history and history[-1]["role"] == "assistant":
            return "".join(p.get("text", "") for p in history[-1]["content"])
    return ""


def _streaming(client, prompt: str):
    """A long answer submitted, once it streams (or ends, or 120 s pass): (job, start)."""
    job = client.submit(*chat_args(prompt, tokens=1000), api_name="/chat")
    t0 = time.perf_counter()
    while not _streamed_text(job) and not job.done() and time.perf_counter() - t0 < 120:
        time.sleep(0.05)
    return job, t0


def test_cancel_leaves_app_usable(app):
    from gradio_client.utils import Status

    client = app["client"]
    job, t0 = _streaming(client, "Tell me a long story about a dragon.")
    assert _streamed_text(job)  # it is streaming
    job.cancel()
    while not job.done() and time.perf_counter() - t0 < 120:
        time.sleep(0.05)
    assert job.status().code == Status.CANCELLED
    text, stats, _ = answer_of(client.predict(*chat_args("Say hello."), api_name="/chat"))
    assert text.strip() and stats["new_tokens"] <= TOKENS


def test_stop_ends_the_running_answer(app):
    client = app["client"]
    job, _ = _streaming(client, "Tell me a long story about a knight.")
    assert client.predict(api_name="/stop") == "stopping …"  # same browser session as the job
    text, stats, status = answer_of(job.result(timeout=60))
    assert re.fullmatch(r"stopped after \d+ tokens", status), status
    assert int(status.split()[2]) < 1000
    assert text.strip()  # what was streamed stays in the chat
    assert stats["stop_reason"] == "stopped" and stats["new_tokens"] == int(status.split()[2])
    text, _, _ = answer_of(client.predict(*chat_args("Say hi."), api_name="/chat"))
    assert text.strip()


def test_concurrent_requests_queue_and_finish(app):
    from gradio_client import Client

    clients = [Client(app["url"], verbose=False) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(c.predict, *chat_args(f"Count to {n}."),
                               api_name="/chat") for n, c in zip((3, 5), clients)]
        results = [answer_of(f.result(timeout=120)) for f in futures]
    assert all(text.strip() and stats["new_tokens"] <= TOKENS for text, stats, _ in results)


def test_empty_prompt_is_refused_politely(app):
    result = app["client"].predict(*chat_args("   "), api_name="/chat")
    assert result[8] == "Type a prompt first."


def test_compare_greedy_texts_identical(app):
    table, vanilla, sps, duo = app["client"].predict(*chat_args("Name a fruit."),
                                                     api_name="/compare")
    assert vanilla and vanilla == sps == duo
    assert "all texts are identical" in table
    for method in ("vanilla", "sps", "duo"):
        assert f"| {method} |" in table


def test_compare_sampled_texts_identical_under_a_seed(app):
    """The coupled sampler: one seed, temperature 1, the same text from every method."""
    args = chat_args("Name a fruit.", temperature=1.0, seed=7)
    table, vanilla, sps, duo = app["client"].predict(*args, api_name="/compare")
    assert vanilla and vanilla == sps == duo
    assert "Sampling (one seed, the coupled sampler): all texts are identical" in table


# -- in a browser -----------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def screenshot_after(request):
    """Every browser test leaves a picture of the page behind (handy when one fails)."""
    page = request.getfixturevalue("page") if "page" in request.fixturenames else None
    yield
    if page is not None:
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


ONE_LINE = """e => {  // [the line's height, one line's height in the same paragraph style]
    const probe = e.cloneNode(false);
    probe.textContent = "X";
    e.parentNode.appendChild(probe);
    const one = probe.getBoundingClientRect().height;
    probe.remove();
    return [e.getBoundingClientRect().height, one];
}"""


def test_placement_fits_one_line_with_the_reasons_one_click_away(page):
    """At 1400 px the placement says where draft and target run, and at what precision, in
    one line; the reasons and measured figures behind each choice open with one click."""
    wait_text(page, "#status", "Ready")
    line = page.locator("#placement p").first
    assert re.search(r"draft.*CPU, \d+ threads?.*target.*CPU, float32", line.inner_text())
    height, one = line.evaluate(ONE_LINE)
    assert height < 1.5 * one, f"the placement line wraps: {height} px against {one} px a line"
    why = page.locator("#placement details")
    assert why.count() == 1 and not why.evaluate("e => e.open")
    assert not page.locator("#placement details li").first.is_visible()
    page.locator("#placement details summary").click()
    reasons = page.locator("#placement details li")
    reasons.first.wait_for(state="visible")
    assert "thread" in reasons.first.inner_text() and reasons.count() == 2


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
    """From a cleared chat: after the short answers above (cut at TOKENS), the story once
    copied one and ended by EOS at its length, before the stop."""
    page.click("#clear")
    wait_text(page, "#status", "cleared")
    set_slider(page, "max-new", 600)
    generate(page, "Tell me a long story about a dragon and a knight.")
    wait_text(page, "#speed", "live")
    page.click("#stop")
    wait_text(page, "#status", "stopped")
    set_slider(page, "max-new", TOKENS)
    generate(page, "Say hello.")
    wait_text(page, "#status", "done:")
    assert page.locator("#chat [data-testid='bot']").count() == 2  # the stopped one kept


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
