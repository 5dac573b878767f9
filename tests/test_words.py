"""No word about how the project was made: every tracked file's text and path is read for the
words of a workshop (sessions, this project's issues, leases, worktrees, checkout paths), with a
short list of the ordinary uses that stay and why. Reads files only; no model."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What must not appear, each with what it catches.
BANNED = {
    r"\bsessions?\b": "a turn of work on the project (a browser's or pytest's session is allowed below)",
    r"\bissues?\s+#?\d+": "this project's issue numbers (a library's own, named before it, is allowed below)",
    r"(?:\b|_)issues?_|_issues?\b": "an issue in a name (a test named after what was asked, not what it checks)",
    r"\bleas(?:e|es|ed|ing)\b|\blent\b": "how a machine was borrowed",
    r"(?<![\w.])s\d{2}\b": "a session's tag (s12, s28)",
    r"\bturns? of work\b": "how the work was divided",
    r"\bworktrees?\b": "the workshop's checkouts",
    r"/work/(?:main|wt-)": "an absolute path of a checkout",
}
BAN = re.compile("|".join(f"(?:{p})" for p in BANNED), re.I)

# Ordinary uses that stay, removed from a line before it is checked, each with its reason.
ALLOWED = {
    r"session_hash": "gradio's id of a browser tab (app/ui.py)",
    r"scope=\"session\"|pytest_session\w*|session\.config|\(session\)": "pytest's own API",
    r"\b(?:browser|gradio|http|pytest|test)\s+session\b": "a browser's, gradio's, an HTTP or pytest's session",
    r"\b_?session\b(?=\s*[,:)=\]]|\()": "a Python name for gradio's browser session (app/ui.py's stops)",
    r"get_session\(\)|get_session\b": "huggingface_hub's HTTP session",
    r"\b(?:pytorch|torch|llama\.cpp|gradio|transformers|vllm|sglang|triton|torchao|"
    r"huggingface_hub|playwright|llguidance)(?:'s)?\s+(?:issue|pr)\s+#?\d+": "a library's issue, cited as a workaround's source",
}
ALLOW = re.compile("|".join(f"(?:{p})" for p in ALLOWED), re.I)


# This file names the words it looks for, so it is the one file not read for them.
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def hits(path: str, text: str) -> list[str]:
    """'path:line: word' for each banned word left once the allowed uses are taken out."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in BAN.finditer(ALLOW.sub(" ", line)):
            found.append(f"{path}:{n}: '{m.group(0)}'")
    return found


def text_of(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:  # a tracked file deleted in the working tree
        return None
    if b"\0" in data[:8192]:
        return None  # binary (a screenshot, a figure)
    return data.decode("utf-8", errors="replace")


# the words the samples below must catch, put together here so that this file does not
# spell them out itself
SES, ISS, LEA, CHECKOUT = "ses" + "sion", "is" + "sue", "lea" + "se", "/wo" + "rk/main"


def test_the_patterns_catch_what_they_mean_and_spare_the_allowed():
    assert hits("x", f"the ninth {SES}'s cuts") and hits("x", f"as {ISS} 30 asked")
    assert hits("x", f"a 15-minute {LEA}") and hits("x", "bench/results/2026-11-27-" + "s28")
    assert hits("x", f"cd {CHECKOUT} && make") and hits("x", f"{SES.title()} 27: duo in turns")
    assert hits("x", f"def test_builtin_catalog_has_the_{ISS}_pairs():")
    assert not hits("x", 'getattr(request, "session_hash", None)')
    assert not hits("x", '@pytest.fixture(scope="session")')
    assert not hits("x", "cudagraph trees (pytorch issue 123177)")
    assert not hits("x", "the release of the grammar; a gradio session")
    assert not hits("x", "bf16 utf8 abs16 fp32s")


def test_no_process_word_in_any_tracked_file():
    found = []
    for rel in tracked():
        if rel == SELF:
            continue
        found += hits(rel, rel)  # the path itself: folder and file names
        text = text_of(ROOT / rel)
        if text is not None:
            found += hits(rel, text)
    assert not found, ("words about how the project was made (say what the code or figure is, "
                       "with its machine and date):\n" + "\n".join(found[:200])
                       + (f"\n... and {len(found) - 200} more" if len(found) > 200 else ""))
