"""The vLLM engine's text codec for remembered turns: a fast tokenizer decodes through its backend,
with the same text as transformers' decode."""

from __future__ import annotations

import random

from runtime.config import DEFAULT_MODEL_DIR
from workers.decode.vllm_engine import _TextCodec


def test_the_backend_decodes_as_transformers_does() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR))
    codec = _TextCodec(tok)
    assert codec._backend is not None
    text = tok.apply_chat_template([{"role": "user", "content": "Qu'il fait beau à Paris — 21 °C? 🌞 ok"}],
                                   tokenize=False, add_generation_prompt=True)
    ids = codec.encode(text)
    rng = random.Random(3)
    cases = [ids, ids[:1], [], ids[:-1], *(ids[:rng.randint(1, len(ids))] for _ in range(50))]  # cuts mid-character too
    cases += [[rng.randrange(len(tok)) for _ in range(40)] for _ in range(50)]  # special tokens among them
    for case in cases:
        assert codec.decode(case) == tok.decode(case, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def test_a_tokenizer_that_decodes_in_python_too_keeps_its_decode() -> None:
    """A subclass that changes the decoded text (as CodeGen's cuts it at a pattern), and vLLM's wrappers
    around a plain fast tokenizer, which do not."""
    from transformers import AutoTokenizer

    base = type(AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR)))

    class Cutting(base):  # type: ignore[misc, valid-type]
        def _decode(self, *args: object, **kw: object) -> str:
            return super()._decode(*args, **kw)[:3]

    cutting = Cutting.from_pretrained(str(DEFAULT_MODEL_DIR))
    assert _TextCodec(cutting)._backend is None and len(_TextCodec(cutting).decode(list(range(40)))) == 3

    class TokenizerPoolQwen2Tokenizer(base):  # type: ignore[misc, valid-type]  # as vLLM names its wrapper
        def decode(self, *args: object, **kw: object) -> str:
            return super().decode(*args, **kw)

    assert _TextCodec(TokenizerPoolQwen2Tokenizer.from_pretrained(str(DEFAULT_MODEL_DIR)))._backend is not None


def test_a_tokenizer_without_a_backend_decodes_with_its_own() -> None:
    class MistralLike:  # not transformers': it takes no clean_up_tokenization_spaces
        def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
            return "|".join(map(str, ids)) + f" {skip_special_tokens}"

    assert _TextCodec(MistralLike()).decode([1, 2]) == "1|2 False"
