"""The sampling transform of core/sampling.py on the target's device, so a verify round
moves to the CPU only what the verifier needs (tested equal to tests/reference.py's numpy)."""
from __future__ import annotations

import numpy as np
import torch

from core.backends import QRows, SampleCheck, Scores
from core.constraints import Adjustments
from core.logprobs import Logprobs, draft_of
from core.sampling import DRAW, SamplingConfig, mix32, noise_key, uniforms


def device_scores(logits: torch.Tensor, sampling: SamplingConfig, check: SampleCheck | None = None,
                  adjust: Adjustments | None = None, tokens: list[int] = ()) -> Scores:
    """tests/reference.reference_scores on the device: the rows adjusted, then greedy: their argmax
    (n_rows integers); coupled sampling: each row's draw; rejection sampling: p_target of the
    draft tokens, residual and bonus draws; the raw rows' logprobs when asked (`tokens`: what
    score() appended). One download each."""
    rows = apply_adjust(logits, adjust)
    scores = _scores(rows, sampling, check)
    if adjust is not None and adjust.logprobs is not None:
        own = scores.choice if scores.choice is not None else scores.recovered + [scores.bonus]
        scores.logprobs = device_logprobs(logits, draft_of(tokens, len(logits)), own,
                                          adjust.logprobs)
    return scores


def apply_adjust(logits: torch.Tensor, adjust: Adjustments | None) -> torch.Tensor:
    """tests/reference.apply_rows on the device: one upload of the packed masks and one of
    the sparse biases (through pinned memory: `upload`), unpacked and applied there (a new
    tensor; the raw rows stay)."""
    if adjust is None or not adjust.changes_logits:
        return logits
    x = logits.float().clone()
    biased = [(i, r) for i, r in enumerate(adjust.rows) if len(r.bias_ids)]
    if biased:
        _add_bias(x, biased)
    if any(r.allowed is not None for r in adjust.rows):
        x = x.masked_fill(_refused(adjust.rows, x.shape[1], x.device), float("-inf"))
    return x


def _add_bias(x: torch.Tensor, biased: list) -> None:
    rows = np.concatenate([np.full(len(r.bias_ids), i) for i, r in biased])
    ids = np.concatenate([r.bias_ids for _, r in biased])
    values = np.concatenate([r.bias_values for _, r in biased])
    keep = ids < x.shape[1]
    index = upload(torch.from_numpy(np.stack([rows[keep], ids[keep]])), x.device)
    x.index_put_((index[0], index[1]), upload(torch.from_numpy(values[keep]), x.device),
                 accumulate=True)


def _refused(rows: list, vocab: int, device) -> torch.Tensor:
    """(n_rows, vocab) bool of the tokens each row's mask refuses (a row without one: none);
    unpacked on the device by one lookup of each byte's 8 bits."""
    n_words = next(r.allowed for r in rows if r.allowed is not None).shape[0]
    words = np.full((len(rows), n_words), 0xFFFFFFFF, dtype=np.uint32)
    for i, r in enumerate(rows):
        if r.allowed is not None:
            words[i] = r.allowed
    packed = upload(torch.from_numpy(words.view(np.uint8)), device).int()
    refused = _bit_table(device)[packed].reshape(len(rows), -1)
    if refused.shape[1] < vocab:  # tokens past the words are refused
        refused = torch.nn.functional.pad(refused, (0, vocab - refused.shape[1]), value=True)
    return refused[:, :vocab]


_TABLES: dict = {}


def _bit_table(device) -> torch.Tensor:
    """(256, 8) bool: bit j of byte b is clear (the token is refused), little-endian."""
    key = str(device)
    if key not in _TABLES:
        bits = (torch.arange(256)[:, None] >> torch.arange(8)[None, :]) & 1
        _TABLES[key] = (bits == 0).to(device)
    return _TABLES[key]


def device_logprobs(logits: torch.Tensor, draft: list[int], own: list[int], k: int) -> Logprobs:
    """tests/reference.reference_logprobs on the device: one download of the picked values."""
    lsm = torch.log_softmax(logits.float(), dim=-1)
    dev, n = lsm.device, lsm.shape[0]
    picks = torch.tensor([draft + [0] * (n - len(draft)), own], dtype=torch.long, device=dev)
    chosen = lsm.gather(1, picks.T).T
    top, top_ids = torch.topk(lsm, k, dim=-1)
    chosen, top, top_ids = chosen.tolist(), top.tolist(), top_ids.tolist()
    return Logprobs(draft=chosen[0][:len(draft)], own=chosen[1], top_ids=top_ids, top=top)


def _scores(logits: torch.Tensor, sampling: SamplingConfig, check: SampleCheck | None) -> Scores:
    """Greedy: the rows' argmax; coupled: each row's draw; rejection: sampled_scores."""
    if sampling.greedy:
        return Scores(choice=logits.argmax(dim=-1).tolist())
    probs = logits_to_probs(logits, sampling).double()
    if check.coupled:
        return Scores(choice=draw(probs, check.noise.seed, check.base).tolist())
    g, dev = len(check.draft), probs.device
    draft = upload(torch.tensor(check.draft, dtype=torch.long), dev)
    p_draft = probs[:g].gather(1, draft[:, None])[:, 0]
    rows = probs
    if g:
        q = _q_rows(check.q_draft[:g], probs[:g])
        resid = (probs[:g] - q).clamp_min(0.0)
        empty = resid.sum(dim=-1, keepdim=True) <= 0  # p == q up to rounding: draw from p
        rows = torch.cat([torch.where(empty, probs[:g], resid), probs[g:]])
    drawn = draw(rows, check.noise.seed, check.base)
    out = torch.cat([p_draft, drawn.double()]).tolist()
    return Scores(p_draft=out[:g], recovered=[int(t) for t in out[g:2 * g]], bonus=int(out[2 * g]))


def _q_rows(q_draft, like: torch.Tensor) -> torch.Tensor:
    """q_draft on the device; a lookup's one-hot rows (QRows) are set there, not sent."""
    if not isinstance(q_draft, QRows):
        return upload(torch.from_numpy(np.ascontiguousarray(q_draft)), like.device).double()
    q = torch.zeros_like(like)
    dense, rows, hot, tokens = q_draft.parts()
    if dense:
        q[dense] = upload(torch.from_numpy(rows), like.device).double()
    q[hot, tokens] = 1.0
    return q


def upload(host: torch.Tensor, device) -> torch.Tensor:
    """A host tensor on `device`: to cuda through pinned memory (torch's caching host allocator
    reuses the pinned blocks and keeps one until its copy is done), not pageable memory."""
    if torch.device(device).type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def draw(rows: torch.Tensor, seed: int, base: int) -> torch.Tensor:
    """One token per row by core/sampling.Noise.draw's exponential race, row i at position
    base + i: the same integer hash on int64 tensors, so the same tokens."""
    n, vocab = rows.shape
    pos = torch.arange(base, base + n, dtype=torch.long, device=rows.device)
    keys = noise_key(seed, DRAW, pos)
    u = uniforms(keys[:, None], _token_mix(vocab, rows.device)[None, :])
    return (-torch.log(u) / rows).argmin(dim=-1)


_MIX: dict = {}


def _token_mix(vocab: int, device: torch.device) -> torch.Tensor:
    key = (vocab, str(device))
    if key not in _MIX:
        _MIX[key] = mix32(torch.arange(vocab, dtype=torch.long, device=device))
    return _MIX[key]


def logits_to_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Rows of logits -> rows of probabilities (temperature, top-k, top-p), float32."""
    x = logits.float() / cfg.temperature
    if cfg.top_k and cfg.top_k < x.shape[-1]:
        kth = torch.topk(x, cfg.top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if cfg.top_p < 1.0:
        probs = _top_p(probs, cfg.top_p)
    return probs


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p  # keeps the top token
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    out = probs * keep
    return out / out.sum(dim=-1, keepdim=True)
