"""A prompt is measured against the context of the decoders that will run it (the bundled model
on the native engine, its context cut to ``CONTEXT`` tokens): one that cannot fit is a 400
``context_length_exceeded`` before anything is queued, and one that reaches a decoder anyway
ends its session with a clear ``error`` event instead of a dead-lettered job."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from gateway_harness import MODEL, GwStack, kinds, read_sse, start_stack

from schemas import keys
from turnstream.stack import spawn_kind, wait_for_decoders

CONTEXT = 160
GATEWAY_CONFIG = dict(engine="native", native_args=json.dumps({"max_model_len": CONTEXT, "num_blocks": 64}),
                      served_model_name=MODEL)
LONG = "tell me about the weather in Paris and Oslo " * 40  # far more than CONTEXT tokens
USER = [{"role": "user", "content": "What time is it?"}]


@pytest.fixture(scope="module")
def http(gw: GwStack):
    wait_for_decoders(gw.cfg.redis_url, 1)  # its heartbeat carries the limit
    with httpx.Client(base_url=gw.url, timeout=60) as client:
        yield client


def assert_too_long(resp: httpx.Response, *words: str) -> None:
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert (err["code"], err["param"], err["type"]) == ("context_length_exceeded", "messages", "invalid_request_error")
    assert all(w in err["message"] for w in words), err["message"]


async def until(condition, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met"
        await asyncio.sleep(0.02)


def queued(gw: GwStack) -> tuple[int, int]:
    r = gw.redis()
    return r.xlen(keys.DECODE_JOBS), len(r.keys(keys.session("*")))


def test_a_prompt_longer_than_the_context_is_refused_before_anything_is_queued(gw: GwStack, http: httpx.Client) -> None:
    ended = http.post("/v1/sessions", json={"messages": USER, "max_tokens": 4}).json()["id"]
    read = asyncio.run(read_sse(gw.url, f"/v1/sessions/{ended}/events"))
    assert read[-1]["body"]["type"] == "session.ended"
    oneshot = http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 4}).json()
    before = queued(gw)
    long_chat = {"model": MODEL, "messages": [{"role": "user", "content": LONG}]}
    assert_too_long(http.post("/v1/chat/completions", json=long_chat), f"maximum context length is {CONTEXT} tokens",
                    "your messages resulted in")
    assert_too_long(http.post("/v1/chat/completions", json={**long_chat, "stream": True}))
    assert_too_long(http.post("/v1/sessions", json={"messages": long_chat["messages"]}))
    assert_too_long(http.post(f"/v1/sessions/{ended}/messages", json={"content": LONG}))
    # a session that cannot be continued at all says so first, whatever the message's length
    refused = http.post(f"/v1/sessions/{oneshot['id'].removeprefix('chatcmpl-')}/messages", json={"content": LONG})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_oneshot", refused.text
    short = {"model": MODEL, "messages": USER}
    for field in ("max_tokens", "max_completion_tokens"):
        assert_too_long(http.post("/v1/chat/completions", json={**short, field: CONTEXT}), "in the completion")
    assert_too_long(http.post("/v1/sessions", json={"messages": USER, "max_tokens": CONTEXT}), "in the completion")
    assert queued(gw) == before


def test_without_max_tokens_a_completion_gets_the_room_that_is_left(http: httpx.Client) -> None:
    words = {"model": MODEL, "messages": [{"role": "user", "content": "weather in Paris " * 15}]}
    resp = http.post("/v1/chat/completions", json=words)
    assert resp.status_code == 200, resp.text
    usage = resp.json()["usage"]
    assert CONTEXT // 2 < usage["prompt_tokens"] < CONTEXT
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= CONTEXT


def test_a_function_without_parameters_runs_on_the_model(gw: GwStack, http: httpx.Client) -> None:
    bare = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}
    resp = http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "tools": [bare], "max_tokens": 24})
    assert resp.status_code == 200, resp.text
    sid = http.post("/v1/sessions", json={"messages": USER, "tools": [bare], "max_tokens": 24, "max_turns": 1}).json()["id"]
    events = asyncio.run(read_sse(gw.url, f"/v1/sessions/{sid}/events"))
    assert "error" not in kinds(events) and events[-1]["body"]["reason"] != "error", events[-1]


async def test_a_prompt_that_reaches_a_decoder_anyway_ends_its_session_with_an_error_event(redis_server) -> None:
    stack = start_stack(redis_server.url, ("gateway",), **GATEWAY_CONFIG)  # no decoder yet: no limit known
    try:
        async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
            created = await http.post("/v1/sessions", json={"messages": [{"role": "user", "content": LONG}]})
            assert created.status_code == 201, created.text
            chat = asyncio.ensure_future(http.post("/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": LONG}]}))
            stack.procs += [spawn_kind("decode", stack.cfg), spawn_kind("parser", stack.cfg)]
            events = await read_sse(stack.url, f"/v1/sessions/{created.json()['id']}/events")
            assert_too_long(await chat, "prompt of", "tokens")  # the decoder's own words
        assert kinds(events) == ["error", "session.ended"]
        assert events[0]["body"]["code"] == "context_length_exceeded" and events[1]["body"]["reason"] == "error"
        r = stack.redis()
        assert r.xlen(keys.DECODE_JOBS) == 2
        await until(lambda: r.xpending(keys.DECODE_JOBS, keys.DECODE_GROUP)["pending"] == 0)  # acked (after the end)
        assert r.xlen(keys.DEAD) == 0  # not dead-lettered
    finally:
        stack.stop()


def test_a_conversation_the_models_template_cannot_render_is_a_400(gw: GwStack, http: httpx.Client) -> None:
    before = queued(gw)
    for path, body in (("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user"}]}),
                       ("/v1/sessions", {"messages": [{"role": "user", "content": None}]})):
        resp = http.post(path, json=body)
        assert resp.status_code == 400, resp.text
        err = resp.json()["error"]
        assert (err["code"], err["param"]) == ("invalid_prompt", "messages") and "template" in err["message"], err
    assert queued(gw) == before


async def test_a_short_prompt_is_measured_on_the_loop_a_long_one_or_the_first_in_a_thread(monkeypatch) -> None:
    """The same count either way; only a long prompt, or the first (it loads the tokenizer), pays a thread."""
    import gateway.context as context
    from runtime.config import DEFAULT_MODEL_DIR

    threaded: list[int] = []
    real = asyncio.to_thread

    async def counted(fn, *args):
        threaded.append(context.prompt_chars(args[0], args[1], args[2]))
        return await real(fn, *args)

    monkeypatch.setattr(context.asyncio, "to_thread", counted)
    check = context.ContextCheck(None, str(DEFAULT_MODEL_DIR))  # type: ignore[arg-type]
    long = [{"role": "user", "content": "weather " * 1000}]
    first = await check.count(USER, [])
    assert len(threaded) == 1  # the first loads the tokenizer
    assert await check.count(USER, []) == first and len(threaded) == 1  # on the loop
    n_long = await check.count(long, [])
    assert len(threaded) == 2 and threaded[-1] > context.SHORT_PROMPT_CHARS
    assert n_long == check.meter.count(long, []) and n_long > first
