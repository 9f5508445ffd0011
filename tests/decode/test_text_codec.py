"""The vLLM engine's text codec for remembered turns: a fast tokenizer decodes and encodes through its
backend, with the same text and ids as transformers' decode and encode."""

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

    class CachedQwen2Tokenizer(base):  # type: ignore[misc, valid-type]  # vLLM's cache, without the pool
        def encode(self, *args: object, **kw: object) -> object:
            return super().encode(*args, **kw)

    assert _TextCodec(CachedQwen2Tokenizer.from_pretrained(str(DEFAULT_MODEL_DIR)))._encoder is not None


def test_a_tokenizer_without_a_backend_decodes_with_its_own() -> None:
    class MistralLike:  # not transformers': it takes no clean_up_tokenization_spaces
        def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
            return "|".join(map(str, ids)) + f" {skip_special_tokens}"

    assert _TextCodec(MistralLike()).decode([1, 2]) == "1|2 False"


def test_the_backend_encodes_as_transformers_does() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR))
    codec = _TextCodec(tok)
    assert codec._encoder is not None
    chat = tok.apply_chat_template([{"role": "user", "content": "Qu'il fait beau à Paris — 21 °C? 🌞 ok"},
                                    {"role": "assistant", "content": "<tool_call>\n{\"name\": \"f\"}\n</tool_call>"}],
                                   tokenize=False, add_generation_prompt=True)
    rng = random.Random(5)
    pieces = [chat, "", " ", "\n\n", "  leading spaces", "<|im_end|>", "a<|im_start|>b", "日本語のテキスト", "x" * 3000]
    pieces += [chat[rng.randint(0, len(chat)):][:rng.randint(0, 80)] for _ in range(60)]  # cuts anywhere
    pieces += [tok.decode([rng.randrange(len(tok)) for _ in range(30)]) for _ in range(30)]  # special tokens among them
    for text in pieces:
        assert codec.encode(text) == tok.encode(text, add_special_tokens=False), text

    from tokenizers.processors import TemplateProcessing

    bos = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR))  # one that adds a token unless told not to
    bos.backend_tokenizer.post_processor = TemplateProcessing(single="<|im_start|> $A", special_tokens=[
        ("<|im_start|>", bos.convert_tokens_to_ids("<|im_start|>"))])
    assert bos.encode("hello") != bos.encode("hello", add_special_tokens=False)
    assert _TextCodec(bos).encode("hello") == bos.encode("hello", add_special_tokens=False)


def test_a_tokenizer_that_encodes_in_python_or_is_set_otherwise_keeps_its_encode() -> None:
    """A subclass that changes what is encoded, and a backend set to split special tokens or to
    truncate, which transformers' encode would reset first: transformers' encode, not the backend's."""
    from transformers import AutoTokenizer

    base = type(AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR)))

    class Lowering(base):  # type: ignore[misc, valid-type]
        def _encode_plus(self, text: object, *args: object, **kw: object) -> object:
            return super()._encode_plus(str(text).lower(), *args, **kw)

    lowering = Lowering.from_pretrained(str(DEFAULT_MODEL_DIR))
    codec = _TextCodec(lowering)
    assert codec._encoder is None and codec._backend is not None  # it still decodes through the backend
    assert codec.encode("HELLO") == lowering.encode("hello", add_special_tokens=False)

    split = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR), split_special_tokens=True)  # backend set alike
    assert _TextCodec(split).encode("a<|im_end|>") == split.encode("a<|im_end|>", add_special_tokens=False)
    assert len(split.encode("<|im_end|>", add_special_tokens=False)) > 1
    told = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR))
    told.split_special_tokens = True  # the backend not set yet: transformers' encode sets it first
    assert _TextCodec(told)._encoder is None
    assert _TextCodec(told).encode("<|im_end|>") == split.encode("<|im_end|>", add_special_tokens=False)

    truncating = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR))
    truncating.backend_tokenizer.enable_truncation(4)
    assert _TextCodec(truncating)._encoder is None
