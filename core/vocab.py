"""Vocabulary translation between draft and target token ids (identity when they share one)."""
from __future__ import annotations

import numpy as np


class IdentityVocab:
    """Draft and target share a tokenizer: ids pass through; q rows are padded or cut to the
    target's vocabulary size (padded embedding rows never get probability)."""
    same = True

    def __init__(self, draft_size: int, target_size: int):
        self.draft_size, self.target_size = draft_size, target_size
        self.draft_mask = None if draft_size <= target_size else _first(draft_size, target_size)

    def to_draft(self, target_ids: list[int]) -> list[int]:
        return target_ids

    def to_target(self, draft_ids: list[int]) -> list[int]:
        return draft_ids

    def q_to_target(self, q: np.ndarray) -> np.ndarray:
        if q.shape[-1] == self.target_size:
            return q
        out = np.zeros(q.shape[:-1] + (self.target_size,), dtype=q.dtype)
        n = min(self.target_size, q.shape[-1])
        out[..., :n] = q[..., :n]
        return out

    def stats(self) -> dict:
        return {"same_tokenizer": True, "draft_size": self.draft_size,
                "target_size": self.target_size}


def _first(size: int, n: int) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    mask[:n] = True
    return mask
