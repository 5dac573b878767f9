"""scripts/gpu_checks.sh's dry run on the CPU (DRY=1: tiny shapes, one prompt, a few tokens,
the eager target): the parts in their order, each under its cap and stamped, each packed into
OUT the moment it ends, OUT within what a device call brings back (8 files), a part cut at
its cap leaving the next one to run; the methods' texts equal vanilla's, the draft's thread
times and the profiles copied out, the forward projected from two depths, the GPU tests'
node ids all found."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["env", "methods", "emulate-profile", "emulate-shadow", "forward", "tests", "tuned",
         "passed"]
LINE = re.compile(r"^\s*(\d+)s (\S+)\s+(.*)$")
# caps and a budget no dry run comes near on a slow, busy host (a minute in all on a 2-core
# VM, 13 s the longest part): a part is cut only where a test cuts it (CAP_ENV below)
ROOMY = {f"CAP_{part}": "900" for part in ("ENV", "METHODS", "PROFILE", "SHADOW", "FORWARD",
                                           "TESTS", "TUNED", "PASSED")}


def dry_run(base: Path, budget: int = 3600, parts: str = "", **env) -> subprocess.CompletedProcess:
    out, work = base / "out", base / "work"
    mine = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # a worker's
    env = {**mine, **ROOMY, "DRY": "1", "PY": sys.executable, "OUT": str(out),
           "WORK": str(work), **env}
    cmd = ["bash", str(ROOT / "scripts" / "gpu_checks.sh"), str(budget)] + [parts] * bool(parts)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=budget)


def log(base: Path) -> list[tuple[int, str, str]]:
    lines = (base / "out" / "log.txt").read_text().splitlines()
    return [(int(m[1]), m[2], m[3]) for m in map(LINE.match, lines) if m]


def ends(base: Path) -> dict[str, str]:
    return {label: text for _, label, text in log(base) if text.startswith("end: exit")}


def unpacked(base: Path, part: str) -> Path:
    with tarfile.open(base / "out" / f"{part}.tgz") as tar:
        tar.extractall(base / "unpacked", filter="data")
    return base / "unpacked" / part


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("gpu-checks")
    run = dry_run(base)
    assert run.returncode == 0, run.stderr[-2000:]
    return base


def test_the_parts_run_in_order_each_capped_and_stamped(checked):
    starts = [(label, text) for _, label, text in log(checked) if text.startswith("start (cap")]
    assert [label for label, _ in starts] == ORDER
    assert all(re.fullmatch(r"start \(cap \d+ s\)", text) for _, text in starts)
    seconds = [s for s, _, _ in log(checked)]
    assert seconds == sorted(seconds)  # every line stamped as it came
    assert ends(checked) == {label: "end: exit 0" for label in ORDER}


def test_out_holds_what_a_device_call_brings_back(checked):
    files = sorted(p.name for p in (checked / "out").iterdir())
    assert files == ["emulate.tgz", "env.txt", "forward.tgz", "log.txt", "methods.tgz",
                     "summary.md", "tests.tgz"]  # at most 8 come back
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files)
    assert all((checked / "out" / f).stat().st_size < 16 << 20 for f in files)
    env = (checked / "out" / "env.txt").read_text()
    assert "Model name" in env or "Architecture" in env  # lscpu: the draft's CPU
    summary = (checked / "out" / "summary.md").read_text()
    assert "| methods | 0 |" in summary and "## Forward" in summary


def test_methods_texts_equal_vanilla_and_the_draft_timings_come_out(checked):
    d = unpacked(checked, "methods")
    r = json.loads((d / "results.json").read_text())
    assert r["complete"] and set(r["methods"]) == {"vanilla", "sps", "duo"}
    for name in ("sps", "duo"):
        overall = r["methods"][name]["overall"]
        assert overall["identical_to_vanilla"] == overall["prompts"] == 1
    assert (d / "draft_threads.json").exists() and (d / "profiles.json").exists()


def test_the_forward_is_projected_from_two_depths(checked):
    r = json.loads((unpacked(checked, "forward") / "report.json").read_text())["forward"]
    rows = r["models"]["tiny"]
    for quant, path in (("int8", "static"), ("int8", "static-tuned")):
        p = rows[quant][path]
        assert set(p["depths"]) == {"1", "2"} and p["layers"] == 2
        assert set(p["ms"]) == set(p["depths"]["2"]["ms"]) and all(p["ms"].values())


def test_the_gpu_tests_named_are_found_and_skip_on_the_cpu(checked):
    import xml.etree.ElementTree as ET

    d = unpacked(checked, "tests")
    for part, least in (("tests", 4), ("passed", 5)):
        cases = list(ET.parse(d / f"{part}.xml").getroot().iter("testcase"))
        assert len(cases) >= least  # a node id that does not exist fails the run (exit 4)
        assert all(c.find("skipped") is not None for c in cases)


def test_the_emulation_runs_on_both_clocks(checked):
    d = unpacked(checked, "emulate")
    for clock in ("profile", "shadow"):
        r = json.loads((d / clock / "results.json").read_text())
        assert r["complete"] and set(r["methods"]) == {"vanilla", "duo"}  # the dry run's two
        assert r["emulation"]["clock"] == clock
        assert r["emulation"]["title"] == "emulated h100-llama8b-bf16"


def test_a_part_cut_at_its_cap_is_copied_and_the_next_one_runs(tmp_path):
    """The env part's report waits a minute (PY: python behind a wait for it), so its 1 s
    cap cuts it on any host (it took 2 s on its own on a 2-core VM: a fast one may take
    less)."""
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\ncase "$*" in *"--part env"*) sleep 60;; esac\n'
                    f'exec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    run = dry_run(tmp_path, parts="env env", CAP_ENV="1", PY=str(slow))
    assert run.returncode == 0, run.stderr[-2000:]
    cut = [text for _, label, text in log(tmp_path) if label == "env" and "end:" in text]
    assert cut == ["end: exit 124, cut at its cap"] * 2
    assert (tmp_path / "out" / "env.txt").exists() and (tmp_path / "out" / "summary.md").exists()
