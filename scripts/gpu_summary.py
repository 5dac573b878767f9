"""summary.md of one GPU check (scripts/gpu_checks.sh): each part's exit and end time, the
methods' and the emulation's tables with how many texts equal `vanilla`'s, the forward
report, and each GPU test's outcome.

    python3 scripts/gpu_summary.py WORK_DIR > summary.md"""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measure.bench_summary import markdown  # noqa: E402

RUNS = (("methods", "methods"), ("emulate/profile", "emulation, profile clock"),
        ("emulate/shadow", "emulation, shadow clock"))


def parts(work: Path) -> list[str]:
    rows = [line.split("\t") for line in (work / "parts.tsv").read_text().splitlines()] \
        if (work / "parts.tsv").exists() else []
    out = ["| part | exit | ended at (s) |", "|---|---|---|"]
    for label, rc, at in rows:
        out.append(f"| {label} | {rc}{' (cut at its cap)' if rc == '124' else ''} | {at} |")
    return out


def bench(folder: Path, title: str) -> list[str]:
    path = folder / "results.json"
    if not path.exists():
        return [f"## {title}", "", "no results.json", ""]
    r = json.loads(path.read_text())
    m = r["machine"]
    emu = r.get("emulation") or {}
    clock = f" ({emu['clock']} clock, scale {emu['scale']:.2f})" if emu else ""
    head = [f"## {title}", "", f"{m['target_path']} target on {m['target_device']}{clock}, "
            f"{r['prompts_done']} of {r['settings']['prompts']} prompts"
            f"{'' if r['complete'] else ' (cut before the end)'}, {m['date']}.", ""]
    same = [f"{name}: {s['overall']['identical_to_vanilla']} of {s['overall']['prompts']} "
            "texts equal to vanilla's" for name, s in r["methods"].items()
            if name != "vanilla" and "identical_to_vanilla" in s["overall"]]
    return head + [markdown(r["methods"], r["ratios"]), ""] + \
        ([", ".join(same) + ".", ""] if same else [])


def tests(work: Path) -> list[str]:
    out = []
    for xml in (work / "tests" / f"{part}.xml" for part in ("tests", "passed")):
        if not xml.exists():
            continue
        out += [f"## GPU tests ({xml.stem})", "", "| test | outcome |", "|---|---|"]
        for case in ET.parse(xml).getroot().iter("testcase"):
            kids = {c.tag: c for c in case}
            outcome = next((tag for tag in ("failure", "error", "skipped") if tag in kids),
                           "passed")
            why = kids[outcome].get("message", "")[:120] if outcome in kids else ""
            out.append(f"| {case.get('name')} | {outcome}{': ' + why if why else ''} |")
        out.append("")
    return out


def main(argv=None) -> None:
    work = Path((argv or sys.argv[1:])[0])
    out = ["# GPU check", ""] + parts(work) + [""]
    for sub, title in RUNS:
        if (work / sub).exists():
            out += bench(work / sub, title)
    report = work / "forward" / "report.md"
    if report.exists():
        out += report.read_text().splitlines()[2:] + [""]  # its sections, not its title
    out += tests(work)
    print("\n".join(out))


if __name__ == "__main__":
    main()
