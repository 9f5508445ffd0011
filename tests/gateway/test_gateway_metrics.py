"""Metrics as serving users expect: ``model_name`` on the series, requests by API, status and finish
reason, end-to-end latency, and each event counted once however many gateway replicas relay it."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator

import httpx
import pytest
import websockets
from gateway_harness import MODEL, GwStack, event_bytes
from prometheus_client.parser import text_string_to_metric_families

from gateway.frames import make_frame
from gateway.metrics import Metrics, api_of
from schemas import keys
from schemas.events import ContentDelta, SessionEnded, TurnEnded, TurnStarted
from turnstream.embedded import free_port
from turnstream.processes import stop_all
from turnstream.stack import spawn_kind, wait_ready

GATEWAY_CONFIG = {"replay_rate": 100}  # a turn of 60 tokens streams for ~0.6 s: long enough to follow
_IDS = itertools.count(1)


# ---------------------------------------------------------------------------- the rule, on plain frames
def _frame(sid: str, turn: int, seq: int, body: object):
    return make_frame(f"{next(_IDS)}-0", event_bytes(sid, turn, seq, body))


def _run(sid: str, turn: int, *, continuation: bool, tokens: int, reason: str | None = "stop") -> list:
    frames = [_frame(sid, turn, 1, TurnStarted(prompt_tokens=10, continuation=continuation)),
              _frame(sid, turn, 2, ContentDelta(text="hi")),
              _frame(sid, turn, 3, TurnEnded(finish_reason="stop", completion_tokens=tokens))]
    return frames + ([_frame(sid, turn, 4, SessionEnded(reason=reason))] if reason else [])


def _count(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, {"model_name": m.model_name, **labels}) or 0.0


def test_only_the_gateway_that_accepted_a_run_counts_it() -> None:
    a, b = Metrics("m"), Metrics("m")
    a.accepted("s1")
    for f in _run("s1", 0, continuation=False, tokens=7, reason=None) + _run("s1", 1, continuation=True, tokens=5):
        a.observe("s1", f)
        b.observe("s1", f)  # b relays the same session to a client of its own
    assert _count(a, "turnstream_completion_tokens_total") == 12 and _count(b, "turnstream_completion_tokens_total") == 0
    assert _count(a, "turnstream_request_finished_total", api="other", finish_reason="stop") == 1
    assert _count(a, "turnstream_e2e_request_latency_seconds_count", api="other") == 1
    assert _count(a, "turnstream_time_to_first_token_seconds_count") == 1
    assert b.registry.get_sample_value("turnstream_time_to_first_token_seconds_count", {"model_name": "m"}) == 0
    # a new user turn of the same session, accepted by b: b counts it from now on, a no longer
    b.accepted("s1")
    for f in _run("s1", 2, continuation=False, tokens=3):
        a.observe("s1", f)
        b.observe("s1", f)
    assert _count(a, "turnstream_completion_tokens_total") == 12 and _count(b, "turnstream_completion_tokens_total") == 3


def test_a_run_whose_first_events_went_by_before_the_watch_is_still_counted() -> None:
    """The sessions API: the client subscribes after the create; its turn.started may be history."""
    m = Metrics("m")
    m.accepted("s2")
    for f in _run("s2", 0, continuation=False, tokens=4)[1:]:
        m.observe("s2", f)
    assert _count(m, "turnstream_completion_tokens_total") == 4


def test_a_decoders_residency_is_scraped_from_its_heartbeat() -> None:
    """The vLLM engine's residency counters and every engine's pinned sessions, per live decoder; a
    heartbeat without them (the native engine has no residency rule) exports none."""
    m = Metrics("m")
    m.beats = {"d1": {"kind": "decode", "worker": "d1", "pinned_sessions": 3, "pins_lapsed": 2,
                      "admission_waits": 7, "refreshes": 1},
               "d2": {"kind": "decode", "worker": "d2", "pinned_sessions": 0}}
    got = {(s.name, s.labels.get("worker")): s.value
           for fam in text_string_to_metric_families(m.render().decode()) for s in fam.samples}
    assert got[("turnstream_decoder_pinned_sessions", "d1")] == 3 and got[("turnstream_decoder_pinned_sessions", "d2")] == 0
    assert got[("turnstream_decoder_pins_lapsed_total", "d1")] == 2
    assert got[("turnstream_decoder_admission_waits_total", "d1")] == 7
    assert got[("turnstream_decoder_kv_refreshes_total", "d1")] == 1
    assert ("turnstream_decoder_pins_lapsed_total", "d2") not in got


def test_the_api_label_is_a_fixed_set() -> None:
    assert api_of("/v1/chat/completions") == "chat_completions"
    assert api_of("/v1/messages/count_tokens") == "messages"
    assert api_of("/v1/sessions/abc/ws") == "sessions"
    assert api_of("/v1/anything-a-client-sends") == "other"
    assert api_of("/metrics") is None and api_of("/healthz") is None


# ---------------------------------------------------------------------------- two real gateways
@pytest.fixture(scope="module")
def second_gateway(gw: GwStack) -> Iterator[str]:
    """Another gateway replica on the same broker."""
    cfg = gw.cfg.replace(port=free_port())
    proc = spawn_kind("gateway", cfg)
    url = f"http://{cfg.host}:{cfg.port}"
    try:
        wait_ready(url, [("gateway", proc)])
        yield url
    finally:
        stop_all([proc])


def _samples(url: str) -> dict[tuple[str, frozenset], float]:
    text = httpx.get(url + "/metrics").text
    return {(smp.name, frozenset(smp.labels.items())): smp.value
            for family in text_string_to_metric_families(text) for smp in family.samples}


def _value(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset({"model_name": MODEL, **labels}.items())), 0.0)


async def _follow_new_session(gw: GwStack, url: str) -> list[dict]:
    """The events of the next session that becomes active, read on the gateway at ``url``."""
    r = gw.redis()

    def records() -> set[bytes]:  # a chat completion's session is not in the active index: find its record
        return set(r.scan_iter(match=keys.session("*"), _type="hash"))

    before = records()
    while not (new := records() - before):
        await asyncio.sleep(0.01)
    sid = new.pop().decode().split("{", 1)[1].rstrip("}")  # ts:s:{sid}
    async with websockets.connect(url.replace("http", "ws", 1) + f"/v1/sessions/{sid}/ws") as ws:
        return [json.loads(frame) async for frame in ws]


async def test_two_gateways_relaying_one_session_count_its_tokens_once(gw: GwStack, second_gateway: str) -> None:
    a0, b0 = _samples(gw.url), _samples(second_gateway)
    follower = asyncio.create_task(_follow_new_session(gw, second_gateway))
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
        answer = (await http.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "talk"}], "replay": ["word " * 60]})).json()
    seen_on_b = await asyncio.wait_for(follower, 30)
    assert any(e["body"]["type"] == "turn.ended" for e in seen_on_b)  # b relayed the session's tokens too
    a, b = _samples(gw.url), _samples(second_gateway)

    def added(after: dict, before: dict, name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert added(a, a0, "turnstream_completion_tokens_total") == answer["usage"]["completion_tokens"] > 0
    assert added(b, b0, "turnstream_completion_tokens_total") == 0
    finished = dict(api="chat_completions", finish_reason="stop")
    assert added(a, a0, "turnstream_request_finished_total", **finished) == 1
    assert added(b, b0, "turnstream_request_finished_total", **finished) == 0
    assert added(a, a0, "turnstream_e2e_request_latency_seconds_count", api="chat_completions") == 1
    assert added(a, a0, "turnstream_time_to_first_token_seconds_count") == 1
    assert added(b, b0, "turnstream_time_to_first_token_seconds_count") == 0
    assert added(a, a0, "turnstream_requests_total", api="chat_completions", status="200") == 1


def test_requests_are_counted_by_api_and_status(gw: GwStack) -> None:
    before = _samples(gw.url)
    resp = httpx.post(gw.url + "/v1/chat/completions", json={"model": MODEL, "messages": "not a list"})
    assert resp.status_code == 400, resp.text
    assert httpx.get(gw.url + "/v1/sessions/nope").status_code == 404
    after = _samples(gw.url)
    for api, status in (("chat_completions", "400"), ("sessions", "404")):
        name = "turnstream_requests_total"
        assert _value(after, name, api=api, status=status) == _value(before, name, api=api, status=status) + 1
