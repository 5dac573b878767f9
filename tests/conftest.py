"""Shared fixtures: the real smol-self and gemma-smol pairs (loaded once per test run), the
oracle's greedy ids (decoded once per pair and prompt), the repo root, and the check of a
script's one-line error exit."""
from __future__ import annotations

import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The eager target is the reference path; the compiled one has its own tests (compiling
# every start of the CLI and the app would take minutes on a CPU).
os.environ.setdefault("DUO_TARGET_COMPILE", "off")
os.environ.setdefault("DUO_TARGET_QUANT", "none")
# two workers share the cores: OpenMP threads sleep at once at a barrier (spinning beside the
# other worker doubled a forward's time)
os.environ.setdefault("GOMP_SPINCOUNT", "0")
from tests.profiles import use_fixed_profiles  # noqa: E402

use_fixed_profiles()  # the suite's pairs get fixed budget profiles (tests/profiles.py: why)


# duo's options under which no timing chooses its rounds, for a case that counts its drafts or
# rejections (with a fixed gamma: the budget's own follows the timings): the worker drafts on
# the caller's thread, so a long prompt's draft prefill takes one plain round, not as many as
# the target fits beside it; no pre-draft, lookup or second sequence (each priced on
# measured times)
UNTIMED = {"sequential": True, "predraft": False, "lookup": "off", "multi_seq": False}


def reference_pair(name: str):
    """The eager, unquantized, unpacked reference path, float32 on the CPU even where cuda is
    present: the exactness tests compare greedy output token for token (tests/test_gpu.py: cuda).
    Its duo overlaps (overlapped), as with the target on a GPU."""
    from models.loader import LoadOptions, Pair

    return overlapped(Pair(name, LoadOptions(
        device="cpu", dtype="float32", target_compile="off", target_quant="none",
        target_pack=False)))


def overlapped(pair):
    """duo's draft beside the target, as the plan has it on a GPU: the suite's real pairs run
    the overlapped loop, the product's own, against the oracle (the CPU's plan, duo in sps's
    loop: tests/test_defaults.py)."""
    from dataclasses import replace

    pair.threads = replace(pair.threads, overlapped=True)
    return pair


@pytest.fixture(scope="session")
def smol_pair():
    pair = reference_pair("smol-self")
    yield pair
    pair.close()


_APP: dict = {}


@pytest.fixture(scope="module")
def app_process(tmp_path_factory):
    """One `python app/main.py` on a free port for the app and browser tests (each has its
    own gradio session): (url, seconds until the page answered). Started for the first test
    that uses it, shared while the tests that follow in this process use it too, stopped
    after the last of them (an idle app takes about 3 CPU seconds a minute)."""
    if "app" not in _APP:
        from tests.test_app import running_app

        _APP["log"] = tmp_path_factory.mktemp("app") / "app.log"
        _APP["app"] = running_app(_APP["log"])
        _APP["url"] = _APP["app"].__enter__()
    return _APP["url"]


@pytest.fixture
def app_stderr(app_process):
    """The shared app's stderr so far, read when called."""
    return lambda: _APP["log"].with_suffix(".err").read_text()


def _stop_app() -> None:
    app = _APP.pop("app", None)
    if app is not None:
        app.__exit__(None, None, None)


def _uses_app(item) -> bool:
    return item is not None and "app_process" in getattr(item, "fixturenames", ())


# The slowest files first (their seconds in a cold fresh-clone run, 2026-11-26, junit times,
# scaled by the suite's cuts of that day), after the browser's file (first as before: it starts
# the app process): `make test` hands whole files to two workers in this order, so no long
# file is left for the end.
SLOW_FILES = ("test_browser", "test_cross_tokenizer", "test_target_static", "test_real_lossless",
              "test_grammar", "test_sampling_lossless", "test_gpu", "test_gpu_checks",
              "test_multi_seq",
              "test_api_agents", "test_quant", "test_quant_target",
              "test_api", "test_defaults", "test_bad_input", "test_context", "test_seeded",
              "test_constraints", "test_target_dtype", "test_api_fields", "test_cli",
              "test_lookup_lossless", "test_benchmark")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    # stable; in a file, the app's users last (test_browser's: the one app process), so it
    # stops when they are done
    items.sort(key=lambda item: (rank.get(Path(str(item.fspath)).stem, len(rank)),
                                 str(item.fspath), _uses_app(item)))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """The app stops when the next test in this process (an xdist worker knows it) does not
    use it; the module fixtures over it (a browser, a client) have been torn down by then."""
    if _uses_app(item) and not _uses_app(nextitem):
        _stop_app()


def pytest_runtest_logreport(report):
    """DUO_FAILURE_LOG names a file that gets each failure's report as it happens (a GPU
    machine's call may be cut off before pytest's summary; scripts/gpu_checks.sh sets it)."""
    if report.failed and (path := os.environ.get("DUO_FAILURE_LOG")):
        with open(path, "a") as f:
            f.write(f"== {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n")


CONVERT = """import sys
from models.pairs.catalog import get_pair, target_source
from models.pairs.convert import converted_dir
kind, path = target_source(get_pair(sys.argv[1]))
if kind == "gguf" and path.exists():
    converted_dir(path)
"""


_CONVERTING: list = []


def pytest_sessionstart(session):
    """Under xdist: the suite's pairs converted once, each in a process of its own (11 and 27
    CPU seconds on a fresh cache), smol-self's before the workers start (their first files
    load it), gemma-smol's beside them (a process that needs it first waits for it:
    models/pairs/convert.py locks a conversion). Before, the workers' first files and the app
    processes they start each converted the same GGUF at once. A pair that fails here (a GPU
    machine may lack its package) fails in the tests that load it."""
    if getattr(session.config.option, "numprocesses", None) and \
            not hasattr(session.config, "workerinput"):
        runs = [subprocess.Popen([sys.executable, "-c", CONVERT, name], cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for name in ("smol-self", "gemma-smol")]
        runs[0].wait()
        _CONVERTING.extend(runs[1:])


def pytest_sessionfinish(session):
    _stop_app()  # a run stopped early
    for run in _CONVERTING:
        run.wait()


@pytest.fixture(scope="session")
def gemma_pair():
    """gemma-smol (different tokenizers), the same reference path, loaded once per test run."""
    pair = reference_pair("gemma-smol")
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def pair_with(smol_pair):
    """smol-self loaded with other LoadOptions; the budget reuses smol_pair's profile (the
    options' speed is not what these tests check)."""
    import models.fit.profiler as profiler
    from models.loader import LoadOptions, Pair

    profile, pairs = smol_pair.ensure_profile(), []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profiler, "load_or_measure", lambda *a, **k: profile)

        def load(**options):
            options.setdefault("device", "cpu")  # exact on any machine (see smol_pair)
            options.setdefault("dtype", "float32")
            options.setdefault("target_compile", "off")
            options.setdefault("target_quant", "none")
            options.setdefault("target_pack", False)  # packed: tests/test_target_packed.py
            pairs.append(overlapped(Pair("smol-self", LoadOptions(**options))))
            return pairs[-1]
        yield load
    for pair in pairs:
        pair.close()


_ORACLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def vanilla_ids(pair, ids: list[int], n: int) -> list[int]:
    """The target-only decoder's greedy ids for `ids` (the oracle), at most `n` new tokens,
    decoded once per pair and prompt (and kept on disk): greedy vanilla makes one token a
    step, so a shorter run is the prefix of a longer one, and a run that stopped early (eos)
    stops there at any length."""
    from core.engine import GenConfig

    from tests import oracle

    runs = _ORACLE.setdefault(pair, {})
    tokens, asked = runs.get(tuple(ids)) or oracle.load(pair, ids)  # tests/oracle.py: on disk
    if n > asked and len(tokens) == asked:
        events = pair.generate(list(ids), GenConfig(method="vanilla", max_new_tokens=n))
        tokens, asked = [t for e in events for t in e.tokens], n
        oracle.store(pair, ids, tokens, asked)
    runs[tuple(ids)] = (tokens, asked)
    return tokens[:n]


def one_line_exit_2(capsys, call) -> str:
    """Run `call` (a script's main); it must exit 2 with one `error: ...` line on stderr and
    no traceback; return that line."""
    with pytest.raises(SystemExit) as e:
        call()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2, err
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err
