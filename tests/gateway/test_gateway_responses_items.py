"""``gateway.responses.items``: input items -> the session's chat messages, and the stored item objects."""

from __future__ import annotations

import pydantic
import pytest
from openai.types.responses import ResponseItem

from gateway.errors import ApiError
from gateway.responses.body import CreateResponse
from gateway.responses.items import item_objects, merge_system, normalize, to_messages

ITEMS = pydantic.TypeAdapter(ResponseItem)


def items(raw: list[dict] | str) -> list:
    return normalize(CreateResponse(model="m", input=raw).input)


def test_a_turn_of_text_reasoning_and_calls_is_one_assistant_message() -> None:
    got = to_messages(items([
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather "}, {"type": "input_text", "text": "?"}]},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "check it"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "message", "role": "assistant", "content": "And the time."},
        {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "14:05"}]},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "files", "name": "read", "arguments": "{}",
         "output": "text"},
        {"type": "mcp_list_tools", "server_label": "files", "tools": []},
    ]))
    assert got == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather ?"},
        {"role": "assistant", "content": "On it.And the time.", "reasoning_content": "check it", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny", "name": "get_weather"},
        {"role": "tool", "tool_call_id": "c2", "content": "14:05", "name": "get_time"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "mcp_1", "type": "function", "function": {"name": "files__read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "mcp_1", "content": "text", "name": "files__read"}]


def test_a_string_input_is_one_user_message_and_leading_system_messages_merge() -> None:
    assert to_messages(items("hi")) == [{"role": "user", "content": "hi"}]
    msgs = [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "u"},
            {"role": "system", "content": "late"}]
    assert merge_system(msgs) == [{"role": "system", "content": "a\n\nb"}, *msgs[2:]]


@pytest.mark.parametrize(("raw", "param"), [
    ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}], "input[0].content[0].type"),
    ([{"role": "user", "content": "x"}, {"type": "item_reference", "id": "msg_1"}], "input[1].type"),
    ([{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file", "file_id": "f"}]}],
     "input[0].output[0].type"),
])
def test_unsupported_items_and_parts_are_named(raw: list[dict], param: str) -> None:
    with pytest.raises(ApiError) as err:
        to_messages(items(raw))
    assert err.value.status == 400 and err.value.param == param


def test_stored_input_items_are_openai_items_with_ids() -> None:
    raw = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello", "id": "msg_given"},
           {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
           {"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    objs = item_objects(items(raw), "sid1")
    assert [o["id"] for o in objs] == ["msg_sid1_in0", "msg_given", "fc_sid1_in2", "fco_sid1_in3"]
    for obj in objs:
        ITEMS.validate_python(obj)
