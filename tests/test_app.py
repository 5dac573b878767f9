"""The app in this process (the Compare note; the model host over fake pairs), and how it is
started as `python app/main.py` on a free port (`running_app`, for conftest's `app_process`;
that process's tests, over gradio's client and in a browser: tests/test_browser.py)."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app.view import identical_note
from models.pairs.catalog import PairError

ROOT = Path(__file__).resolve().parent.parent
TOKENS = 8  # keep generations short: the app's tests check the wiring (greedy and seeded
# texts equal across methods at length: tests/test_real_lossless.py, tests/test_api_fields.py)

# chat inputs after (prompt, history): pair, raw, system prompt, method, max new tokens,
# temperature, top-p, top-k, seed, gamma mode, gamma, multi-seq, max seqs, threshold scale
def chat_args(prompt, method="duo", tokens=TOKENS, raw=False, history=None, system="",
              temperature=0.0, seed=0):
    return (prompt, history or [], "smol-self", raw, system, method, tokens, temperature, 1.0,
            0, seed, "auto", 5, True, 4, 1.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_app(log_path: Path, timeout_s: float = 180.0):
    """Start the app in a subprocess; yield (url, seconds until the page answered). Its stdout
    goes to `log_path`, its stderr to the same name ending .err."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log, err = open(log_path, "w"), open(log_path.with_suffix(".err"), "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "app/main.py", "--port", str(port)], cwd=ROOT,
                            stdout=log, stderr=err)
    try:
        while not _up(url):
            if proc.poll() is not None:
                raise RuntimeError(f"app exited with {proc.returncode}: "
                                   f"{log_path.with_suffix('.err').read_text()}")
            if time.perf_counter() - t0 > timeout_s:
                raise TimeoutError(f"app did not come up: {log_path.read_text()}")
            time.sleep(0.2)
        yield url, time.perf_counter() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        err.close()


@pytest.mark.parametrize("dtype,device,needle", [
    ("float32", "cpu", "should not happen"),
    ("bfloat16", "cpu", "expected now and then with a bfloat16"),
    ("float32", "cuda", "expected now and then with a float32 target on cuda"),
    ("bfloat16", "cuda", "Only a float32 target on the CPU")])
def test_compare_note_on_parted_greedy_texts(dtype, device, needle):
    stats = {"target_dtype": dtype, "target_device": device}
    parted = {"vanilla": {"ids": [1, 2], "stats": stats}, "duo": {"ids": [1, 3], "stats": stats}}
    assert needle in identical_note(parted, greedy=True)
    same = {m: {"ids": [1, 2], "stats": stats} for m in ("vanilla", "duo")}
    assert "all texts are identical" in identical_note(same, greedy=True)


# -- ModelHost with a fake pair factory (no models, fast) ----------------------------------
class FakePair:
    def __init__(self, name):
        self.name, self.closed = name, False

    def close(self):
        self.closed = True


def fake_factory(delay_s=0.05, release=None):
    """`release`: an Event each load waits for (set: no wait)."""
    def load(name, say):
        say(f"fake load of {name}")
        time.sleep(delay_s)
        if release is not None:
            release.wait(60)
        if name == "gemma-smol":
            raise PairError("different tokenizers: not supported here")
        return FakePair(name)
    return load


def test_host_loads_switches_and_reports_errors():
    import threading

    from app.host import ModelHost

    release = threading.Event()  # smol-self's load ends once gemma-smol's wait has begun
    host = ModelHost(fake_factory(release=release))
    assert host.start_loading("smol-self")
    lines = []
    with pytest.raises(PairError, match="different tokenizers"):
        for line in host.prepare("gemma-smol"):  # asked while smol-self loads: waits, then tries
            lines.append(line)
            release.set()
    assert any("smol-self" in line for line in lines)  # it said what it waited for
    assert host.name == "smol-self" and host.state == "ready"  # the loaded pair stays usable
    with pytest.raises(PairError, match="different tokenizers"):  # remembered, not reloaded
        list(host.prepare("gemma-smol"))
    first = host.pair
    list(host.prepare("smol-self"))  # already loaded: nothing to wait for
    assert host.pair is first and not first.closed
    with pytest.raises(PairError):
        list(host.prepare("no-such-pair"))
    with host.running("smol-self") as pair:
        assert pair is first
    host.close()
    assert first.closed


def test_host_frees_the_old_pair_before_loading_and_reloads_it_on_failure():
    from app.host import ModelHost

    live, loads = [], []

    def factory(name, say):
        loads.append(name)
        if any(not p.closed for p in live):
            raise AssertionError("two pairs loaded at once")
        if name == "gemma-smol":
            raise PairError("does not fit")
        live.append(FakePair(name))
        return live[-1]

    host = ModelHost(factory)
    list(host.prepare("smol-self"))
    first = host.pair
    list(host.prepare("llama2-7b-68m"))  # a switch: the first pair is closed before
    assert first.closed and host.name == "llama2-7b-68m"
    with pytest.raises(PairError, match="does not fit"):
        list(host.prepare("gemma-smol"))
    assert loads == ["smol-self", "llama2-7b-68m", "gemma-smol", "llama2-7b-68m"]
    assert host.name == "llama2-7b-68m" and host.state == "ready" and not host.pair.closed
    assert any("loading 'llama2-7b-68m' again" in line for line in host.log)
    with host.running("llama2-7b-68m") as pair:
        assert pair is host.pair
    host.close()


def test_host_load_waits_for_running_generation():
    from app.host import ModelHost

    host = ModelHost(fake_factory(0.0))
    list(host.prepare("smol-self"))
    with host.running("smol-self"):
        host.start_loading("llama2-7b-68m")  # a real pair name; the fake loads anything
        time.sleep(0.2)
        assert host.name == "smol-self"  # not swapped under a running generation
    list(host.prepare("llama2-7b-68m"))
    assert host.name == "llama2-7b-68m"


def test_the_host_lock_serves_waiters_first_come_first_served():
    import threading
    import time

    from app.host import FairLock

    lock, order, threads = FairLock(), [], []
    lock.acquire()

    def wait_turn(i):
        with lock:
            order.append(i)
    for i in range(6):
        threads.append(threading.Thread(target=wait_turn, args=(i,)))
        threads[-1].start()
        while len(lock._waiting) < i + 1:  # queued before the next one starts
            time.sleep(0.001)
    assert lock.acquire(timeout=0.05) is False and len(lock._waiting) == 6
    lock.release()
    for t in threads:
        t.join(5)
    assert order == list(range(6)) and not lock.locked() and not lock._waiting
