from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from training.values import Values
from training.tokenizer import SPECIAL_TOKENS

VALUE = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéü0123456789 /:_-'()*+.",
                min_size=1, max_size=24).map(str.strip).filter(bool)


def _contains(haystack: list[int], needle: list[int]) -> bool:
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def _contexts(value: str) -> list[str]:
    return [f"What's the weather in {value}?", f"Book {value} at 19:00.",
            json.dumps({"name": "get_weather", "arguments": {"city": value}}, ensure_ascii=False),
            f"It's 21°C and sunny in {value}.", f"Search for {value}!"]


@settings(max_examples=200, deadline=None)
@given(VALUE)
def test_a_value_has_the_same_tokens_in_prose_and_json(tokenizer, value: str) -> None:
    ids = tokenizer.encode(value).ids
    for text in _contexts(value):
        assert _contains(tokenizer.encode(text).ids, ids), (value, text)


def test_pool_values_keep_their_tokens(tokenizer) -> None:
    v = Values("eval", random.Random(1))
    for value in [v.city() for _ in range(80)] + [v.restaurant() for _ in range(30)] + [v.zone() for _ in range(20)] + [
            v.expression() for _ in range(10)]:
        ids = tokenizer.encode(value).ids
        assert all(_contains(tokenizer.encode(t).ids, ids) for t in _contexts(value))


def test_digits_are_single_tokens_and_specials_are_single_ids(tokenizer) -> None:
    assert len(tokenizer.encode("2027-05-01").ids) == 10
    for i, special in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(special) == i
        assert tokenizer.encode(f"x{special}y").ids[1] == i


def test_decode_round_trips(tokenizer) -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "São Paulo"}}\n</tool_call><|im_end|>'
    assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text
