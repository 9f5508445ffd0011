"""The one prompt counter of the gateway (gateway.context): the context check, Messages' count_tokens
and Responses' input_tokens all count with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.context import ContextCheck, tokenizer_unavailable
from runtime.chat_template import PromptError

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-agent"
USER = [{"role": "user", "content": "What's the weather in Paris?"}]


async def test_counts_with_the_models_template_or_says_it_cannot(r, tmp_path: Path) -> None:
    check = ContextCheck(r, str(MODEL))
    bare = await check.count(USER, [])
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object",
                                                                                              "properties": {}}}}
    assert bare is not None and bare > 5 and await check.count(USER, [tool]) > bare
    with pytest.raises(PromptError):  # a conversation the template refuses
        await check.count([{"role": "tool", "content": 5}], [])
    assert await ContextCheck(r, str(tmp_path)).count(USER, []) is None  # no tokenizer here
    err = tokenizer_unavailable("count_tokens")
    assert err.status == 501 and err.code == "tokenizer_unavailable"
