"""Device profiles for the emulated GPU target (measure/emulate.py): a GPU's forward times per
chunk and filled length, its draft's times on that machine's CPU, and the source of every
number; measured ones from a GPU report, projected ones scaled from a measured one by the
card's memory bandwidth and the precision's bytes (measure/profiles/*.json)."""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
COMPUTE_SHARE = 0.6  # of a card's dense peak that a prefill past the measured chunks reaches
PARAMS = {"llama8b": 8.03e9}  # the shape's parameters: a token's prefill is 2 FLOP each


@dataclass
class DeviceProfile:
    name: str
    kind: str  # measured or projected
    device: str
    date: str
    shape: str
    dtype: str
    quant: str
    chunks: list[int]
    filled: list[int]
    ms: list[list[float]]  # ms[i][j]: a forward of chunks[j] tokens over filled[i]
    floor_ms: float  # no forward faster than this (the compiled path's launch floor)
    token_ms: float  # each prefill token past the largest chunk
    draft_threads: int
    draft_token_ms: float
    draft_step_ms: dict[int, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def projected(self) -> bool:
        return self.kind == "projected"

    def forward_ms(self, n: int, filled: int) -> float:
        """A forward of n new tokens over `filled` cached ones: the table's bilinear
        interpolation (filled below the first row: the first row; past the last: the last
        two rows' slope), past the largest chunk plus token_ms a token."""
        c = min(max(n, self.chunks[0]), self.chunks[-1])
        rows = [_interp(self.chunks, row, c) for row in self.ms]
        base = _interp(self.filled, rows, max(filled, self.filled[0]), extrapolate=True)
        return max(self.floor_ms, base) + max(0, n - self.chunks[-1]) * self.token_ms

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "device": self.device, "date": self.date,
                "target": {"shape": self.shape, "dtype": self.dtype, "quant": self.quant},
                "forward_ms": {"chunks": self.chunks, "filled": self.filled,
                               "ms": [[round(x, 3) for x in r] for r in self.ms]},
                "floor_ms": self.floor_ms, "prefill_ms_per_token": round(self.token_ms, 4),
                "draft": {"threads": self.draft_threads, "token_ms": self.draft_token_ms,
                          "step_ms": {str(k): v for k, v in self.draft_step_ms.items()}},
                "sources": self.sources}


def _interp(xs: list[int], ys: list[float], x: float, extrapolate: bool = False) -> float:
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    if not extrapolate:
        x = min(x, xs[-1])
    return ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name: str) -> DeviceProfile:
    """A profile by name (measure/profiles/NAME.json) or by path; ValueError naming the
    known ones when there is none."""
    path = Path(name) if name.endswith(".json") else PROFILE_DIR / f"{name}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise ValueError(f"no device profile '{name}'; known: {', '.join(profile_names())} "
                         "(or a path to a .json profile)") from None
    except ValueError as e:
        raise ValueError(f"device profile {path}: not JSON ({e})") from None
    try:
        return projected(data) if data.get("projected_from") else measured(data)
    except (KeyError, TypeError, IndexError) as e:
        raise ValueError(f"device profile {path}: missing or malformed {e}") from None


def measured(d: dict) -> DeviceProfile:
    f, dr, t = d["forward_ms"], d["draft"], d["target"]
    sources = {"forward_ms": f["source"], "floor_ms": d["floor_ms"]["source"],
               "prefill_ms_per_token": d["prefill_ms_per_token"]["source"],
               "draft": dr["source"]}
    return DeviceProfile(d["name"], d["kind"], d["device"], d["date"], t["shape"], t["dtype"],
                         t["quant"], list(f["chunks"]), list(f["filled"]),
                         [list(map(float, r)) for r in f["ms"]], float(d["floor_ms"]["value"]),
                         float(d["prefill_ms_per_token"]["value"]), int(dr["threads"]),
                         float(dr["token_ms"]),
                         {int(k): float(v) for k, v in dr.get("step_ms", {}).items()}, sources)


def projected(d: dict) -> DeviceProfile:
    """A card's profile from a measured one: each forward scaled by the bandwidth ratio and
    the precision's bytes read over bf16's (the KV read kept), never below the measured
    floor; a prefill token's compute at the card's dense peak; the base's draft figures."""
    base_raw = json.loads((PROFILE_DIR / f"{d['projected_from']}.json").read_text())
    base = measured(base_raw)
    t = d["target"]
    bw = float(d["bandwidth_gbs"]["value"]) / float(base_raw["bandwidth_gbs"]["value"])
    ms = [[x / bw * bytes_ratio(base.shape, t["quant"], filled) for x in row]
          for filled, row in zip(base.filled, base.ms)]
    tflops = float(d["dense_tflops"]["value"])
    token_ms = 2 * PARAMS[base.shape] / (COMPUTE_SHARE * tflops * 1e12) * 1e3
    sources = {"forward_ms": f"projected from {base.name}'s measured table: times "
                             f"{base_raw['bandwidth_gbs']['value']} / "
                             f"{d['bandwidth_gbs']['value']} GB/s ({d['bandwidth_gbs']['source']}) "
                             f"times the bytes a forward reads in {t['quant']} over bf16",
               "floor_ms": base.sources["floor_ms"],
               "prefill_ms_per_token": f"projected: 2 x {PARAMS[base.shape]:.3g} FLOP a token at "
                                       f"{COMPUTE_SHARE:.0%} of {tflops} TFLOPS "
                                       f"({d['dense_tflops']['source']})",
               "draft": f"{base.sources['draft']} ({d.get('draft_source', 'the base profile')})"}
    return DeviceProfile(d["name"], "projected", d["device"], d["date"], base.shape, t["dtype"],
                         t["quant"], base.chunks, base.filled, ms, base.floor_ms, token_ms,
                         base.draft_threads, base.draft_token_ms, dict(base.draft_step_ms), sources)


def bytes_ratio(shape: str, quant: str, filled: int) -> float:
    """Bytes one forward of the shape reads in `quant` over what it reads in bf16."""
    from measure.gpu_bench import LLAMA_8B, read_bytes

    config = {"llama8b": LLAMA_8B}[shape]
    return read_bytes(config, quant, filled) / read_bytes(config, "none", filled)
