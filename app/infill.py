"""Fill-in-the-middle prompts: the target's FIM tokens read from its tokenizer's vocabulary, and
a prefix and suffix laid out as llama-server's /infill does (prefix, suffix, then middle:
the model writes what goes between). A model without FIM tokens is a 400 naming the field."""
from __future__ import annotations

from app.openai_io import ApiError
from models.prompt_text import ContextOverflow

# (prefix, suffix, middle) token names, as the families that train with them spell them
FIM_NAMES = [("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder, SmolLM(1)
             ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5(-Coder), CodeGemma
             ("▁<PRE>", "▁<SUF>", "▁<MID>")]  # CodeLlama


def fim_tokens(tokenizer) -> tuple[int, int, int] | None:
    """(prefix, suffix, middle) ids of the first family whose three tokens are all in the
    vocabulary; None when the model has none."""
    vocab = tokenizer.get_vocab()
    for names in FIM_NAMES:
        if all(n in vocab for n in names):
            return tuple(vocab[n] for n in names)
    return None


def infill_ids(pair, prefix: str, suffix: str, prompt: str = "",
               field: str = "suffix") -> list[int]:
    """[bos] <prefix> prefix <suffix> suffix <middle> prompt, in the target's ids; 400 naming
    `field` when the target has no FIM tokens."""
    tok = pair.tokenizer
    fim = fim_tokens(tok)
    if fim is None:
        raise ApiError(400, f"{field}: fill-in-the-middle needs a model with FIM tokens "
                            f"(<fim_prefix>, <fim_suffix>, <fim_middle>); the target of "
                            f"'{pair.spec.name}' has none", param=field,
                       code="unsupported_parameter")

    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"] if text else []
    head = tok("")["input_ids"]  # the tokenizer's own start (bos), if it adds one
    out = head + [fim[0]] + ids(prefix) + [fim[1]] + ids(suffix) + [fim[2]] + ids(prompt)
    limit = pair.target.n_ctx - 1
    if len(out) > limit:
        raise ContextOverflow(f"the infill prompt is {len(out)} tokens; the context window "
                              f"({pair.target.n_ctx} tokens) allows {limit}")
    return out


def text_ids(pair, text: str, suffix: str | None) -> list[int]:
    """A /v1/completions prompt's ids: the text as it is, or with `suffix` a FIM prompt."""
    return pair.prompt_ids(text, raw=True) if suffix is None else infill_ids(pair, text, suffix)
