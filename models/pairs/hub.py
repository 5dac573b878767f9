"""Hub access through huggingface_hub: which files a pair needs, resumable downloads with progress bars,
size/hash checks against the Hub's metadata, and the Hub's errors as one-line messages.
(--add-pair reads tokens with models/pairs/gguf_header.py and compares them in models/pairs/vocab_compare.py.)"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

try:  # huggingface_hub 2.x's HTTP client; 1.x (a GPU image's own hub, docs/gpu.md) used httpx
    import httpx2 as httpx
except ImportError:
    import httpx
from huggingface_hub import HfApi, hf_hub_download, try_to_load_from_cache
from huggingface_hub import errors as hf_errors
from tqdm.auto import tqdm

from models.pairs.catalog import PairError, cache_dir

DEFAULT_ENDPOINT = "https://huggingface.co"
CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json")
REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
HASH_BAR_BYTES = 256 * 1024 ** 2


class HubError(PairError):
    """A Hub problem the user can act on (bad name, no access, no network); one line, exit code 2."""


class OfflineError(HubError):
    """The Hub cannot be reached."""


class GatedError(HubError):
    """The repo is gated and this token (or no token) has no access."""


class VerifyError(PairError):
    """A downloaded file does not match the Hub's size or hash."""


@dataclass(frozen=True)
class HubConfig:
    """Where to download from and to; read from the environment at call time (HF_ENDPOINT, HF_TOKEN)."""
    endpoint: str
    token: str | None
    cache_dir: Path
    local_dir: Path | None = None

    @classmethod
    def from_env(cls, local_dir: str | Path | None = None) -> "HubConfig":
        from huggingface_hub import get_token

        return cls(endpoint=os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/"),
                   token=os.environ.get("HF_TOKEN") or get_token(), cache_dir=cache_dir(),
                   local_dir=Path(local_dir).expanduser().resolve() if local_dir else None)

    def folder_for(self, repo: str) -> Path | None:
        """With --local-dir, each repo gets its own folder under it."""
        return self.local_dir / repo.replace("/", "--") if self.local_dir else None


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo as the Hub describes it: size, sha256 (LFS files) and git blob id."""
    name: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


@dataclass
class RepoPlan:
    """The files to fetch from one repo at one commit."""
    repo: str
    revision: str
    commit: str
    gated: bool
    files: list[RemoteFile] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


# ---- errors -----------------------------------------------------------------------------------

@contextlib.contextmanager
def hub_errors(cfg: HubConfig, repo: str) -> Iterator[None]:
    """Turn huggingface_hub / network exceptions into one-line HubErrors."""
    try:
        yield
    except hf_errors.GatedRepoError:
        raise gated_error(cfg, repo) from None
    except hf_errors.RepositoryNotFoundError:
        raise HubError(f"repository '{repo}' not found on {cfg.endpoint} (if it is private, set HF_TOKEN)") from None
    except hf_errors.RevisionNotFoundError:
        raise HubError(f"repository '{repo}' has no such revision") from None
    except hf_errors.RemoteEntryNotFoundError as e:
        raise HubError(f"file not found in '{repo}': {e.response.url}") from None
    except (httpx.TransportError, hf_errors.OfflineModeIsEnabled, hf_errors.LocalEntryNotFoundError) as e:
        raise offline_error(cfg, e) from None
    except hf_errors.HfHubHTTPError as e:
        raise HubError(f"the Hub refused a request for '{repo}' (HTTP {e.response.status_code})") from None


def gated_error(cfg: HubConfig, repo: str) -> GatedError:
    hint = ("HF_TOKEN is set but has no access: accept the license"
            if cfg.token else "accept the license")
    return GatedError(f"'{repo}' is a gated repository: {hint} at {DEFAULT_ENDPOINT}/{repo} while logged in, "
                      f"then export HF_TOKEN=<a read token from {DEFAULT_ENDPOINT}/settings/tokens>")


def offline_error(cfg: HubConfig, error: Exception) -> OfflineError:
    offline = isinstance(error, hf_errors.OfflineModeIsEnabled)
    reason = "HF_HUB_OFFLINE is set" if offline else type(error).__name__
    return OfflineError(f"cannot reach the Hugging Face Hub at {cfg.endpoint} ({reason}); downloads need a "
                        f"connection. The embedded pairs smol-self and gemma-smol work offline: "
                        f"python scripts/generate.py --pair smol-self")


# ---- planning ---------------------------------------------------------------------------------

def repo_info(cfg: HubConfig, repo: str, revision: str = "main"):
    """The Hub's model info with per-file sizes and hashes (GET /api/models/{repo}/revision/{rev}?blobs=true)."""
    if not REPO_ID.match(repo):
        raise HubError(f"'{repo}' is not a Hub repository id (expected org/name)")
    with hub_errors(cfg, repo):
        return HfApi(endpoint=cfg.endpoint).model_info(repo, revision=revision, files_metadata=True,
                                                       token=cfg.token or False)


def remote_files(info) -> dict[str, RemoteFile]:
    out = {}
    for s in info.siblings or []:
        lfs = s.lfs
        out[s.rfilename] = RemoteFile(s.rfilename, int(lfs.size if lfs else s.size or 0),
                                      lfs.sha256 if lfs else None, s.blob_id)
    return out


def select_target_files(names: list[str]) -> list[str]:
    """Config, tokenizer and weights at the repo's top level: safetensors when there are any,
    PyTorch .bin otherwise (older repos such as lmsys/vicuna-7b-v1.5 ship only .bin)."""
    top = [n for n in names if "/" not in n]
    keep = [n for n in top if n in CONFIG_FILES or n in TOKENIZER_FILES]
    safet = [n for n in top if n.endswith(".safetensors") and not n.startswith("consolidated")]
    if safet:
        weights = safet + [n for n in top if n == "model.safetensors.index.json"]
    else:
        weights = [n for n in top if re.fullmatch(r"pytorch_model(-\d+-of-\d+)?\.bin(\.index\.json)?", n)]
    return sorted(set(keep)) + sorted(weights)


def plan_target(cfg: HubConfig, repo: str, revision: str = "main") -> RepoPlan:
    info = repo_info(cfg, repo, revision)
    files = remote_files(info)
    chosen = select_target_files(list(files))
    if "config.json" not in chosen or not any(n.endswith((".safetensors", ".bin")) for n in chosen):
        raise HubError(f"'{repo}' has no config.json plus safetensors/.bin weights at its top level")
    return RepoPlan(repo, revision, info.sha, bool(info.gated), [files[n] for n in chosen])


def plan_draft(cfg: HubConfig, repo: str, file: str, revision: str = "main") -> RepoPlan:
    info = repo_info(cfg, repo, revision)
    files = remote_files(info)
    if file not in files:
        ggufs = sorted(n for n in files if n.endswith(".gguf"))
        raise HubError(f"'{repo}' has no file '{file}'; its GGUF files: {', '.join(ggufs) or 'none'}")
    return RepoPlan(repo, revision, info.sha, bool(info.gated), [files[file]])


# ---- local state ------------------------------------------------------------------------------

def local_path(cfg: HubConfig, plan: RepoPlan, f: RemoteFile) -> Path | None:
    """Where the file already is (cache or --local-dir folder), if it is there with the right size."""
    folder = cfg.folder_for(plan.repo)
    if folder is not None:
        path = folder / f.name
    else:
        hit = try_to_load_from_cache(plan.repo, f.name, cache_dir=cfg.cache_dir, revision=plan.commit)
        path = Path(hit) if isinstance(hit, str) else None
    return path if path is not None and path.is_file() and path.stat().st_size == f.size else None


def missing_bytes(cfg: HubConfig, plans: list[RepoPlan]) -> int:
    return sum(f.size for p in plans for f in p.files if local_path(cfg, p, f) is None)


def free_disk(root: Path) -> int:
    """Free bytes on the disk that holds root (or its nearest existing parent)."""
    return shutil.disk_usage(next(p for p in [root, *root.parents] if p.exists())).free


def check_disk(cfg: HubConfig, plans: list[RepoPlan]) -> None:
    need, root = missing_bytes(cfg, plans), cfg.local_dir or cfg.cache_dir
    free = free_disk(root)
    if need > free:
        raise HubError(f"the download needs {need / 1e9:.1f} GB but only {free / 1e9:.1f} GB is free for {root}")


def check_access(cfg: HubConfig, plans: list[RepoPlan]) -> None:
    for p in plans:
        if p.gated and not cfg.token:
            raise gated_error(cfg, p.repo)


# ---- download and verify ----------------------------------------------------------------------

def fetch_plan(cfg: HubConfig, plan: RepoPlan, say: Callable[[str], None] = print) -> Path:
    """Download every file of the plan (skipping verified ones already there); the folder they are in."""
    path = None
    for i, f in enumerate(plan.files, 1):
        say(f"[{plan.repo} {i}/{len(plan.files)}] {f.name} ({f.size / 1e6:,.1f} MB)")
        path = fetch_file(cfg, plan, f)
    return path.parent


def fetch_file(cfg: HubConfig, plan: RepoPlan, f: RemoteFile) -> Path:
    """hf_hub_download the file and verify it; a file that fails is removed and fetched once more."""
    for attempt in range(2):
        path = _download(cfg, plan, f, force=attempt > 0)
        try:
            verify_file(path, f)
            return path
        except VerifyError as e:
            discard(path)
            if attempt:
                raise VerifyError(f"{e}; removed after two attempts, check the connection and run again") from None
    raise AssertionError("unreachable")


def _download(cfg: HubConfig, plan: RepoPlan, f: RemoteFile, force: bool) -> Path:
    try:
        with hub_errors(cfg, plan.repo):
            return Path(hf_hub_download(plan.repo, f.name, revision=plan.revision, cache_dir=cfg.cache_dir,
                                        local_dir=cfg.folder_for(plan.repo), token=cfg.token or False,
                                        endpoint=cfg.endpoint, force_download=force))
    except OSError as e:  # http_get's own size check after its retries, or a full disk
        raise VerifyError(f"{f.name}: download failed ({str(e).splitlines()[0]})") from None


def verify_file(path: Path, f: RemoteFile) -> None:
    """Size, then sha256 (LFS files) or the git blob sha1 (small files), against the Hub's metadata."""
    size = path.stat().st_size
    if size != f.size:
        raise VerifyError(f"{f.name}: size {size} bytes, the Hub says {f.size}")
    if f.sha256:
        got, want = file_digest(path, hashlib.sha256()), f.sha256
    elif f.blob_id:
        got, want = file_digest(path, hashlib.sha1(f"blob {size}\0".encode())), f.blob_id
    else:
        return
    if got != want:
        raise VerifyError(f"{f.name} is corrupted (hash {got[:12]}..., the Hub says {want[:12]}...)")


def file_digest(path: Path, digest) -> str:
    size = path.stat().st_size
    bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"verify {path.name}", leave=False,
               disable=size < HASH_BAR_BYTES)
    with path.open("rb") as fh, bar:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def discard(path: Path) -> None:
    """Remove a bad file: in the cache both the snapshot link and the blob it points to."""
    target = path.resolve()
    path.unlink(missing_ok=True)
    if target != path:
        target.unlink(missing_ok=True)
