"""Chat templates render as transformers renders them; streaming text never splits a character; stops."""

from __future__ import annotations

import pytest
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_harness import TOOLS, checkpoint
from workers.decode.prompts import SessionPrompts
from runtime.chat_template import ChatTokenizer

CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CONVERSATIONS = [
    ([{"role": "user", "content": "hi"}], None),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Héllo 中文 🙂"}], None),
    ([{"role": "user", "content": "Weather in Paris?"}], TOOLS),
    ([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
      {"role": "tool", "content": '{"temp": 18}'}, {"role": "tool", "content": "ok"}], TOOLS),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}], None),
]
TEXT = st.text(alphabet="abc é中🙂<|>_\n{}\"", max_size=40)


@pytest.fixture(scope="module")
def tokenizers() -> tuple[ChatTokenizer, transformers.PreTrainedTokenizerBase]:
    path = checkpoint("qwen2")  # the class-free fast tokenizer: AutoTokenizer would pick Qwen2Tokenizer,
    # which replaces tokenizer.json's pre-tokenizer with Qwen's own regex
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"),
                                              chat_template=ChatTokenizer.from_dir(path).templates["default"])
    return ChatTokenizer.from_dir(path), hf


@pytest.mark.parametrize("index", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_render_matches_apply_chat_template(tokenizers, index: int, add_generation_prompt: bool) -> None:
    ours, hf = tokenizers
    messages, tools = CONVERSATIONS[index]
    expected = hf.apply_chat_template(messages, tools=tools, tokenize=False,
                                      add_generation_prompt=add_generation_prompt)
    text = ours.render(messages, tools, add_generation_prompt=add_generation_prompt)
    assert text == expected
    assert ours.encode(text) == hf(text, add_special_tokens=False)["input_ids"]


def test_raw_assistant_text_is_rendered_verbatim(tokenizers) -> None:
    ours, _ = tokenizers
    raw = 'Let me check.\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>'
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [CALL], "raw": raw}]
    assert f"<|im_start|>assistant\n{raw}<|im_end|>\n" in ours.render(messages, TOOLS, add_generation_prompt=False)


@settings(max_examples=60, deadline=None)
@given(text=TEXT)
def test_stream_never_splits_characters_and_keeps_special_tokens(tokenizers, text: str) -> None:
    ours, _ = tokenizers
    text = "<|im_start|>" + text + "<|im_end|>"
    stream = ours.stream()
    chunks = [stream.push(i) for i in ours.encode(text)] + [stream.flush()]
    assert all("\ufffd" not in c for c in chunks)
    assert "".join(chunks) == text


@settings(max_examples=80, deadline=None)
@given(text=TEXT, stops=st.lists(st.text(alphabet="abc é中🙂<|>", min_size=1, max_size=4), max_size=3),
       data=st.data())
def test_stop_strings_cut_the_text_before_the_first_stop(tokenizers, text: str, stops: list[str],
                                                          data: st.DataObject) -> None:
    ours, _ = tokenizers
    if text and data.draw(st.booleans()):  # often take a stop string from the text itself
        start = data.draw(st.integers(0, len(text) - 1))
        stops.append(text[start:start + data.draw(st.integers(1, 3))])
    stream = ours.stream(tuple(stops))
    out = "".join(stream.push(i) for i in ours.encode(text)) + stream.flush()
    cut = _first_stop_char_by_char(text, stops)
    assert out == text[:cut]
    assert stream.stopped == (cut < len(text))
    if stream.stopped:  # the string that stopped it is named: one that ends where the reader stopped
        end = min(cut + len(s) for s in stops if text[cut:].startswith(s))
        assert stream.stop_sequence in stops and text[cut:end] == stream.stop_sequence
    else:
        assert stream.stop_sequence is None


def _first_stop_char_by_char(text: str, stops: list[str]) -> int:
    """Where a reader who sees one character at a time stops: at the first stop string completed."""
    for end in range(1, len(text) + 1):
        starts = [end - len(s) for s in stops if text[:end].endswith(s)]
        if starts:
            return min(starts)
    return len(text)


def test_session_prompts_reuse_the_generated_ids(tokenizers) -> None:
    ours, _ = tokenizers
    prompts = SessionPrompts(ours, max_records=2)
    prompt = ours.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    generated = [ours.encode("wea")[0], *ours.encode("ther"), ours.token_id("<|im_end|>")]  # a non-canonical split
    prompts.remember("s", prompt + generated, len(prompt))
    follow = ours.decode(prompt + generated) + "\n<|im_start|>user\nmore<|im_end|>\n"
    ids, reused = prompts.build("s", follow)
    assert ids[:reused] == prompt + generated and ours.decode(ids) == follow
    assert prompts.build("s", "<|im_start|>user\nbye")[1] == 0  # not a continuation: plain tokenisation
    for other in ("x", "y"):
        prompts.remember(other, prompt, len(prompt))
    assert prompts.build("s", follow)[1] == 0  # evicted from the bounded record


def test_a_new_session_that_continues_another_ones_turn_finds_it(tokenizers) -> None:
    """A client-side loop sends the next turn as a new session: its text extends the other one's record."""
    ours, _ = tokenizers
    prompts = SessionPrompts(ours, max_records=4)
    prompt = ours.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    prompts.remember("a", prompt + ours.encode("sure") + [ours.token_id("<|im_end|>")], len(prompt))
    prompts.remember("b", ours.encode("<|im_start|>user\nbye<|im_end|>\n"), 3)
    follow = ours.decode(prompts.ids("a")) + "\n<|im_start|>tool\n42<|im_end|>\n"
    assert prompts.predecessor(follow, ["b", "a"]) == "a"
    assert prompts.predecessor(follow, ["b", "gone"]) is None
    assert prompts.predecessor("<|im_start|>user\nhello", ["a", "b"]) is None


def test_of_sibling_sessions_with_one_long_opening_only_the_one_continued_is_found(tokenizers) -> None:
    """Rollouts of one task share a long opening and part near its end: only the turn the text extends,
    to its last character, is a predecessor."""
    ours, _ = tokenizers
    prompts = SessionPrompts(ours, max_records=8)
    opening = "<|im_start|>system\n" + "Follow the rules. " * 200 + "<|im_end|>\n<|im_start|>user\ngo<|im_end|>\n"
    for name, reply in (("r1", "left"), ("r2", "right"), ("r3", "righter")):
        prompt = ours.encode(opening + "<|im_start|>assistant\n")
        prompts.remember(name, prompt + ours.encode(reply) + [ours.token_id("<|im_end|>")], len(prompt))
    follow = ours.decode(prompts.ids("r2")) + "\n<|im_start|>tool\nok<|im_end|>\n"
    assert prompts.predecessor(follow, ["r1", "r3", "r2"]) == "r2"
    assert prompts.predecessor(follow[:-40], ["r1", "r3"]) is None
