"""Download draft/target pairs from the Hugging Face Hub, list them, or add your own pair.

  python scripts/download_models.py --list [--json]
  python scripts/download_models.py --pair NAME [--dry-run] [--local-dir DIR]
  python scripts/download_models.py --add-pair NAME --target REPO_OR_DIR --draft REPO:FILE_OR_PATH
  python scripts/download_models.py --serve vllm|sglang|llama-server|all NAME [--gpus N]
      [--draft-on cpu|gpu] [--draft-sampling greedy|probabilistic]   (print the serving-engine commands)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.pairs import gguf_header, hub, serving, vocab_compare  # noqa: E402
from models.pairs.catalog import (CATALOG_FILE, PairError, PairSpec, is_downloaded, load_catalog,  # noqa: E402
                            get_pair, read_entries, save_user_entry, weights_complete)
from models.fit.memory import (DEFAULT_CTX, GIB, device_memory, estimate_bytes,  # noqa: E402
                           pair_sizes, size_config)

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
TOKENS = "tokenizer.ggml.tokens"  # the GGUF key of a draft's tokens


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line on stderr (exit code 2)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    act = p.add_mutually_exclusive_group(required=True)
    act.add_argument("--list", action="store_true", help="table of pairs, sizes and what is on disk")
    act.add_argument("--pair", metavar="NAME", help="download the target and draft of this pair")
    act.add_argument("--add-pair", metavar="NAME", help="check and save your own pair to the user catalog")
    act.add_argument("--serve", nargs=2, metavar=("ENGINE", "NAME"),
                     help=f"print the commands that serve the pair on ENGINE ({', '.join(serving.ENGINES)} or all)")
    p.add_argument("--json", action="store_true", help="with --list: print a JSON list")
    p.add_argument("--dry-run", action="store_true", help="with --pair: show what would be downloaded")
    p.add_argument("--local-dir", metavar="DIR", help="with --pair: download into DIR instead of the Hub cache")
    p.add_argument("--target", metavar="REPO_OR_DIR", help="with --add-pair: Hub repo id or local model folder")
    p.add_argument("--draft", metavar="REPO:FILE_OR_PATH", help="with --add-pair: Hub GGUF as repo:file, or a .gguf")
    p.add_argument("--gpus", type=int, metavar="N", help="with --serve: split the target over N GPUs")
    p.add_argument("--draft-on", choices=serving.DRAFT_ON, help="with --serve llama-server: where the draft runs "
                   "(default cpu, as in this app)")
    p.add_argument("--draft-sampling", choices=serving.DRAFT_SAMPLING,
                   help="with --serve: how the draft proposes (default greedy, each engine's default)")
    args = p.parse_args(argv)
    for flag, needs, ok in (("--json", "--list", args.list), ("--dry-run", "--pair", args.pair),
                            ("--local-dir", "--pair", args.pair), ("--target", "--add-pair", args.add_pair),
                            ("--draft", "--add-pair", args.add_pair), ("--gpus", "--serve", args.serve),
                            ("--draft-on", "--serve", args.serve), ("--draft-sampling", "--serve", args.serve)):
        if getattr(args, flag[2:].replace("-", "_")) not in (None, False) and not ok:
            p.error(f"{flag} goes with {needs}")
    engine = args.serve[0] if args.serve else None
    if engine and engine != "all" and engine not in serving.ENGINES:
        p.error(f"unknown engine '{engine}' for --serve; choose from {', '.join(serving.ENGINES)} or all")
    if engine and args.draft_on and engine not in ("llama-server", "all"):
        p.error("--draft-on goes with --serve llama-server (vLLM and SGLang run the draft beside the target)")
    if args.gpus is not None and args.gpus < 1:
        p.error("--gpus must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.list:
            return list_pairs(args.json)
        if args.pair:
            return download_pair(args.pair, args.dry_run, args.local_dir)
        if args.serve:
            return serve_pair(*args.serve, gpus=args.gpus or 1, draft_on=args.draft_on,
                              draft_sampling=args.draft_sampling or "greedy")
        return add_pair(args.add_pair, args.target, args.draft)
    except hub.VerifyError as e:
        return fail(str(e), 1)
    except PairError as e:
        return fail(str(e), 2)
    except KeyboardInterrupt:
        return fail("interrupted; run the same command again to resume (finished files are kept)", 130)


def fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


# ---- --list -----------------------------------------------------------------------------------

def list_pairs(as_json: bool) -> int:
    gpu_free, gpu_total, _ = device_memory("cuda")
    rows = [pair_row(s, gpu_free, gpu_total) for s in load_catalog().values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    head = ("NAME", "TARGET", "DRAFT", "DOWNLOAD", "CTX", "BF16", "INT8", "INT4", "USE", "GATED", "TOKENIZER",
            "ON DISK")
    table = [head] + [(r["name"], r["target_repo"] or "(embedded)", _draft_label(r), _gb(r["download_gb"], "GB"),
                       r["vram_ctx"] or "-",
                       *(_gb((r["vram_gib"] or {}).get(k), "GiB") for k in ("bf16", "int8", "int4")),
                       _use(r), "yes" if r["gated"] else "no",
                       "same" if r["same_tokenizer"] else "different", "yes" if r["downloaded"] else "no")
                      for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    where = "no GPU here, the target runs on the CPU" if gpu_free is None else \
        f"the best that fits {gpu_free / GIB:.1f} GiB free on the GPU, with its window"
    print(f"\nCTX: the default window, min(trained window, {DEFAULT_CTX}). BF16/INT8/INT4: GPU memory for the "
          f"target's weights, its KV cache for CTX tokens and the forward's working memory; a margin of "
          f"0.5 GiB + 1/16 of the card comes on top.\nUSE: what --target-quant auto picks on this machine ({where}).")
    return 0


def pair_row(s: PairSpec, gpu_free: int | None = None, gpu_total: int | None = None) -> dict:
    sizes = pair_sizes(s, gpu_free, gpu_total)
    return {"name": s.name, "embedded": s.embedded, "target_repo": s.target.get("repo"),
            "draft_repo": s.draft.get("repo"), "draft_file": s.draft.get("file"),
            "same_tokenizer": s.same_tokenizer, "downloaded": is_downloaded(s),
            "gated": s.gated, "download_gb": s.extra.get("download_gb"),
            "gpu_gib_bf16": s.extra.get("gpu_gib_bf16"), "quantization": s.extra.get("quantization"),
            "vram_gib": sizes["vram"], "vram_ctx": sizes["window"], "would_use": sizes["use"],
            "would_use_ctx": sizes["use_ctx"], "user": s.user, "note": s.note}


def _use(r: dict) -> str:
    ctx = r["would_use_ctx"]
    return f"{r['would_use']} @ {ctx}" if ctx and ctx != r["vram_ctx"] else r["would_use"]


def _draft_label(r: dict) -> str:
    return f"{r['draft_repo']}:{r['draft_file']}" if r["draft_repo"] else f"(embedded) {r['draft_file']}"


def _gb(value, unit: str) -> str:
    return f"{value:.1f} {unit}" if isinstance(value, (int, float)) else "-"


# ---- --pair -----------------------------------------------------------------------------------

def download_pair(name: str, dry_run: bool, local_dir: str | None) -> int:
    spec = get_pair(name)
    if spec.embedded:
        print(f"'{name}' is embedded (shipped in pip packages): nothing to download")
        return 0
    cfg = hub.HubConfig.from_env(local_dir or _recorded_dir(spec))
    plans = pair_plans(cfg, spec)
    if dry_run:
        print_plan(cfg, plans)
        return 0
    hub.check_access(cfg, plans)
    hub.check_disk(cfg, plans)
    places = {plan.repo: hub.fetch_plan(cfg, plan) for plan in plans}
    if cfg.local_dir:
        path = save_user_entry(local_entry(spec, cfg))
        print(f"recorded the local copy in {path}")
    for repo, place in places.items():
        print(f"{repo}: verified, in {place}")
    print(f"pair '{name}' is ready: python scripts/generate.py --pair {name}")
    return 0


def pair_plans(cfg: hub.HubConfig, spec: PairSpec) -> list[hub.RepoPlan]:
    plans = []
    t, d = spec.target, spec.draft
    if "repo" in t:
        plans.append(hub.plan_target(cfg, t["repo"], t.get("revision", "main")))
    if "repo" in d:
        plans.append(hub.plan_draft(cfg, d["repo"], d["file"], d.get("revision", "main")))
    if not plans:
        raise PairError(f"pair '{spec.name}' uses local files only: nothing to download")
    return plans


def _recorded_dir(spec: PairSpec) -> Path | None:
    """A pair downloaded before with --local-dir goes to the same folder again."""
    t = spec.target
    return Path(t["path"]).parent if "repo" in t and "path" in t else None


def local_entry(spec: PairSpec, cfg: hub.HubConfig) -> dict:
    """The user-catalog entry that points the pair at its --local-dir copy."""
    entry = {"name": spec.name, "same_tokenizer": spec.same_tokenizer, "chat": spec.chat, "note": spec.note,
             **{k: v for k, v in spec.extra.items() if k != "user"}, "local_copy": True}
    entry["target"] = {**spec.target, "path": str(cfg.folder_for(spec.target["repo"]))} \
        if "repo" in spec.target else spec.target
    entry["draft"] = {**spec.draft, "path": str(cfg.folder_for(spec.draft["repo"]) / spec.draft["file"])} \
        if "repo" in spec.draft else spec.draft
    return entry


def print_plan(cfg: hub.HubConfig, plans: list[hub.RepoPlan]) -> None:
    total = 0
    for plan in plans:
        gate = (" (gated: HF_TOKEN is set)" if cfg.token else " (gated: HF_TOKEN not set, it would be refused)") \
            if plan.gated else ""
        print(f"{plan.repo} @ {plan.commit[:12]}: {len(plan.files)} files, {plan.total_bytes / 1e9:.2f} GB{gate}")
        for f in plan.files:
            have = hub.local_path(cfg, plan, f) is not None
            total += 0 if have else f.size
            print(f"  {'have' if have else 'get '}  {f.size / 1e6:>12,.1f} MB  {f.name}")
    where = cfg.local_dir or cfg.cache_dir
    print(f"would download {total / 1e9:.2f} GB into {where}, {hub.free_disk(where) / 1e9:.1f} GB free "
          f"(dry run: nothing written)")


# ---- --serve ----------------------------------------------------------------------------------

def serve_pair(engine: str, name: str, gpus: int, draft_on: str | None, draft_sampling: str) -> int:
    """Print the serving commands (all three engines for 'all', a refusal as a comment); exit 1 when
    every engine asked for refuses the pair."""
    spec = get_pair(name)
    engines = list(serving.ENGINES) if engine == "all" else [engine]
    blocks, refusals = [], []
    for e in engines:
        try:
            blocks.append(serving.serve_command(spec, e, gpus, draft_on if e == "llama-server" else None,
                                                draft_sampling))
        except serving.ServingRefusal as refusal:
            refusals.append(f"# {serving.ENGINES[e].title} {serving.ENGINES[e].version}: refused: {refusal}")
    if not blocks:
        return fail("; ".join(r.split(": refused: ", 1)[1] for r in refusals), 1)
    print("\n\n".join(blocks + refusals))
    print(f"\n{serving.WHEN_TO_MOVE}")
    return 0


# ---- --add-pair -------------------------------------------------------------------------------

def add_pair(name: str, target: str | None, draft: str | None) -> int:
    if not target or not draft:
        raise PairError("--add-pair needs both --target REPO_OR_DIR and --draft REPO:FILE_OR_PATH")
    if not NAME.match(name):
        raise PairError(f"pair name '{name}' may use only letters, digits, '.', '_' and '-'")
    if any(e["name"] == name for e in read_entries(CATALOG_FILE)):
        raise PairError(f"'{name}' is a built-in pair; choose another name")
    cfg = hub.HubConfig.from_env()
    t_entry, folder, gated = describe_target(cfg, target)
    d_entry, d_tokens = describe_draft(cfg, draft)
    same, detail = compare_tokenizers(folder, d_tokens)
    entry = {"name": name, "target": t_entry, "draft": d_entry, "same_tokenizer": same,
             "chat": has_chat_template(folder), "gated": gated, **sizes(folder),
             "note": f"added with --add-pair; tokenizers: {detail}"}
    path = save_user_entry(entry)
    print(f"saved pair '{name}' to {path} (tokenizers {'same' if same else 'different'}: {detail})")
    if "repo" in t_entry or "repo" in d_entry:
        print(f"download it with: python scripts/download_models.py --pair {name}")
    return 0


def describe_target(cfg: hub.HubConfig, arg: str) -> tuple[dict, Path, bool]:
    """Catalog entry, a folder holding config + tokenizer, gated flag; checks the weights exist."""
    path = Path(arg).expanduser()
    if path.is_dir():
        if not weights_complete(path):
            raise PairError(f"target folder {path} needs config.json and all its safetensors/.bin weights")
        return {"path": str(path.resolve())}, path, False
    if not hub.REPO_ID.match(arg):
        raise PairError(f"--target '{arg}' is neither a model folder nor a Hub repo id (org/name)")
    plan = hub.plan_target(cfg, arg)
    small = hub.RepoPlan(plan.repo, plan.revision, plan.commit, plan.gated,
                         [f for f in plan.files if f.name in hub.CONFIG_FILES + hub.TOKENIZER_FILES])
    if plan.gated and not cfg.token:
        raise hub.gated_error(cfg, arg)
    folder = hub.fetch_plan(cfg, small, say=lambda _: None)
    return {"repo": arg}, folder, plan.gated


def describe_draft(cfg: hub.HubConfig, arg: str) -> tuple[dict, list[str] | None]:
    """Catalog entry and the GGUF's tokens; a Hub file is read from its header with Range requests."""
    path = Path(arg).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise PairError(f"draft {path} is not a .gguf file")
        with path.open("rb") as fh:
            return {"path": str(path.resolve())}, gguf_header.gguf_field(fh.read, TOKENS)
    repo, sep, file = arg.partition(":")
    if not sep or not file.endswith(".gguf"):
        raise PairError(f"--draft '{arg}' is neither a local .gguf file nor REPO:FILE.gguf")
    hub.plan_draft(cfg, repo, file)
    return {"repo": repo, "file": file}, gguf_header.gguf_field(gguf_header.RangeReader(cfg, repo, file).read, TOKENS)


def compare_tokenizers(folder: Path, d_tokens: list[str] | None) -> tuple[bool, str]:
    t_tokens = vocab_compare.folder_vocab(folder)
    if not t_tokens or not d_tokens:
        return False, "could not read both tokenizers, treated as different"
    return vocab_compare.compare_vocabs(t_tokens, d_tokens)


def has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file():
        return True
    try:
        return "chat_template" in json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False


def sizes(folder: Path) -> dict:
    try:
        config = json.loads((folder / "config.json").read_text())
        return {"gpu_gib_bf16": round(estimate_bytes(config, 2) / GIB, 1), "target_config": size_config(config)}
    except (OSError, ValueError, PairError):
        return {}


if __name__ == "__main__":
    sys.exit(main())
