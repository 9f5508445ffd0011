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
