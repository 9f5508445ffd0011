"""deploy/grafana/turnstream.json: a Grafana dashboard with the headline panels, whose queries name only
series that gateway/metrics.py exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEADLINE = {"Time to first token", "Continuation TTFT", "Tokens/s", "Tool dispatch latency", "Pin hit ratio",
            "Queue lengths", "KV usage"}
_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")


def _dashboard() -> dict:
    return json.loads((REPO / "deploy/grafana/turnstream.json").read_text())


def _exported() -> set[str]:
    """Every series name a gateway's /metrics can carry (the families of a fresh registry)."""
    from gateway.metrics import Metrics

    return {f.name + s for f in Metrics("m").registry.collect() for s in _SUFFIXES}


def test_the_dashboard_is_a_grafana_dashboard_with_the_headline_panels() -> None:
    dash = _dashboard()
    assert dash["uid"] == "turnstream" and isinstance(dash["schemaVersion"], int)
    panels = dash["panels"]
    assert HEADLINE <= {p["title"] for p in panels}
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        assert p["type"] == "timeseries" and set(p["gridPos"]) == {"h", "w", "x", "y"}, p["title"]
        assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"]), p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "model"}


def test_every_query_names_a_series_the_gateway_exports() -> None:
    exported = _exported()
    assert "turnstream_decoder_kv_usage" in exported and "turnstream_completion_tokens_total" in exported
    queries = [t["expr"] for p in _dashboard()["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in _dashboard()["templating"]["list"] if "definition" in v]
    named = {m for q in queries for m in re.findall(r"\bturnstream_[a-z0-9_]+", q)}
    assert named and named <= exported, sorted(named - exported)


def test_a_series_with_model_name_is_filtered_by_the_model_variable() -> None:
    from gateway.metrics import Metrics

    labelled = {f.name for f in Metrics("m").registry.collect() if any("model_name" in s.labels for s in f.samples)}
    for p in _dashboard()["panels"]:
        for t in p["targets"]:
            for name in re.findall(r"\bturnstream_[a-z0-9_]+", t["expr"]):
                if re.sub(r"_(total|bucket|sum|count)$", "", name) in labelled:
                    assert 'model_name=~"$model"' in t["expr"], (p["title"], t["expr"])
