"""The transformers peers' own model: the target's module tree copied with every weight
shared (no second copy in memory), attention at transformers' SDPA, so `generate` never
runs the static target's span attention nor touches its compiled graphs' guards."""
from __future__ import annotations

import copy

PEER_ATTENTION = "sdpa"
_SPAN_BUFFERS = ("duo_k", "duo_v")  # models/target/attention.py's K/V per layer


def peer_model(target):
    """A model `generate` can run beside `target`: its parameters and buffers are the
    target's own tensors (quantized ones too), its modules and config are its own, and the
    static target's K/V buffers are left out."""
    model = target.model
    memo = {id(t): t for t in (*model.parameters(), *model.buffers())}
    for module in model.modules():  # the K/V buffers are not copied (None), then dropped
        memo.update({id(b): None for name, b in module._buffers.items() if name in _SPAN_BUFFERS})
    twin = copy.deepcopy(model, memo=memo)
    for module in twin.modules():
        for name in _SPAN_BUFFERS:
            module._buffers.pop(name, None)
    twin.set_attn_implementation(PEER_ATTENTION)
    return twin.eval()
