"""What the page does: chat with streaming (system prompt, regenerate, export, context meter),
stop, clear, pair switch and the method comparison (the layout is in app/page.py). Reads the
engine's events and stats through ModelHost; never touches a model."""
from __future__ import annotations

import functools
import itertools
import logging
import tempfile
import time
from contextlib import closing
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import gradio as gr

from app import charts
from app.chat import (clean_history, context_prompt, conversation, last_question, meter_line,
                      no_text_note, with_system, write_exports)
from app.host import ModelHost
from app.page import CSS, COMPARE, OUTPUTS, SPEED_HINT, build
from app.view import (Settings, Trace, compare_table, final_panel, for_method, jsonable,
                      live_panel, placement_line)
from models.pairs.catalog import PairError, get_pair
from models.prompt_text import has_text

__all__ = ["App", "CSS", "build"]  # app/main.py takes the page from here
log = logging.getLogger(__name__)
STREAM_EVERY_S = 0.08  # at most this often a streaming update goes to the page


class Stops:
    """Stop requests per browser session: a running generation of that tab ends at its next
    event and the request completes normally (so the page never misses the next click)."""

    def __init__(self):
        self._at: dict[str, float] = {}

    def request(self, session: str) -> None:
        self._at[session] = time.monotonic()

    def since(self, session: str, t0: float) -> bool:
        return self._at.get(session, float("-inf")) >= t0


def _session(request) -> str:
    return getattr(request, "session_hash", None) or "local"


def _out(**values) -> tuple:
    """One update of OUTPUTS by name; the others are left as they are."""
    return tuple(values.get(k, gr.skip()) for k in OUTPUTS)


def _error_line(e: Exception) -> str:
    if isinstance(e, (PairError, ValueError, RuntimeError)):
        return f"**error:** {e}"
    log.exception("unexpected error in a request (the chat is left as it was)")
    return f"**error:** {type(e).__name__}: {e}"


@dataclass
class Turn:
    """One answer to give: the question, the turns before it, what the chatbot returns to on
    an error and what the prompt box gets back then (None: leave the box alone)."""
    message: str
    earlier: list[dict]
    before: list[dict]
    typed: str | None
    raw: bool
    system: str | None


class App:
    def __init__(self, host: ModelHost, default_pair: str):
        self.host, self.default_pair = host, default_pair
        self.stops = Stops()
        self._fresh = itertools.count(1)  # regenerate with sampling: seed + 1, + 2, ...

    @functools.cached_property
    def export_dir(self) -> Path:
        """Made at the first export, removed with the app (gradio serves its own copies)."""
        self._exports = tempfile.TemporaryDirectory(prefix="duo-chat-")
        return Path(self._exports.name)

    # -- status ------------------------------------------------------------------------
    def status(self) -> str:
        h = self.host
        if h.loading:
            return f"**Loading `{h.loading}`** (the page works; requests wait): {h.progress()}"
        if h.state == "ready":
            err = h.errors and f" · last problem: {list(h.errors.values())[-1]}" or ""
            return f"**Ready** · `{h.name}` loaded in {h.load_s:.1f} s{err}"
        return f"**No pair loaded**: {h.progress()}" if h.state == "error" else "…"

    def placement(self) -> str:
        h = self.host
        if h.pair is None:
            return "**placement**: (loading)"
        return placement_line(h.pair.describe(), h.name)

    def tick(self):
        busy = self.host.loading is not None or self.host.state == "idle"
        return self.status(), self.placement(), gr.Timer(active=busy)

    # -- chat -----------------------------------------------------------------------------
    def chat(self, request: gr.Request, message, history, pair_name, raw, system, *settings):
        message, history = (message or "").strip(), clean_history(history)
        if not has_text(message):  # blank, or control characters alone
            yield _out(status="Type a prompt first.")
            return
        turn = Turn(message, history, history, message, bool(raw), system)
        yield from self._answer(request, turn, pair_name, Settings(*settings))

    def regenerate(self, request: gr.Request, history, pair_name, raw, system, *settings):
        """Answer the last question again; sampling takes a fresh seed, greedy the same text."""
        history = clean_history(history)
        message, earlier = last_question(history)
        if not message:
            yield _out(status="Nothing to regenerate: ask something first.")
            return
        s = Settings(*settings)
        if float(s.temperature or 0) > 0 and int(s.seed or 0) >= 0:  # -1 is random anyway
            s = replace(s, seed=int(s.seed or 0) + next(self._fresh))
        yield from self._answer(request, Turn(message, earlier, history, None, bool(raw), system),
                                pair_name, s)

    def _answer(self, request, turn: Turn, pair_name, settings: Settings):
        """Stream one answer; on any error the chat goes back to `turn.before`, the typed text
        back to the prompt box, and the status line says what went wrong."""
        t0, session = time.monotonic(), _session(request)
        shown = turn.earlier + [{"role": "user", "content": turn.message},
                                {"role": "assistant", "content": ""}]
        box = gr.skip() if turn.typed is None else ""
        yield _out(prompt=box, chatbot=shown, status=self.status())
        try:
            cfg = settings.gen_config()
            for line in self._wait(pair_name):
                yield _out(status=f"waiting for the model: {line}")
            yield from self._stream(turn, cfg, pair_name, shown,
                                    lambda: self.stops.since(session, t0))
        except Exception as e:  # noqa: BLE001 -- whatever failed, the page keeps working
            box = gr.skip() if turn.typed is None else turn.typed
            yield _out(prompt=box, chatbot=turn.before, status=_error_line(e),
                       meter=self.meter(turn.before, turn.raw, turn.system))

    def _wait(self, pair_name):
        yield from self.host.prepare(pair_name)
        yield from self.host.wait_turn()

    def _stream(self, turn: Turn, cfg, pair_name, shown, stopped):
        last = 0.0
        with self.host.running(pair_name) as pair:
            trace = Trace(pair.decode)
            prompt = conversation(turn.earlier, turn.message, turn.raw, turn.system)
            ids = pair.prompt_ids(prompt, raw=turn.raw)
            with closing(pair.generate(ids, cfg, stop=stopped)) as events:
                for ev in events:  # a stop request ends it with one last event and the stats
                    trace.add(ev)
                    shown[-1]["content"] = trace.text
                    if ev.done or time.perf_counter() - last < STREAM_EVERY_S:
                        continue
                    last = time.perf_counter()
                    yield _out(chatbot=shown, sources=trace.segments(),
                               speed=live_panel(trace, cfg.method),
                               status=f"generating with `{cfg.method}` …")
        if not trace.text:  # a note for the eye; model_history keeps it from the model
            shown[-1]["content"] = no_text_note(trace.stats.get("stop_reason"))
        yield self._final(trace, cfg, shown, self.meter(shown, turn.raw, turn.system))

    def _final(self, trace, cfg, shown, meter):
        stats, method = trace.stats, cfg.method
        if stats.get("stop_reason") == "stopped":
            note = f"stopped after {stats.get('new_tokens', 0)} tokens"
        else:
            note = (f"done: {stats.get('new_tokens', 0)} tokens with `{method}` at "
                    f"{float(stats.get('tokens_per_s', 0)):.1f} tokens/s")
        if not cfg.sampling.greedy:
            note += f" · seed {cfg.seed}"
        seed = None if cfg.sampling.greedy else cfg.seed
        return _out(chatbot=shown, sources=trace.segments(), speed=final_panel(stats, seed),
                    stats_json=jsonable(stats), timeline=charts.timeline(stats),
                    hist=charts.accept_histogram(stats),
                    rate=charts.rate_over_time(trace.points, method), status=note, meter=meter)

    def meter(self, history, raw=False, system=""):
        """The context meter: what the chat so far takes of the window for the next answer."""
        raw = bool(raw)
        try:
            use = self.host.context_use(context_prompt(clean_history(history), raw, system), raw)
        except Exception as e:  # noqa: BLE001 -- a meter never breaks the page
            return meter_line(None, None, str(e) or type(e).__name__)
        return meter_line(*(use or (None, None)))

    def meter_when_loaded(self, history, raw, system):
        return gr.skip() if self.host.loading else self.meter(history, raw, system)

    def export(self, history, pair_name, raw, system, *settings):
        """The chat (system prompt first) as chat-YYYYmmdd-HHMMSS.json and .md files."""
        messages = with_system(None if raw else system, clean_history(history))
        if not messages:
            return None, None
        meta = {"pair": pair_name, "raw": bool(raw), "settings": asdict(Settings(*settings))}
        return tuple(str(p) for p in write_exports(self.export_dir, messages, meta))

    def stop(self, request: gr.Request):
        self.stops.request(_session(request))
        return "stopping …"

    # -- compare --------------------------------------------------------------------------
    def compare(self, request: gr.Request, message, history, pair_name, raw, system, *settings):
        t0, session = time.monotonic(), _session(request)
        message, history = (message or "").strip(), clean_history(history)
        if not has_text(message):  # the last question of the chat, with the turns before it
            message, history = last_question(history)
        results = {m: {} for m in COMPARE}
        if not message:
            yield "Type a prompt (or chat first) to compare.", "", "", ""
            return
        try:
            cfg = Settings(*settings).gen_config()
            for line in self._wait(pair_name):
                yield f"waiting for the model: {line}", "", "", ""
            prompt = conversation(history, message, bool(raw), system)
            yield from self._compare(prompt, raw, cfg, pair_name, results,
                                     lambda: self.stops.since(session, t0))
        except Exception as e:  # noqa: BLE001 -- whatever failed, the page keeps working
            yield _error_line(e), "", "", ""

    def _compare(self, prompt, raw, base, pair_name, results, stopped):
        greedy, last = base.sampling.greedy, 0.0
        with self.host.running(pair_name) as pair:
            ids = pair.prompt_ids(prompt, raw=raw)
            for method in COMPARE:
                trace = Trace(pair.decode)
                with closing(pair.generate(ids, for_method(base, method))) as events:
                    for ev in events:
                        trace.add(ev)
                        if stopped():
                            results[method] = {"text": trace.text}
                            yield self._compare_view(results, greedy, "**stopped**")
                            return
                        if time.perf_counter() - last >= STREAM_EVERY_S and not ev.done:
                            last = time.perf_counter()
                            results[method] = {"text": trace.text}
                            yield self._compare_view(results, greedy, f"running `{method}` …")
                results[method] = {"text": trace.text, "ids": trace.ids, "stats": trace.stats}
        yield self._compare_view(results, greedy, "")

    @staticmethod
    def _compare_view(results, greedy, note):
        table = compare_table(results, greedy)
        return ((note + "\n\n" if note else "") + table,
                *(results[m].get("text", "") for m in COMPARE))

    # -- measure again --------------------------------------------------------------------
    def remeasure(self, pair_name):
        """Time this machine again for the loaded pair (path, draft threads, budget profiles):
        for a start made while the machine was busy."""
        yield "measuring this machine again (a minute or two on a CPU) …", gr.skip()
        try:
            with self.host.running(pair_name) as pair:
                pair.remeasure()
            yield f"**measured again** · {self.status()}", self.placement()
        except Exception as e:  # noqa: BLE001 -- whatever failed, the page keeps working
            yield _error_line(e), self.placement()

    # -- pair switch ----------------------------------------------------------------------
    def switch(self, name):
        raw = gr.skip()
        try:
            raw = not get_pair(name).chat
            for line in self.host.prepare(name):
                yield f"loading `{name}`: {line}", gr.skip(), gr.skip(), raw
            yield self.status(), self.placement(), gr.skip(), raw
        except PairError as e:
            yield f"**error:** {e}", self.placement(), gr.update(value=self.host.name), gr.skip()

    def clear(self, request: gr.Request, raw=False, system=""):
        self.stops.request(_session(request))
        return _out(chatbot=[], sources=None, speed=SPEED_HINT, stats_json=None, timeline=None,
                    hist=None, rate=None, status="cleared", meter=self.meter([], raw, system))[1:]
