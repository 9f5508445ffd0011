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


def test_a_tokenizer_without_a_backend_decodes_with_its_own() -> None:
    class SlowTokenizer:
        def decode(self, ids: list[int], **kw: object) -> str:
            return "|".join(map(str, ids)) + repr(sorted(kw.items()))

    assert _TextCodec(SlowTokenizer()).decode([1, 2]) == "1|2" + repr(
        [("clean_up_tokenization_spaces", False), ("skip_special_tokens", False)])
