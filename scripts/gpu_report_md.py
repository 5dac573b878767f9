"""report.md from the GPU report's report.json: one section per part, the goals the issue
sets checked where their figures are present, and `duo`'s speed projected from the measured
verify and draft costs."""
from __future__ import annotations

ALPHAS = (0.7, 0.8, 0.9)


def render(r: dict) -> str:
    out = ["# GPU report", ""]
    for title, fn, key in (("Environment", _env, "env"), ("CUDA graphs", _graphs, "graphs"),
                           ("Forward time (ms) and memory floor", _forward, "forward"),
                           ("Peak memory", _memory, "memory"), ("Methods", _methods, "methods"),
                           ("llama.cpp", _llamacpp, "llamacpp"),
                           ("Lookup rounds", _lookup, "lookup")):
        if key in r:
            out += [f"## {title}", ""] + (_error(r[key]) or fn(r[key], r)) + [""]
    out += ["## Goals", ""] + _goals(r) + [""]
    return "\n".join(out)


def _error(part: dict) -> list[str]:
    return [f"Failed: `{part['error']}`", "", "```", part.get("trace", ""), "```"] \
        if "error" in part else []


def _env(e: dict, r: dict) -> list[str]:
    return ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in e.items()]


def _graphs(g: dict, r: dict) -> list[str]:
    if g.get("engaged") is None:
        return [g.get("note", "not measured")]
    return [f"Compiled static target ({g['model']}) with `cudagraph_or_error`: "
            f"{'engaged' if g['engaged'] else 'NOT engaged'}, {g['cudagraph_skips']} "
            f"cudagraph skip(s); chunk@filled ms: {g['ms']}"]


def _forward(f: dict, r: dict) -> list[str]:
    cols = [f"{c}@{n}" for n in f["lengths"] for c in f["chunks"]]
    out = [f"Copy bandwidth: {f['copy_bandwidth_gbs']:.1f} GB/s. Columns: chunk@filled "
           "length. The floor reads every weight (but the input embedding) and the filled "
           "KV once at that bandwidth.", ""]
    for model, quants in f["models"].items():
        out += [f"### {model}", "", "| precision | path | " + " | ".join(cols) + " |",
                "|---|---|" + "---|" * len(cols)]
        checks = []
        for quant, row in quants.items():
            floor = [f"{row['floor_ms'][c.split('@')[1]]:.3f}" for c in cols]
            out.append(f"| {quant} ({row['dtype']}) | floor | " + " | ".join(floor) + " |")
            if "copy_floor_ms" in row:  # int8 when its cast to bf16 does not fold
                copy = [f"{row['copy_floor_ms'][c.split('@')[1]]:.3f}" for c in cols]
                out.append(f"| {quant} | floor with a bf16 weight copy | " + " | ".join(copy)
                           + " |")
            for path in (k for k in row if k not in ROW_KEYS):
                depths = row[path].get("depths")
                how = f" (from {' and '.join(depths)} layers)" if depths else ""
                out.append(f"| {quant} | {path}{how} | "
                           + " | ".join(_cells(row[path], cols, row)) + " |")
            checks += known_check(model, quant, row)
        out += [""] + checks + ([""] if checks else [])
    return out


ROW_KEYS = ("dtype", "floor_ms", "copy_floor_ms", "known")  # a forward row's other keys: paths


def known_check(model: str, quant: str, row: dict) -> list[str]:
    """A projected row against the full-depth row measured before (gpu_bench.KNOWN)."""
    known, out = row.get("known"), []
    for path in (k for k in row if k not in ROW_KEYS and "depths" in row[k]):
        if not known or known["path"] != path.removesuffix("-tuned") or "ms" not in row[path]:
            continue
        r = [row[path]["ms"][k] / v for k, v in known["ms"].items() if k in row[path]["ms"]]
        if r:
            out.append(f"- {model} {quant} {path}, projected / the full-depth row measured "
                       f"on {known['machine']} ({known['date']}): {min(r):.2f}-{max(r):.2f}x")
    return out


def _cells(p: dict, cols: list[str], row: dict) -> list[str]:
    if "ms" not in p:
        return [p.get("skipped") or p.get("error", "?")[:60]] + [""] * (len(cols) - 1)
    return [f"{p['ms'][c]:.3f} ({p['ms'][c] / row['floor_ms'][c.split('@')[1]]:.1f}x)"
            for c in cols]


def _memory(m: dict, r: dict) -> list[str]:
    out = [f"{m['model']}, window {m['ctx']} tokens filled and a 32-token chunk.", "",
           "| precision | estimate GiB | peak GiB |", "|---|---|---|"]
    for q, row in m["precisions"].items():
        peak = row.get("peak_gib")
        peak = row.get("error", "n/a (CPU)")[:60] if peak is None else f"{peak:.2f}"
        out.append(f"| {q} ({row['dtype']}) | {row['estimate_gib']:.3g} | {peak} |")
    return out


def _methods(m: dict, r: dict) -> list[str]:
    out = []
    for run, res in (kv for kv in m.items() if isinstance(kv[1], dict)):
        if "error" in res:
            out += [f"{run}: failed", "", "```", res["error"][-800:], "```", ""]
            continue
        out += [f"### {run} ({res['machine']['target_path']}, "
                f"{res['machine']['target_device']})", ""]
        out += _method_table(res["methods"]) + [""]
    return out


def _lookup(lk: dict, r: dict) -> list[str]:
    """duo over duo-nolookup on copy-heavy prompts, the rounds lookup drafts won, the table."""
    out = []
    for run, res in (kv for kv in lk.items() if isinstance(kv[1], dict) and "ratios" in kv[1]):
        duo = res["methods"]["duo"]["overall"]
        got = duo.get("lookup") or {"won": 0, "share": 0.0, "acceptance": 0.0}
        out += [f"{run}: duo {res['ratios']['duo / duo-nolookup']['overall']:.2f}x duo-nolookup "
                f"(median per prompt); lookup drafts won {got['won']} of {duo['rounds']} rounds, "
                f"{100 * got['share']:.0f}% of the tokens, acceptance {got['acceptance']:.2f}", ""]
    return out + _methods(lk, r)


def _method_table(methods: dict) -> list[str]:
    cats = sorted(next(iter(methods.values()))["categories"])
    out = ["| method | overall | " + " | ".join(cats) + " |", "|---|---|" + "---|" * len(cats)]
    for name, s in methods.items():
        out.append(f"| {name} | {s['overall']['tokens_per_s']:.1f} | " + " | ".join(
            f"{s['categories'][c]['tokens_per_s']:.1f}" for c in cats) + " |")
    return out


def _llamacpp(lc: dict, r: dict) -> list[str]:
    out = []
    peer = lc.get("peer", {})
    if "methods" in peer:
        tps = peer["methods"]["llamacpp"]["overall"]["tokens_per_s"]
        out += [f"`llamacpp` peer on smol-self: {tps:.1f} tokens/s.", ""]
    elif "error" in peer:
        out += ["`llamacpp` peer failed:", "```", peer["error"][-600:], "```", ""]
    rnd, draft = lc.get("random", {}), lc.get("draft_cpu_ms", {})
    if "projected_ms" in rnd:
        out += _random_table(rnd, r.get("forward", {}))
    elif "error" in rnd:
        out += [f"Random-weight GGUF failed: `{rnd['error']}`"]
    if "ms" in draft:
        out += ["", f"Draft (smol-self's GGUF) on the CPU, {draft['threads']} threads: "
                f"{draft['ms']:.2f} ms/token.", ""] + _projection(r, draft["ms"] / 1e3)
    return out


def _random_table(rnd: dict, fwd: dict) -> list[str]:
    where = "all layers on the GPU" if rnd["on_gpu"] else "the CPU"
    out = [f"llama.cpp on random weights of the 8B shape ({where}): measured at "
           f"{rnd['layers_measured']} layers, projected linearly to {rnd['layers']} "
           "(writing the full-depth F16 file would take 16 GB). Single-token decode:", "",
           "| engine | precision | ms/token | tokens/s |", "|---|---|---|---|"]
    for k, ms in rnd["projected_ms"].items():
        out.append(f"| llama.cpp | {k} | {ms:.2f} | {1e3 / ms:.1f} |")
    model = _big(fwd)
    for q, row in fwd.get("models", {}).get(model, {}).items():
        ms = row.get("compiled", {}).get("ms", {}).get(f"1@{fwd['lengths'][0]}")
        if ms:
            out.append(f"| ours, compiled ({model}) | {q} | {ms:.2f} | {1e3 / ms:.1f} |")
    return out


def _big(fwd: dict) -> str:
    return "llama8b" if "llama8b" in fwd.get("models", {}) else "tiny"


def _projection(r: dict, draft_s: float) -> list[str]:
    """`duo`'s expected tokens/s under the draft budget's cost model at a few acceptances."""
    from core.budget import DraftBudget, Profile

    fwd = r.get("forward", {})
    model, out = _big(fwd), []
    for q, row in fwd.get("models", {}).get(model, {}).items():
        verify = _verify_curve(row.get("compiled") or row.get("static") or {}, fwd)
        if not verify:
            continue
        for a in ALPHAS:
            b = DraftBudget(Profile(draft_s, verify, {1: draft_s}, "cuda"), overlap=True, alpha=a)
            rate = b.expected_rate(b.gamma) if b.gamma else b.plain_rate()
            out.append(f"| {model} {q} | {a} | {b.gamma} | {rate:.1f} | {b.plain_rate():.1f} |")
    head = ["Projected `duo` (verify costs above at the middle filled length, the draft's "
            "measured cost):", "", "| target | acceptance | gamma | duo tok/s | target alone |",
            "|---|---|---|---|---|"]
    return head + out if out else []


def _verify_curve(p: dict, fwd: dict) -> list[float]:
    """verify_s[n - 1] for n = 1..max chunk, linear between the measured chunks."""
    if "ms" not in p:
        return []
    n = fwd["lengths"][len(fwd["lengths"]) // 2]
    pts = sorted((c, p["ms"][f"{c}@{n}"] / 1e3) for c in fwd["chunks"])
    curve = []
    for k in range(1, pts[-1][0] + 1):
        (c0, t0), (c1, t1) = next(((a, b) for a, b in zip(pts, pts[1:]) if k <= b[0]),
                                  (pts[0], pts[-1]) if len(pts) > 1 else (pts[0], pts[0]))
        curve.append(t0 if c1 == c0 else t0 + (t1 - t0) * (k - c0) / (c1 - c0))
    return curve


def _goals(r: dict) -> list[str]:
    out = []
    m = r.get("methods", {})
    comp, eager = m.get("smol-self compiled", {}), m.get("smol-self eager", {})
    path = comp.get("machine", {}).get("target_path")
    if path and path != "static-compiled":
        out.append(f"- the `methods` run's target path was {path}: no compiled figures")
    elif "methods" in comp and "methods" in eager:
        c = comp["methods"]["vanilla"]["overall"]["tokens_per_s"]
        e = eager["methods"]["vanilla"]["overall"]["tokens_per_s"]
        out.append(f"- compiled `vanilla` / eager `vanilla` on smol-self: {c / e:.1f}x "
                   f"(goal 5x): {'met' if c >= 5 * e else 'NOT met'}")
        out += _duo_goal(comp["methods"])
    out += _floor_goal(r.get("forward", {}))
    return out or ["(no figures for the goals yet)"]


def _duo_goal(methods: dict) -> list[str]:
    if "duo" not in methods:
        return []
    cats = methods["vanilla"]["categories"]
    slow = [c for c in cats if methods["duo"]["categories"][c]["tokens_per_s"]
            < cats[c]["tokens_per_s"]]
    return [f"- `duo` no slower than compiled `vanilla` on any category: "
            f"{'met' if not slow else 'NOT met on ' + ', '.join(slow)}"]


def _floor_goal(fwd: dict) -> list[str]:
    out, model = [], _big(fwd)
    for q, limit in (("none", 1.5), ("int4", 2.0), ("int8", 1.5)):
        row = fwd.get("models", {}).get(model, {}).get(q, {})
        ms = row.get("compiled", {}).get("ms", {})
        ratios = [v / row["floor_ms"][k.split("@")[1]] for k, v in ms.items()
                  if int(k.split("@")[0]) <= 8]
        if ratios:
            worst = max(ratios)
            out.append(f"- {model} {q} compiled forward of 1-8 tokens: up to {worst:.2f}x its "
                       f"memory floor (goal {limit}x): {'met' if worst <= limit else 'NOT met'}")
    return out + _int8_verdict(fwd.get("models", {}).get(model, {}))


def _int8_verdict(quants: dict) -> list[str]:
    """The picker's question at 8 rows: is int8 slower than int4 or bf16 on this card?"""
    at8 = {q: min((v for k, v in row.get("compiled", {}).get("ms", {}).items()
                   if k.startswith("8@")), default=None) for q, row in quants.items()}
    if at8.get("int8") is None:
        return []
    quicker = [q for q, v in at8.items() if q != "int8" and v is not None and v < at8["int8"]]
    return [f"- int8 compiled forward of 8 rows: {at8['int8']:.3f} ms; "
            + (f"slower than {', '.join(quicker)} (the picker should take those where they "
               "fit: models/fit/memory.py by_speed)" if quicker else "the fastest precision")]
