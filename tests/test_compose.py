"""compose.yaml is a valid Compose file (validated by whichever validator this machine has)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _validators() -> list[list[str]]:
    found = []
    if shutil.which("docker-compose"):
        found.append(["docker-compose", "-f", str(REPO / "compose.yaml"), "config", "-q"])
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            found.append(["docker", "compose", "-f", str(REPO / "compose.yaml"), "config", "-q"])
    return found


def test_compose_file_validates() -> None:
    validators = _validators()
    if not validators:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed here")
    for cmd in validators:
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        assert res.returncode == 0, f"{' '.join(cmd)}: {res.stderr}"


def test_compose_runs_every_worker_type() -> None:
    import yaml

    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    assert {"redis", "gateway", "decode", "parser", "tools"} <= set(services)
    assert services["parser"]["command"] == ["worker", "parser"]


def test_images_and_defaults_a_user_gets() -> None:
    """Decoders get the engine image and the native engine on the bundled model; the rest no torch;
    gateways can be scaled; images run as a non-root user with a HEALTHCHECK; deps come before sources."""
    import yaml

    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    assert services["decode"]["build"]["target"] == "engine"
    assert services["decode"]["environment"]["TURNSTREAM_ENGINE"] == "${TURNSTREAM_ENGINE:-native}"
    assert {services[k]["build"]["target"] for k in ("gateway", "parser", "tools")} == {"app"}
    assert services["gateway"]["ports"] == ["8000-8009:8000"]  # room for --scale gateway=N
    docker = (REPO / "Dockerfile").read_text()
    for target in ("app", "engine"):
        stage = docker.split(f" AS {target}\n", 1)[1].split("\nFROM ", 1)[0]
        assert "USER turnstream" in stage and "HEALTHCHECK" in stage and '"healthcheck"' in stage
    assert docker.index("pip install . &&") < docker.index("COPY runtime")  # the dependency layer first
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv*"} <= set(ignored)


def test_compose_cluster_profile_runs_replicas_of_every_worker_on_a_cluster() -> None:
    import yaml

    from runtime import cluster
    from runtime.config import load_config

    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    nodes = [s for name, s in services.items() if name.startswith("valkey-") and name != "valkey-init"]
    assert len(nodes) == 6 and all("--cluster-enabled" in s["command"] and s["profiles"] == ["cluster"] for s in nodes)
    assert "--cluster-replicas 1" in services["valkey-init"]["command"][0]
    for kind in ("gateway", "decode", "parser", "tools"):
        svc = services[f"c-{kind}"]
        env = svc["environment"]
        assert svc["profiles"] == ["cluster"] and svc["deploy"]["replicas"] >= 2
        assert svc["depends_on"]["valkey-init"]["condition"] == "service_completed_successfully"
        cfg = load_config(redis_url=env["TURNSTREAM_REDIS_URL"], queue_url=env["TURNSTREAM_QUEUE_URL"])
        assert cluster.is_cluster_url(cfg.redis_url) and not cluster.is_cluster_url(cfg.arq_url)


@pytest.mark.parametrize("profile", ["cluster", "gpu", "observability"])
def test_compose_profile_validates(profile: str) -> None:
    validators = _validators()
    if not validators:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed here")
    for cmd in validators:
        cmd = [*cmd[:-2], "--profile", profile, *cmd[-2:]]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        assert res.returncode == 0, f"{' '.join(cmd)}: {res.stderr}"


def _services() -> dict:
    import yaml

    return yaml.safe_load((REPO / "compose.yaml").read_text())["services"]


def test_gpu_profile_decodes_on_a_gpu_behind_one_load_balancer() -> None:
    """The decoder reserves an NVIDIA GPU and runs the CUDA engine image (vllm); every process that reads
    the model gets TURNSTREAM_MODEL and the shared HF cache; nginx fronts the gateways, streams unbuffered."""
    from dataclasses import fields

    from runtime.config import Config

    services = _services()
    gpu = {name: s for name, s in services.items() if s.get("profiles") == ["gpu"]}
    assert {"g-gateway", "g-decode", "g-parser", "g-tools", "lb"} <= set(gpu)
    decode = gpu["g-decode"]
    assert decode["build"]["target"] == "engine" and decode["build"]["args"] == {"ENGINE": "cuda"}
    assert decode["environment"]["TURNSTREAM_ENGINE"] == "${TURNSTREAM_ENGINE:-vllm}"
    [device] = decode["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    readers = set(next(f for f in fields(Config) if f.name == "model").metadata["kinds"])
    assert readers == {"decode", "gateway", "parser"}
    for name, svc in gpu.items():
        if name == "lb":
            continue
        kind = svc["command"][1] if svc["command"][0] == "worker" else svc["command"][0]
        if kind in readers:
            assert svc["environment"]["TURNSTREAM_MODEL"].startswith("${TURNSTREAM_MODEL:"), name
            assert svc["environment"]["HF_HOME"] == "/hf-cache" and "hf-cache:/hf-cache" in svc["volumes"], name
    assert gpu["lb"]["image"].startswith("nginx:") and gpu["lb"]["ports"] == ["8000:8000"]
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf:ro" in gpu["lb"]["volumes"]
    nginx = (REPO / "deploy/nginx.conf").read_text()
    for line in ("server g-gateway:8000", "proxy_buffering off;", "proxy_set_header Upgrade $http_upgrade;"):
        assert line in nginx
    docker = (REPO / "Dockerfile").read_text()
    assert 'if [ "$ENGINE" = cuda ]; then pip install "vllm==' in docker


def test_prometheus_scrapes_every_gateway_of_every_profile() -> None:
    """Workers have no HTTP port: their series come through the gateways, so every gateway service is a target."""
    import yaml

    services = _services()
    gateways = {name for name, s in services.items() if s.get("command", [None])[0] == "gateway"}
    assert gateways == {"gateway", "c-gateway", "g-gateway"}
    scrape = yaml.safe_load((REPO / "deploy/prometheus.yml").read_text())["scrape_configs"]
    targets = {name for job in scrape for sd in job["dns_sd_configs"] if sd["port"] == 8000 for name in sd["names"]}
    assert gateways <= targets
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["observability"]
        for volume in services[name]["volumes"]:
            if volume.startswith("./"):
                assert (REPO / volume.split(":")[0]).exists(), volume
