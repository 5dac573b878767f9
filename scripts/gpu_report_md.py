"""report.md from the GPU report's report.json: one section per part, and the compiled
forward against its memory floor."""
from __future__ import annotations


def render(r: dict) -> str:
    out = ["# GPU report", ""]
    for title, fn, key in (("Environment", _env, "env"),
                           ("Forward time (ms) and memory floor", _forward, "forward")):
        if key in r:
            out += [f"## {title}", ""] + (_error(r[key]) or fn(r[key], r)) + [""]
    floor = _floor(r.get("forward", {}))
    if floor:
        out += ["## Against the memory floor", ""] + floor + [""]
    return "\n".join(out)


def _error(part: dict) -> list[str]:
    return [f"Failed: `{part['error']}`", "", "```", part.get("trace", ""), "```"] \
        if "error" in part else []


def _env(e: dict, r: dict) -> list[str]:
    return ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in e.items()]


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


def _floor(fwd: dict) -> list[str]:
    out, model = [], "llama8b" if "llama8b" in fwd.get("models", {}) else "tiny"
    for q in ("none", "int4", "int8"):
        row = fwd.get("models", {}).get(model, {}).get(q, {})
        ms = row.get("compiled", {}).get("ms", {})
        ratios = [v / row["floor_ms"][k.split("@")[1]] for k, v in ms.items()
                  if int(k.split("@")[0]) <= 8]
        if ratios:
            worst = max(ratios)
            out.append(f"- {model} {q} compiled forward of 1-8 tokens: up to {worst:.2f}x its "
                       "memory floor")
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
               "fit: models/fit/memory.py)" if quicker else "the fastest precision")]
