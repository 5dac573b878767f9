"""What the page shows, as plain data: the settings a request carries, the speed panel (live
and final), the answer split by token source, and the comparison table. No gradio here."""
from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass, replace
from typing import Callable

from core.config import LOOKUP_METHODS  # the methods the lookup setting applies to
from core.engine import GenConfig
from core.sampling import SamplingConfig

SOURCE_LABELS = {"draft": "accepted draft", "lookup": "lookup (copied)", "target": "target"}
SOURCE_COLORS = {"accepted draft": "#7fd08a", "lookup (copied)": "#c3a6e0", "target": "#f5b76b"}


@dataclass
class Settings:
    """The controls of one request, as the UI sends them."""
    method: str = "duo"
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = -1  # -1: a fresh random seed per request (shown with the speed stats)
    gamma_mode: str = "auto"  # "auto" or "fixed"
    gamma: int = 5
    multi_seq: bool = True
    max_seqs: int = 4
    theta_scale: float = 1.0
    predraft: bool = True
    lookup: str = "auto"  # duo and lookup: drafts from the suffix index (docs/lookup.md)

    def gen_config(self, method: str | None = None) -> GenConfig:
        for name in ("temperature", "top_p", "theta_scale"):  # the engine's checks let NaN by
            if not math.isfinite(float(getattr(self, name))):
                raise ValueError(f"{name.replace('_', ' ')} must be a finite number, "
                                 f"got {getattr(self, name)}")
        seed = int(self.seed or 0)
        if seed < -1:
            raise ValueError(f"seed must be -1 (random) or >= 0, got {self.seed}")
        sampling = SamplingConfig(float(self.temperature), int(self.top_k), float(self.top_p))
        cfg = GenConfig(method=method or self.method, max_new_tokens=int(self.max_new_tokens),
                        sampling=sampling, seed=secrets.randbelow(2**32) if seed < 0 else seed,
                        gamma=int(self.gamma) if self.gamma_mode == "fixed" else None,
                        multi_seq=bool(self.multi_seq), max_seqs=int(self.max_seqs),
                        theta_scale=float(self.theta_scale), predraft=bool(self.predraft))
        cfg = for_method(replace(cfg, lookup=str(self.lookup)), cfg.method)
        cfg.validate()
        return cfg


def for_method(cfg: GenConfig, method: str) -> GenConfig:
    """`cfg` for `method`: the lookup setting where it applies, "auto" for the methods that
    draft with the model only or not at all (the page's comparison runs them all)."""
    return replace(cfg, method=method, lookup=cfg.lookup if method in LOOKUP_METHODS else "auto")


class Trace:
    """One generation as the page sees it: the tokens and where each came from, the released
    text, and (time, tokens so far) after each event for the live panel and the rate chart."""

    def __init__(self, decode: Callable[[list[int]], str]):
        self.decode = decode
        self.ids: list[int] = []
        self.sources: list[str] = []
        self.ends: list[int] = []  # len(decode(ids[:i + 1])) for each token i
        self.text = ""
        self.t0 = time.perf_counter()
        self.points: list[tuple[float, int]] = [(0.0, 0)]
        self.stats: dict | None = None

    def add(self, ev) -> None:
        for tok, src in zip(ev.tokens, ev.sources):
            self.ids.append(tok)
            self.sources.append(src)
            self.ends.append(len(self.decode(self.ids)))
        self.text += ev.text
        self.points.append((time.perf_counter() - self.t0, len(self.ids)))
        if ev.stats is not None:
            self.stats = ev.stats

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def segments(self) -> list[tuple[str, str]]:
        """The released text cut at token boundaries, adjacent tokens of one source merged."""
        out: list[tuple[str, str]] = []
        start = 0
        for end, src in zip(self.ends, self.sources):
            piece = self.text[start:min(end, len(self.text))]
            start = max(start, min(end, len(self.text)))
            if not piece:
                continue
            label = SOURCE_LABELS.get(src, src)
            if out and out[-1][1] == label:
                out[-1] = (out[-1][0] + piece, label)
            else:
                out.append((piece, label))
        if start < len(self.text):
            out.append((self.text[start:], out[-1][1] if out else "target"))
        return out


def jsonable(obj):
    """Stats as JSON can show them: keys become strings, tuples lists, numpy scalars numbers."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj.item() if hasattr(obj, "item") and callable(obj.item) else obj


def live_panel(trace: Trace, method: str) -> str:
    """Display numbers only (elapsed, tokens so far); the final numbers come from the stats."""
    n, t = len(trace.ids), trace.elapsed
    drafted = sum(s == "draft" for s in trace.sources)
    looked = sum(s == "lookup" for s in trace.sources)
    rate = n / t if t > 0 else 0.0
    return (f"**live · {method}** · {n} tokens in {t:.2f} s · ~{rate:.1f} tokens/s so far · "
            f"{drafted} from accepted drafts · {looked} from lookup")


def _pct(x) -> str:
    return f"{100 * float(x):.1f}%"


def _s(x) -> str:
    return f"{float(x):.3f} s"


def gamma_line(stats: dict) -> str:
    prof = stats.get("gamma_profile") or {}
    if stats.get("method") == "vanilla" or not prof:
        return "— (no drafting)"
    used = ", ".join(f"γ={g}: {n}" for g, n in (stats.get("gammas_used") or {}).items())
    mode = "fixed" if prof.get("fixed") else "auto"
    return f"**{prof.get('gamma')}** ({mode}; rounds {used or '—'})"


def seqs_line(stats: dict) -> str:
    hist = stats.get("seq_hist") or {}
    if not hist:
        seqs = [r.get("seqs", 1) for r in stats.get("rounds_log") or []]
        if not seqs:
            return "—"
        hist = {str(k): seqs.count(k) for k in sorted(set(seqs))}
    return ", ".join(f"{k} seq: {n} round(s)" for k, n in hist.items())


def final_panel(stats: dict, seed: int | None = None) -> str:
    threads = stats.get("threads") or {}
    drafting = stats.get("method") != "vanilla"
    rows = [
        ("tokens/s", f"**{float(stats['tokens_per_s']):.1f}**"),
        ("time to first token", _s(stats["ttft_s"])),
        ("new tokens / wall", f"{stats['new_tokens']} in {_s(stats['wall_s'])} "
                              f"(stop: {stats.get('stop_reason', '')})"),
        ("acceptance rate", _pct(stats["acceptance_rate"]) if drafting else "—"),
        ("mean accepted tokens / round", f"{float(stats['mean_accepted_per_round']):.2f}"),
        ("gamma in use", gamma_line(stats)),
        ("sequences per round", seqs_line(stats) if drafting else "—"),
        ("overlap efficiency", _pct(stats["overlap_efficiency"]) if drafting else "—"),
        ("lookup drafts", lookup_line(stats)),
        ("draft busy / idle", f"{_s(stats['draft_busy_s'])} / {_s(stats['draft_idle_s'])}"),
        ("target busy / idle", f"{_s(stats['target_busy_s'])} / {_s(stats['target_idle_s'])}"),
        ("threads", f"draft {threads.get('draft', '?')}, target {threads.get('target', '?')}"),
    ]
    if stats.get("schedule"):  # duo: beside the target (a GPU), or sps's loop (shared cores)
        rows.append(("schedule", stats["schedule"]))
    if seed is not None:
        rows.append(("seed", str(seed)))
    body = "\n".join(f"| {k} | {v} |" for k, v in rows)
    why = (stats.get("gamma_profile") or {}).get("reason", "") if drafting else ""
    return (f"**final · {stats.get('method', '')}**\n\n| metric | value |\n|---|---|\n{body}"
            + (details("why this gamma", why) if why else ""))


def lookup_line(stats: dict) -> str:
    """The lookup's share of the new tokens, its acceptance and the rounds it won (from
    earlier requests)."""
    lk = stats.get("lookup") or {}
    if not lk.get("rounds"):
        return "— (no lookup proposals)" if stats.get("method") in LOOKUP_METHODS else "—"
    how = f" ({lk['memory']} from earlier requests)" if lk.get("memory") else ""
    return (f"{_pct(lk.get('share', 0))} of the tokens · acceptance "
            f"{_pct(lk.get('acceptance', 0))} · won {lk.get('won', 0)}{how} of {lk['rounds']} "
            "rounds it proposed in")


def sizes_line(name: str) -> str:
    """GPU memory each precision of the pair's target needs, and what this machine would use."""
    from models.pairs.catalog import PairError, get_pair
    from models.fit.memory import free_bytes, pair_sizes

    try:
        sizes = pair_sizes(get_pair(name), free_bytes("cuda")[0])
    except PairError as e:
        return f"**target memory**: unknown ({e})"
    vram, use = sizes["vram"], sizes["use"]
    if vram is None:
        return f"**target memory**: unknown (no config); this machine: {use}"
    need = " · ".join(f"{k} {v} GiB" for k, v in vram.items())
    return (f"**target memory at {sizes['window']} tokens**: {need} · **this machine uses**: "
            f"{use}\n\n{PRECISION_COST}")


PRECISION_COST = ("*int8 and int4 take less memory and often run faster, but change the model's "
                  "answers; `--target-quant auto` uses them only when the model's own precision "
                  "does not fit; choosing one for speed is up to you (`--target-quant int8`).*")


def placement_line(placement: dict, name: str) -> str:
    """One short line (where draft and target run, at what precision), then the reasons and
    measured figures behind each choice one click away."""
    short = placement.get("summary") or {}
    line = (f"**pair** `{name}` · **draft**: {short.get('draft', '?')} · "
            f"**target**: {short.get('target', '?')}")
    why = [f"- **{k}**: {placement[k]}" for k in ("draft", "target") if placement.get(k)]
    return line + (details("why these choices", "\n".join(why)) if why else "")


def details(summary: str, body: str) -> str:
    """Markdown `body` behind a click (an HTML disclosure the page's Markdown renders)."""
    return f"\n\n<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def compare_table(results: dict[str, dict], greedy: bool) -> str:
    """results: method -> {"text", "ids", "stats"}; speed-ups against vanilla when it ran."""
    base = results.get("vanilla", {}).get("stats")
    rows = ["| method | tokens/s | speed-up vs vanilla | TTFT | acceptance | mean accepted/round "
            "| new tokens | same text as vanilla |", "|---|---|---|---|---|---|---|---|"]
    for method, r in results.items():
        s = r.get("stats")
        if not s:
            rows.append(f"| {method} | … | | | | | | |")
            continue
        up = (f"{float(s['tokens_per_s']) / float(base['tokens_per_s']):.2f}×"
              if base and float(base["tokens_per_s"]) > 0 else "—")
        same = "—" if "vanilla" not in results or method == "vanilla" else \
            ("yes" if r["ids"] == results["vanilla"]["ids"] else "no")
        acc = _pct(s["acceptance_rate"]) if method != "vanilla" else "—"
        rows.append(f"| {method} | {float(s['tokens_per_s']):.1f} | {up} | {_s(s['ttft_s'])} | "
                    f"{acc} | {float(s['mean_accepted_per_round']):.2f} | {s['new_tokens']} "
                    f"| {same} |")
    return "\n".join(rows) + "\n\n" + identical_note(results, greedy)


def identical_note(results: dict[str, dict], greedy: bool) -> str:
    done = [r for r in results.values() if r.get("stats")]
    if len(done) < len(results) or len(done) < 2:
        return ""
    same = all(r["ids"] == done[0]["ids"] for r in done)
    dtype = done[0]["stats"].get("target_dtype", "float32")
    device = str(done[0]["stats"].get("target_device", "cpu"))
    exact = dtype == "float32" and not device.startswith("cuda")
    kind = "Greedy" if greedy else "Sampling (one seed, the coupled sampler)"
    if not same and not exact:
        where = f"a {dtype} target" + (" on cuda" if device.startswith("cuda") else "")
        return (f"**{kind}: the texts part** — expected now and then with {where}: "
                "one forward over many tokens rounds differently from one token at a time, so "
                "where the target's two best tokens tie within rounding either may come out. "
                "Only a float32 target on the CPU (`--device cpu --target-dtype float32`) gives "
                "token-identical output; float32 on cuda makes such ties rarer, not impossible "
                "(the GPU's kernels depend on the chunk's shape).")
    return (f"**{kind}: all texts are identical** — speculative decoding is lossless." if same
            else f"**{kind}: the texts differ** — this should not happen; please report it.")
