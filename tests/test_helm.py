"""deploy/helm/turnstream: ``helm lint`` and ``helm template`` where helm is installed (no registry this
project uses ships it: the test says so and skips), and checks that need no helm: every value the
templates read is declared and documented in values.yaml, and the probes' paths are the gateway's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

CHART = Path(__file__).resolve().parent.parent / "deploy/helm/turnstream"
CASES = {  # --set values -> what the rendering must show
    "bundled valkey": [],
    "external cluster broker": ["--set", "broker.url=redis+cluster://v1:6379,v2:6379,v3:6379",
                                "--set", "broker.queueUrl=redis://queue:6379/0"],
    "servicemonitor, tools file, cpu decoders": ["--set", "serviceMonitor.enabled=true", "--set", "decode.gpus=0",
                                                 "--set-string", "tools.config=[registry]\nbuiltins = true\n"],
}


def _helm() -> str:
    helm = shutil.which("helm")
    if helm is None:
        pytest.skip("helm is not installed here (no PyPI, npm or Debian package ships the helm binary); "
                    "install it from helm.sh to run helm lint and helm template")
    return helm


def test_helm_lint_passes() -> None:
    res = subprocess.run([_helm(), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_helm_template_renders_every_worker_type(case: str) -> None:
    res = subprocess.run([_helm(), "template", "ts", str(CHART), *CASES[case]], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert set(deployments) == {f"ts-turnstream-{k}" for k in ("gateway", "decode", "parser", "tools")}
    gateway = deployments["ts-turnstream-gateway"]["spec"]["template"]["spec"]["containers"][0]
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    decode = deployments["ts-turnstream-decode"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in decode["env"]}
    gpus = decode["resources"].get("limits", {}).get("nvidia.com/gpu")
    kinds = {d["kind"] for d in docs}
    if case == "bundled valkey":
        assert gpus == 1 and env["TURNSTREAM_REDIS_URL"] == "redis://ts-turnstream-valkey:6379/0"
        assert "StatefulSet" in kinds
    if case == "external cluster broker":
        assert env["TURNSTREAM_REDIS_URL"].startswith("redis+cluster://") and "StatefulSet" not in kinds
        assert env["TURNSTREAM_QUEUE_URL"] == "redis://queue:6379/0"
    if case.startswith("servicemonitor"):
        assert gpus is None and "ServiceMonitor" in kinds and "ConfigMap" in kinds


def test_a_cluster_broker_without_a_queue_server_is_refused() -> None:
    res = subprocess.run([_helm(), "template", "ts", str(CHART), "--set", "broker.url=redis+cluster://v1:6379"],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "broker.queueUrl" in res.stderr


def _leaves(tree: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out.add(path)
        if isinstance(value, dict) and value and not path.endswith(("resources", "env", "labels", "nodeSelector")):
            out |= _leaves(value, path + ".")
    return out


def test_every_value_the_templates_read_is_declared() -> None:
    declared = _leaves(yaml.safe_load((CHART / "values.yaml").read_text()))
    text = "\n".join(p.read_text() for p in (CHART / "templates").iterdir())
    read = set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text))
    assert read and read <= declared, sorted(read - declared)
    kinds = ("decode", "parser", "tools")  # workers.yaml's $w: each worker type's values
    for attr in set(re.findall(r"\$w\.([A-Za-z]+)", text)):
        having = {k for k in kinds if f"{k}.{attr}" in declared}
        unguarded = ("replicas", "resources", "env", "nodeSelector", "tolerations")  # read for every kind
        assert having == set(kinds) if attr in unguarded else having, attr


def test_every_value_is_documented() -> None:
    """Each key in values.yaml has a comment line just above it (`helm show values` is the reference)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        key = re.match(r"^( *)([A-Za-z][A-Za-z0-9]*):", line)
        if key and not lines[i - 1].strip().startswith("#"):
            pytest.fail(f"values.yaml line {i + 1} ({line.strip()}) has no comment above it")


def test_the_probe_paths_are_the_gateways() -> None:
    from gateway.app import create_app
    from runtime.config import load_config

    paths = {getattr(r, "path", None) for r in create_app(load_config()).routes}
    assert {"/healthz", "/readyz", "/metrics"} <= paths
    templates = (CHART / "templates/gateway.yaml").read_text() + (CHART / "templates/servicemonitor.yaml").read_text()
    for path in ("/healthz", "/readyz", "/metrics"):
        assert f"path: {path}" in templates
