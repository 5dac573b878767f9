"""llama.cpp's own prompt-lookup drafts for the `llamacpp-lookup` peer: llama-cpp-python's
LlamaPromptLookupDecoding (the `draft_model=` of a Llama), counting its rounds and proposals."""
from __future__ import annotations

NGRAM = 2  # longest n-gram matched (transformers' max_matching_ngram_size default, as hf-pld)
DRAFT_TOKENS = 10  # tokens proposed a round (hf-pld's prompt_lookup_num_tokens)


def counting_lookup(max_ngram: int = NGRAM, draft_tokens: int = DRAFT_TOKENS):
    """A LlamaPromptLookupDecoding that counts its calls (one a verify round: llama's generate
    asks it after each evaluation) and the tokens it proposed; `reset()` before a run."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    class Counting(LlamaPromptLookupDecoding):
        rounds = proposed = 0

        def __call__(self, input_ids, /, **kwargs):
            out = super().__call__(input_ids, **kwargs)
            self.rounds += 1
            self.proposed += len(out)
            return out

        def reset(self) -> None:
            self.rounds = self.proposed = 0

    return Counting(max_ngram_size=max_ngram, num_pred_tokens=draft_tokens)


def lookup_counts(draft, emitted: int) -> dict:
    """Rounds, drafted and accepted tokens of one run that emitted `emitted` tokens (eos
    included): the prompt's evaluation gives one, each round its accepted tokens and one of
    the target's own (a run cut by its length or eos mid-round counts what it emitted)."""
    rounds = min(draft.rounds, max(0, emitted - 1))
    return {"rounds": rounds, "drafted": draft.proposed,
            "accepted": max(0, emitted - 1 - rounds)}
