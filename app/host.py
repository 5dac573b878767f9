"""The pair behind the app: loads it in the background with visible progress, switches pairs on
request, and lets one generation at a time run on it (the others wait their turn). Every load,
generation, profile and close runs on the host's one owner thread (models/owner.py)."""
from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterator

from models.owner import Owner
from models.pairs.catalog import PairError, get_pair, load_catalog

PairFactory = Callable[[str, Callable[[str], None]], object]


def real_pair(opts) -> PairFactory:
    """Loads a models.loader.Pair and profiles its draft budget, saying what it does."""
    def load(name: str, say: Callable[[str], None]):
        from models.loader import Pair

        pair = Pair(name, opts, progress=say)
        try:
            pair.ensure_profile()
            say("warming up (a few tokens with each method)")
            _warm_up(pair)
        except BaseException:
            pair.close()
            raise
        return pair
    return load


def _warm_up(pair) -> None:
    """First passes are slow (lazy init, thread pools): take them before the first user does,
    so that Compare's first numbers are fair."""
    from core.engine import METHODS, GenConfig

    ids = pair.prompt_ids("Hello", raw=not pair.spec.chat)
    for method in METHODS:
        for _ in pair.generate(ids, GenConfig(method=method, max_new_tokens=4)):
            pass


class FairLock:
    """A lock that waiters get in the order they asked (threading.Lock wakes any of them):
    the page's and the API's requests form one queue."""

    def __init__(self):
        self._cv = threading.Condition()
        self._waiting: deque[object] = deque()
        self._held = False

    def acquire(self, timeout: float | None = None) -> bool:
        me = object()
        with self._cv:
            self._waiting.append(me)
            ok = self._cv.wait_for(lambda: not self._held and self._waiting[0] is me, timeout)
            self._waiting.remove(me)
            self._held = ok or self._held
            self._cv.notify_all()  # the next in line may be due now (a waiter timed out)
            return ok

    def release(self) -> None:
        with self._cv:
            self._held = False
            self._cv.notify_all()

    def locked(self) -> bool:
        return self._held

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class OwnedPair:
    """A loaded pair whose verbs that run the target (generate, profiles, remeasure, close) run
    on the owner thread, a generation's events handed out through a queue; the rest (tokenizer,
    spec, describe) is the pair's own, read in the caller's thread."""

    def __init__(self, pair, owner: Owner):
        self.inner, self.owner = pair, owner

    def generate(self, *args, **kwargs):
        return self.owner.stream(lambda: self.inner.generate(*args, **kwargs))

    def remeasure(self) -> None:
        self.owner.call(self.inner.remeasure)

    def ensure_profile(self, *args, **kwargs):
        return self.owner.call(self.inner.ensure_profile, *args, **kwargs)

    def close(self) -> None:
        self.owner.call(self.inner.close)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class ModelHost:
    """One loaded pair at a time. `state` is 'idle', 'loading', 'ready' or 'error'."""

    def __init__(self, factory: PairFactory):
        self.factory = factory
        self.owner = Owner()  # loads, generations and closes all run on this one thread
        self.pair: OwnedPair | None = None
        self.name: str | None = None
        self.state = "idle"
        self.loading: str | None = None
        self.log: list[str] = []  # progress lines of the latest load
        self.errors: dict[str, str] = {}  # pair name -> why it cannot be used
        self.load_s = 0.0
        self._guard = threading.Lock()  # state changes
        self._run = FairLock()  # one generation or load at a time, first come first served

    def _made(self, name: str) -> OwnedPair:
        """The factory's pair for `name`, loaded (and warmed up) on the owner thread."""
        return OwnedPair(self.owner.call(self.factory, name, self._say), self.owner)

    # -- loading ------------------------------------------------------------------------
    def start_loading(self, name: str) -> bool:
        """Load `name` in a background thread unless a load is under way (False then); the
        thread waits for a running generation before it swaps pairs."""
        with self._guard:
            if self.loading is not None:
                return False
            self.loading, self.state, self.log = name, "loading", [f"loading pair '{name}'"]
        threading.Thread(target=self._load, args=(name,), daemon=True, name="pair-load").start()
        return True

    def _load(self, name: str) -> None:
        """Free the loaded pair first (two pairs may not fit), then load `name`; when that
        fails, load the freed pair again so the app keeps working."""
        t0 = time.perf_counter()
        try:
            get_pair(name)  # unknown name: fail before waiting for the model
            with self._run:
                old = self._free()
                try:
                    self.pair, self.name = self._made(name), name
                except Exception:
                    if old is not None:
                        self._reload(old, name)
                    raise
            self.load_s = time.perf_counter() - t0
            self._say(f"ready in {self.load_s:.1f} s")
            self.errors.pop(name, None)
        except Exception as e:  # shown to the user; the previous pair is loaded again
            self.errors[name] = str(e) or type(e).__name__
            self._say(f"cannot use pair '{name}': {self.errors[name]}")
        finally:
            with self._guard:
                self.loading = None
                self.state = "ready" if self.pair is not None else "error"

    def _free(self) -> str | None:
        """Close the loaded pair (caller holds _run); returns its name."""
        old, self.name = self.name, None
        if self.pair is not None:
            self._say(f"freeing pair '{old}'")
            pair, self.pair = self.pair, None
            pair.close()
        return old

    def _reload(self, old: str, failed: str) -> None:
        self._say(f"pair '{failed}' failed to load: loading '{old}' again")
        try:
            self.pair, self.name = self._made(old), old
            self._say(f"'{old}' is loaded again")
        except Exception as e:  # noqa: BLE001 - both failed: the state says error
            self._say(f"cannot load '{old}' again either: {e}")

    def _say(self, line: str) -> None:
        self.log.append(line)

    def prepare(self, name: str, poll_s: float = 0.2) -> Iterator[str]:
        """Yield progress lines until `name` is the loaded pair (after any load under way);
        PairError when it cannot be used."""
        while True:
            if self.loading is None:
                if self.name == name and self.pair is not None:
                    return
                if name in self.errors:
                    raise PairError(self.errors[name])
                self.start_loading(name)
            yield self.progress()
            time.sleep(poll_s)

    def progress(self) -> str:
        return self.log[-1] if self.log else ""

    # -- running ------------------------------------------------------------------------
    def wait_turn(self, poll_s: float = 0.2) -> Iterator[str]:
        """Yield while another generation holds the pair (normally gradio's queue already
        keeps requests apart; this covers a run that is still stopping)."""
        while self._run.locked():
            yield "waiting for the previous generation to finish"
            time.sleep(poll_s)

    @contextmanager
    def running(self, name: str, timeout_s: float = 900.0):
        """Hold the pair for one generation; others wait here (gradio queues them first)."""
        if not self._run.acquire(timeout=timeout_s):
            raise RuntimeError("the model stayed busy too long; try again")
        try:
            if self.name != name or self.pair is None:
                raise PairError(f"pair '{name}' is not loaded")
            yield self.pair
        finally:
            self._run.release()

    def context_use(self, prompt, raw: bool = False) -> tuple[int, int] | None:
        """(tokens `prompt` takes as the next prompt, the window) on the loaded pair; None while
        none is loaded; ValueError (from the pair) when it is over the window. Tokenizes only."""
        pair = self.pair
        if pair is None:
            return None
        texts = [prompt] if isinstance(prompt, str) else [m["content"] for m in prompt]
        used = len(pair.prompt_ids(prompt, raw=raw)) if any(t.strip() for t in texts) else 0
        return used, pair.target.n_ctx

    def close(self) -> None:
        with self._run:
            if self.pair is not None:
                self.pair.close()
                self.pair = None


def pair_choices() -> list[str]:
    """Pair names for the picker; an unreadable user catalog still leaves the built-ins."""
    try:
        return list(load_catalog())
    except PairError:
        return ["smol-self"]
