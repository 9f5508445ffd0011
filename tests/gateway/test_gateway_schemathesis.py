"""Property-based API testing: schemathesis generates requests (valid and invalid) for every
operation of the gateway's OpenAPI schema, against a stack with real workers (ReplayEngine),
and checks that none gets a 5xx.  Half of the examples target real things -- the served
model, an existing session -- so that valid requests really run.  Bounded to a few examples
per operation so that it stays in ``make test``."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import httpx
import schemathesis
from gateway_harness import MODEL, GwStack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

# a default script that renders for any conversation: a call in turn 0, plain text after
_SCRIPT = Path(tempfile.mkdtemp(prefix="turnstream-st-")) / "script.json"
_SCRIPT.write_text(json.dumps(["Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                               "{\"city\": \"Paris\"}}\n</tool_call>", "Done: {{ user }}"]))
GATEWAY_CONFIG = dict(replay_rate=5000, replay_script=str(_SCRIPT), max_messages=16, max_tools=8,
                      max_tokens_limit=256)
MODEL_ROUTES = ("/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
                "/v1/responses/input_tokens")
EXAMPLES = int(os.environ.get("TURNSTREAM_SCHEMATHESIS_EXAMPLES", "15"))


def _ended_session(url: str) -> str:
    with httpx.Client(base_url=url, timeout=10) as http:
        sid = http.post("/v1/sessions", json={"messages": [{"role": "user", "content": "hi"}], "replay": ["ok"]}
                        ).json()["id"]
        with http.stream("GET", f"/v1/sessions/{sid}/events") as resp:
            for _ in resp.iter_lines():
                pass  # the stream ends with session.ended
    return sid


def _ended_response(url: str) -> str:
    with httpx.Client(base_url=url, timeout=10) as http:
        return http.post("/v1/responses", json={"model": MODEL, "input": "hi", "replay": ["ok"]}).json()["id"]


def _aim(case, sid: str, response_id: str) -> None:
    """Point a generated request at something that exists."""
    if isinstance(case.body, dict) and case.operation.path in MODEL_ROUTES:
        case.body["model"] = MODEL
    if "model_id" in (case.path_parameters or {}):
        case.path_parameters["model_id"] = MODEL
    if "response_id" in (case.path_parameters or {}):
        case.path_parameters["response_id"] = response_id
    if "sid" in (case.path_parameters or {}) and not case.operation.path.endswith("/events"):
        case.path_parameters["sid"] = sid  # (a resumed stream of an ended session would wait: skipped)


def test_no_operation_answers_5xx(gw: GwStack) -> None:
    api = schemathesis.openapi.from_url(gw.url + "/openapi.json")
    sid, response_id = _ended_session(gw.url), _ended_response(gw.url)
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 16
    for op in operations:
        @given(case=op.as_strategy(), real=st.booleans())
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def no_5xx(case, real: bool) -> None:
            if real:
                _aim(case, sid, response_id)
            case.call_and_validate(checks=[not_a_server_error], timeout=30)

        no_5xx()
