"""The chat handlers of app.ui.App without a browser: the system prompt goes first, Regenerate
re-answers (greedy: same text; sampling: a fresh seed), any error leaves the chat as it was and
the typed text in the box, the exports round-trip, and the context meter counts the window.
A fake pair (word tokens, the real engine on a fake target) keeps these fast; one test uses
smol-self."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.chat import conversation, model_history, no_text_note, with_system
from app.host import ModelHost
from app.page import OUTPUTS
from app.ui import App
from core.engine import generate as engine_generate
from models.pairs.catalog import PairError
from tests.fakes import FakeTarget, markov

WORDS = [" a", " b", " c", " d", " e", " f", " g", " h"]
P = markov(len(WORDS), seed=3, sharp=0.3)
REQUEST = SimpleNamespace(session_hash="chat-tab")


class ChatPair:
    """What the UI uses of a Pair: one token per word of '<role> content ...', the real engine
    (vanilla) on a fake target; `fail` raises after `fail_after` events."""

    def __init__(self, n_ctx=200, fail: Exception | None = None, fail_after=1):
        self.target = SimpleNamespace(n_ctx=n_ctx)
        self.fail, self.fail_after = fail, fail_after
        self.sent, self.configs, self._prompts = [], [], {}

    def prompt_ids(self, prompt, raw=False):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        words = [w for m in messages for w in ([] if raw else [f"<{m['role']}>"])
                 + m["content"].split()] + ([] if raw else ["<assistant>"])
        if not any(m["content"].strip() for m in messages):
            raise ValueError("the prompt is empty")
        if len(words) > self.target.n_ctx - 1:
            raise ValueError(f"the prompt is {len(words)} tokens; the context window allows "
                             f"{self.target.n_ctx - 1}")
        ids = [len(w) % len(WORDS) for w in words]
        self._prompts[tuple(ids)] = prompt
        return ids

    def decode(self, ids):
        return "".join(WORDS[i] for i in ids)

    def generate(self, ids, cfg, stop=None):
        self.sent.append(self._prompts[tuple(ids)])
        self.configs.append(cfg)
        events = engine_generate(FakeTarget(P), None, ids, replace(cfg, method="vanilla"),
                                 self.decode, None, stop)
        for i, ev in enumerate(events):
            if self.fail is not None and i >= self.fail_after:
                raise self.fail
            yield ev

    def describe(self):
        return {"draft": "fake", "target": "fake"}

    def close(self):
        pass


def app_on(pair) -> App:
    host = ModelHost(lambda name, say: pair)
    list(host.prepare("smol-self", poll_s=0.01))
    return App(host, "smol-self")


def settings(method="duo", tokens=6, temperature=0.0, seed=0):
    return (method, tokens, temperature, 1.0, 0, seed, "auto", 5, True, 4, 1.0)


def latest(updates) -> dict:
    """The value each output ends with after a handler's updates (skipped ones left out)."""
    out = {}
    for update in updates:
        for name, value in zip(OUTPUTS, update):
            if value != {"__type__": "update"}:
                out[name] = value
    return out


def chat(app, message, history=(), system="", raw=False, **kw):
    return latest(app.chat(REQUEST, message, list(history), "smol-self", raw, system,
                           *settings(**kw)))


def regenerate(app, history, system="", **kw):
    return latest(app.regenerate(REQUEST, list(history), "smol-self", False, system,
                                 *settings(**kw)))


def test_system_prompt_is_sent_first_and_not_stored():
    pair = ChatPair()
    app = app_on(pair)
    out = chat(app, "Hi there", system="Be brief.")
    assert pair.sent[-1] == [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "Hi there"}]
    assert [m["role"] for m in out["chatbot"]] == ["user", "assistant"]
    assert out["status"].startswith("done:")
    chat(app, "More", history=out["chatbot"], system="Be brief.")
    assert [m["role"] for m in pair.sent[-1]] == ["system", "user", "assistant", "user"]
    chat(app, "raw text", system="Be brief.", raw=True)
    assert pair.sent[-1] == "raw text"  # raw mode: the typed text alone
    chat(app, "no system", system="   ")
    assert pair.sent[-1] == [{"role": "user", "content": "no system"}]


def test_compare_sends_the_system_prompt():
    pair = ChatPair()
    app = app_on(pair)
    *_, (table, *texts) = app.compare(REQUEST, "Hi", [], "smol-self", False, "Be brief.",
                                      *settings())
    assert pair.sent[0][0] == {"role": "system", "content": "Be brief."}
    assert "all texts are identical" in table and texts[0] == texts[1] == texts[2]


def test_regenerate_greedy_same_text_sampling_fresh_seed():
    pair = ChatPair()
    app = app_on(pair)
    first = chat(app, "Tell me", tokens=8)
    again = regenerate(app, first["chatbot"], tokens=8)
    assert again["chatbot"] == first["chatbot"]  # one answer, replaced by the same one
    assert pair.configs[-1].seed == pair.configs[-2].seed == 0
    assert pair.sent[-1] == pair.sent[-2] == [{"role": "user", "content": "Tell me"}]
    seeds = []
    for _ in range(2):
        out = regenerate(app, first["chatbot"], tokens=8, temperature=1.0, seed=7)
        seeds.append(pair.configs[-1].seed)
        assert out["status"].endswith(f"seed {seeds[-1]}")
        assert len(out["chatbot"]) == 2
    assert 7 not in seeds and seeds[0] != seeds[1]
    assert regenerate(app, [])["status"].startswith("Nothing to regenerate")


@pytest.mark.parametrize("error", [RuntimeError("boom"), ValueError("bad"), PairError("gone"),
                                   KeyError("surprise")])
@pytest.mark.parametrize("fail_after", [0, 2])  # before any text, and mid-answer
def test_error_leaves_history_clean_and_message_in_box(error, fail_after):
    pair = ChatPair()
    app = app_on(pair)
    before = chat(app, "First question")["chatbot"]
    pair.fail, pair.fail_after = error, fail_after
    out = chat(app, "Second question", history=before)
    assert out["chatbot"] == before
    assert out["prompt"] == "Second question"
    assert out["status"].startswith("**error:**")
    assert out["meter"].startswith("context: ")
    regen = regenerate(app, before)  # Regenerate fails the same way: the old answer stays
    assert regen["chatbot"] == before and "prompt" not in regen
    pair.fail = None  # the app keeps working
    assert chat(app, "Third question", history=before)["status"].startswith("done:")


def test_prompt_over_the_window_is_an_error():
    app = app_on(ChatPair(n_ctx=20))
    out = chat(app, "word " * 30)
    assert out["chatbot"] == []
    assert out["prompt"] == ("word " * 30).strip()
    assert "context window allows 19" in out["status"]


def test_no_text_note_is_never_sent_back():
    note = no_text_note("eos")
    history = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": note},
               {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]
    assert model_history(history) == history[2:]
    assert conversation(history, "q3", False, "sys") == with_system("sys", history[2:] + [
        {"role": "user", "content": "q3"}])
    pair = ChatPair()
    app = app_on(pair)
    regenerate(app, history[:2])  # the question of a note can be asked again
    assert pair.sent[-1] == [{"role": "user", "content": "q1"}]


def test_export_json_round_trips_and_markdown_has_each_turn():
    app = app_on(ChatPair())
    history = chat(app, "Name a fruit", system="Be brief.")["chatbot"]
    history = chat(app, "And a color", history=history, system="Be brief.")["chatbot"]
    paths = app.export(history, "smol-self", False, "Be brief.", *settings())
    assert [re.fullmatch(r"chat-\d{8}-\d{6}\.(json|md)", Path(p).name) is not None
            for p in paths] == [True, True]
    data = json.loads(Path(paths[0]).read_text())
    assert data["messages"] == with_system("Be brief.", history)
    assert data["pair"] == "smol-self" and data["settings"]["method"] == "duo"
    md = Path(paths[1]).read_text()
    for m in data["messages"]:
        assert f"## {m['role']}\n\n{m['content']}" in md
    assert app.export([], "smol-self", False, "", *settings()) == (None, None)


def test_context_meter_counts_the_conversation():
    pair = ChatPair(n_ctx=200)
    app = app_on(pair)
    out = chat(app, "one two three", system="Be brief.")
    used = len(pair.prompt_ids(with_system("Be brief.", out["chatbot"])))
    assert out["meter"] == f"context: {used} of 200 tokens ({100 * used / 200:.0f}%)"
    cleared = app.clear(REQUEST, False, "Be brief.")
    assert cleared[-1] == "context: 4 of 200 tokens (2%)"  # <system> Be brief. <assistant>
    assert app.clear(REQUEST, False, "")[-1] == "context: 0 of 200 tokens (0%)"
    assert app.meter([{"role": "user", "content": "w " * 300}]).startswith("context: the prompt")
    assert App(ModelHost(lambda name, say: pair), "smol-self").meter([]) == "context: ?"


def test_real_pair_system_prompt_meter_and_greedy_regenerate(smol_pair):
    app = app_on(smol_pair)
    plain = len(smol_pair.prompt_ids([{"role": "user", "content": "Hi"}]))
    out = chat(app, "Name a color.", system="Answer in one word.", method="vanilla", tokens=6)
    history = out["chatbot"]
    used = len(smol_pair.prompt_ids(with_system("Answer in one word.", history)))
    assert used > plain and out["meter"].startswith(f"context: {used} of ")
    again = regenerate(app, history, system="Answer in one word.", method="vanilla", tokens=6)
    assert again["chatbot"] == history


LOOKUP_STATS = {"method": "duo", "tokens_per_s": 50.0, "ttft_s": 0.1, "new_tokens": 40,
                "wall_s": 0.8, "stop_reason": "eos", "acceptance_rate": 0.9,
                "mean_accepted_per_round": 5.0, "overlap_efficiency": 0.8, "draft_busy_s": 0.5,
                "draft_idle_s": 0.3, "target_busy_s": 0.7, "target_idle_s": 0.1,
                "lookup": {"rounds": 6, "won": 4, "proposed": 30, "accepted": 27,
                           "acceptance": 0.9, "share": 0.675},
                "rounds_log": [
                    {"draft_span": [0.0, 0.01], "verify_span": [0.01, 0.02], "drafted": 4,
                     "accepted": 4, "source": "model"},
                    {"draft_span": [0.02, 0.02], "verify_span": [0.02, 0.03], "drafted": 9,
                     "accepted": 9, "source": "lookup"},
                    {"draft_span": [0.03, 0.04], "verify_span": [0.04, 0.05], "drafted": 12,
                     "accepted": 7, "source": "fused"}]}


def test_lookup_tokens_have_a_colour_of_their_own():
    from app.view import SOURCE_COLORS, SOURCE_LABELS, Trace
    from core.output import Event

    trace = Trace(lambda ids: "".join(WORDS[i] for i in ids))
    trace.add(Event(tokens=[0, 1, 2, 3, 4], sources=["target", "lookup", "lookup", "draft",
                                                     "target"], text=" a b c d e"))
    assert trace.segments() == [(" a", "target"), (" b c", SOURCE_LABELS["lookup"]),
                                (" d", "accepted draft"), (" e", "target")]
    colours = {label: SOURCE_COLORS[label] for _, label in trace.segments()}
    assert len(set(colours.values())) == 3  # lookup, model-drafted and target apart


def test_the_stats_show_the_lookups_share_acceptance_and_rounds_won():
    from app.view import final_panel, lookup_line

    panel = final_panel(LOOKUP_STATS)
    assert "| lookup drafts | 67.5% of the tokens · acceptance 90.0% · won 4 of 6 rounds" in panel
    assert lookup_line({"method": "duo", "lookup": {"rounds": 0}}).startswith("— (no lookup")
    assert lookup_line({"method": "vanilla"}) == "—"
    memory = dict(LOOKUP_STATS["lookup"], memory=3)
    assert "won 4 (3 from earlier requests) of 6 rounds" in lookup_line({"lookup": memory})


def test_the_timeline_marks_lookup_rounds():
    from app import charts

    fig = charts.timeline(LOOKUP_STATS)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["target\nverify", "draft", "lookup"]
    assert "lookup rounds: 2 of 3" in ax.get_title()
    marked = [c for c in ax.collections if tuple(c.get_facecolor()[0][:3]) ==
              pytest.approx(tuple(int(charts.LOOKUP[i:i + 2], 16) / 255 for i in (1, 3, 5)))]
    assert len(marked) == 2 and marked[1].get_hatch() == "xx"  # the fused round
    plain = charts.timeline(dict(LOOKUP_STATS, rounds_log=LOOKUP_STATS["rounds_log"][:1]))
    assert "lookup" not in [t.get_text() for t in plain.axes[0].get_yticklabels()]


def test_the_lookup_setting_goes_to_duo_and_lookup_only():
    from app.view import Settings

    for method, want in (("duo", "on"), ("lookup", "on"), ("vanilla", "auto"), ("sps", "auto")):
        assert Settings(method=method, seed=0, lookup="on").gen_config().lookup == want
    with pytest.raises(ValueError, match="lookup"):
        Settings(seed=0, lookup="sometimes").gen_config()
    pair = ChatPair()
    chat(app_on(pair), "one two", method="duo")
    assert pair.configs[-1].lookup == "auto"  # the page's default
    latest(app_on(pair).chat(REQUEST, "one two", [], "smol-self", False, "",
                             *settings(), True, "off"))
    assert pair.configs[-1].lookup == "off"


def test_the_placement_is_one_short_line_with_the_reasons_behind_a_click():
    from app.view import placement_line
    from models.loader import summary

    target = SimpleNamespace(dtype="float32", quant="none", path="static-compiled",
                             device_name=lambda: "CPU")
    short = summary(1, target)
    assert short == {"draft": "CPU, 1 thread", "target": "CPU, float32, compiled"}
    assert summary(3, replace_ns(target, quant="int8", path="eager"))["target"] == \
        "CPU, int8 weights, float32, eager"
    line = placement_line({"summary": short, "draft": "CPU, 1 thread(s), measured 12.6 ms",
                           "target": "CPU, float32, compiled (auto: 117.6 ms)"}, "smol-self")
    first, rest = line.split("\n", 1)
    assert first == ("**pair** `smol-self` · **draft**: CPU, 1 thread · **target**: CPU, "
                     "float32, compiled")
    assert "<details><summary>" in rest and "measured 12.6 ms" in rest and "117.6 ms" in rest


def test_the_gamma_cell_is_short_and_its_reason_one_click_away():
    from app.view import final_panel

    stats = dict(LOOKUP_STATS, gamma_profile={"gamma": 5, "reason": "draft 6.4 ms, verify 57 ms"},
                 gammas_used={"5": 3})
    panel = final_panel(stats)
    assert "| gamma in use | **5** (auto; rounds γ=5: 3) |" in panel
    table, why = panel.split("<details>", 1)
    assert "6.4 ms" not in table and "draft 6.4 ms, verify 57 ms" in why


def replace_ns(ns: SimpleNamespace, **kw) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(ns), **kw})
