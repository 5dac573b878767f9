"""The GPU report: the environment, and forward time per path x precision x chunk x filled
length next to its memory floor; each part merges into OUT/report.json and OUT/report.md is
re-rendered. The methods' speed is the benchmark's, CUDA graphs and the memory estimate are
the GPU tests' (scripts/gpu_checks.sh runs them all).

    python3 scripts/gpu_report.py --part env|forward|all
        [--out DIR] [--models smol-self,llama8b] [--quants none,int8,int4] [--tiny]
        [--depths 2,4] [--quant-tuning on]
    python3 scripts/gpu_report.py --write-questions N --out DIR   (DIR/questions.jsonl)

Without cuda (or with --tiny) the shapes are tiny: a 2-layer Llama, seconds on a CPU.
long: one function per part, each short; splitting them apart would scatter the report."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.gpu_report_md import render  # noqa: E402

PARTS = ("env", "forward")
GIB = 1024 ** 3


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", default="all", help=f"{', '.join(PARTS)} or all (comma list)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" /
                                        f"{time.strftime('%Y-%m-%d')}-gpu-report"))
    p.add_argument("--tiny", action="store_true", help="tiny shapes (automatic without cuda)")
    p.add_argument("--models", default="", help="forward: smol-self,llama8b (tiny: tiny)")
    p.add_argument("--quants", default="none,int8,int4")
    p.add_argument("--paths", default="", help="forward: eager,static,compiled")
    p.add_argument("--depths", default="", metavar="N,N",
                   help="forward: two layer counts of a random-weight model (its embedding and "
                        "head whole), each cell projected linearly to the full depth")
    p.add_argument("--quant-tuning", choices=("off", "on"), default="off",
                   help="forward: a quantized compile with torchao's coordinate-descent tuning "
                        "(its rows then read PATH-tuned)")
    p.add_argument("--write-questions", type=int, default=0, metavar="N",
                   help="only write OUT/questions.jsonl: the first N project prompts, a "
                        "category at a time")
    args = p.parse_args(argv)
    args.parts = list(PARTS) if args.part == "all" else args.part.split(",")
    if unknown := [x for x in args.parts if x not in PARTS]:
        p.error(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}, all")
    return args


def settings(args) -> dict:
    """Sizes for this run: the real ones on cuda, tiny ones on the CPU (or --tiny)."""
    import torch

    cuda = torch.cuda.is_available()
    tiny = args.tiny or not cuda
    s = {"device": "cuda" if cuda else "cpu", "tiny": tiny, "quants": args.quants.split(","),
         "lengths": [16, 64] if tiny else [128, 1024, 4096], "chunks": [1, 8] if tiny
         else [1, 8, 32], "models": ["tiny"] if tiny else ["smol-self", "llama8b"],
         "paths": ["eager", "static", "compiled"] if cuda else ["eager", "static"],
         "copy_bytes": (64 << 20) if tiny else GIB}
    s["models"] = args.models.split(",") if args.models else s["models"]
    s["paths"] = args.paths.split(",") if args.paths else s["paths"]
    s["depths"] = sorted(int(x) for x in args.depths.split(",") if x.strip())
    s["tuning"] = args.quant_tuning == "on"
    return s


# -- the parts ---------------------------------------------------------------------------
def part_env(s: dict, out: Path) -> dict:
    import torch

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": s["device"],
           "tiny": s["tiny"], "cpu_cores": os.cpu_count()}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / GIB, 1)
    for dist in ("transformers", "triton", "torchao", "llama_cpp_python", "gguf"):
        env[dist.removesuffix("_python")] = _version(dist)
    try:
        import llama_cpp
        env["llama_cpp_gpu_offload"] = bool(llama_cpp.llama_supports_gpu_offload())
    except ImportError as e:
        env["llama_cpp_gpu_offload"] = f"llama_cpp missing: {e}"
    return env


def _version(dist: str) -> str:
    """A distribution's version from its metadata (importing torchao or transformers only to
    read theirs took seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "missing"


def part_forward(s: dict, out: Path) -> dict:
    from measure.gpu_bench import KNOWN, copy_bandwidth, copy_floors, floors, model_config
    from models.fit.memory import DTYPE_BYTES

    os.environ["DUO_QUANT_TUNING"] = "on" if s["tuning"] else "off"  # read at each compile
    bw = copy_bandwidth(s["device"], s["copy_bytes"])
    res = {"copy_bandwidth_gbs": bw / 1e9, "lengths": s["lengths"], "chunks": s["chunks"],
           "models": {}}
    for which in s["models"]:
        for quant in s["quants"]:
            # bfloat16 on cuda; float32 on the CPU, but int4 runs there in bfloat16 only
            dtype = "bfloat16" if s["device"] == "cuda" or quant == "int4" else "float32"
            config, b = model_config(which, dtype), DTYPE_BYTES[dtype]
            row = {"dtype": dtype, "floor_ms": _ms(floors(config, quant, s["lengths"], bw, b))}
            if quant == "int8":  # where the measured int8 lands: its floor or the copy's
                row["copy_floor_ms"] = _ms(copy_floors(config, s["lengths"], bw, b))
            if (which, quant, dtype) in KNOWN and s["depths"]:  # what the projection must give
                row["known"] = KNOWN[which, quant, dtype]
            for path in s["paths"]:
                label = f"{path}-tuned" if s["tuning"] and quant != "none" else path
                row[label] = _guard(lambda: _forward_path(s, which, quant, dtype, path))
            res["models"].setdefault(which, {})[quant] = row
            _merge_into(out, {"forward": res})  # what ran so far survives a later crash
    return res


def _forward_path(s: dict, which: str, quant: str, dtype: str, path: str) -> dict:
    """One path's forward times: at the model's depth, or (--depths) at two smaller ones,
    each cell projected linearly in the layer count to the full depth."""
    from measure.gpu_bench import model_config, per_layer

    if not s["depths"]:
        return _forward_one(s, which, quant, dtype, path)
    if len(s["depths"]) != 2 or which == "smol-self":
        raise ValueError("--depths takes two layer counts of a random-weight model")
    full = model_config(which, dtype)["num_hidden_layers"]
    runs = {d: _forward_one(s, which, quant, dtype, path, layers=d) for d in s["depths"]}
    if any("ms" not in r for r in runs.values()):
        return next(r for r in runs.values() if "ms" not in r)  # skipped
    cells = runs[s["depths"][0]]["ms"]
    ms = {k: round(per_layer({d: r["ms"][k] for d, r in runs.items()}, full), 4)
          for k in cells}
    return {"ms": ms, "layers": full, "depths": {str(d): r for d, r in runs.items()}}


def _forward_one(s: dict, which: str, quant: str, dtype: str, path: str,
                 layers: int | None = None) -> dict:
    from measure.gpu_bench import free_cuda, make_target, model_source, time_forwards
    from models.target.quant import supported
    from models.target.eager import DTYPES

    ok, why = supported(quant, s["device"], DTYPES[dtype])
    if not ok:
        return {"skipped": why}
    name, model, group = model_source(which, s["device"], dtype, layers)
    t0 = time.perf_counter()
    n_ctx = max(s["lengths"]) + 2 * max(s["chunks"])
    target = make_target(path, name, s["device"], dtype, n_ctx, quant, tuple(s["chunks"]),
                         model, group)
    build_s = time.perf_counter() - t0
    times = time_forwards(target, s["lengths"], s["chunks"])
    target.close()
    del model, target
    free_cuda()
    return {"ms": _ms(times), "build_s": round(build_s, 1)}


def questions(out: Path, n: int, source: str = "prompts") -> Path:
    """The first n project prompts (bench/SOURCE.jsonl) taken a category at a time."""
    rows = [json.loads(x) for x in (ROOT / "bench" / f"{source}.jsonl").read_text().splitlines()
            if x.strip()]
    cats: dict[str, list] = {}
    for r in rows:
        cats.setdefault(r["category"], []).append(r)
    order = [r for i in range(max(map(len, cats.values()))) for c in cats.values()
             if i < len(c) for r in [c[i]]]
    path = out / ("questions.jsonl" if source == "prompts" else f"{source}.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in order[:n]))
    return path


# -- running and merging -----------------------------------------------------------------
def _guard(fn) -> dict:
    """The part's result, or its error text (the other parts still run)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - recorded in the report, not swallowed
        failed = {"error": f"{type(e).__name__}: {e}",
                  "trace": traceback.format_exc(limit=4)[-1500:]}
    from measure.gpu_bench import free_cuda

    free_cuda()  # what the failed step held (an out-of-memory model) goes before the next
    return failed


def _ms(times: dict) -> dict:
    return {k: round(v * 1e3, 4) for k, v in times.items()}


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else v
    return out


def _merge_into(out: Path, part: dict) -> dict:
    path = out / "report.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    report = _merge(report, part)
    path.write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(render(report))
    return report


def main(argv=None) -> Path:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.write_questions:
        print(questions(out, args.write_questions))
        return out
    s = settings(args)
    for name in args.parts:
        t0 = time.perf_counter()
        print(f"gpu_report: {name} ...", file=sys.stderr, flush=True)
        result = _guard(lambda: globals()[f"part_{name}"](s, out))
        result["seconds"] = round(time.perf_counter() - t0, 1)
        _merge_into(out, {name: result})
    print(out / "report.md")
    return out


if __name__ == "__main__":
    main()
