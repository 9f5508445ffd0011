"""Hub ids resolved through huggingface_hub into its cache: offline against a cache laid out as the hub
lays it out (tests/hub_cache.py), and the hub's refusals (missing, gated, bad revision) from a stand-in
hub on loopback answering as the hub does (status and ``X-Error-Code``)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from huggingface_hub import constants

from runtime.config import load_config
from runtime.model_source import ModelSourceError, local_dir, resolve
from tests.hub_cache import TINY_AGENT, add_snapshot

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache, offline (huggingface_hub reads its environment once, at import)."""
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home


def test_a_local_directory_is_used_as_it_is(hf_home: Path) -> None:
    assert local_dir(str(TINY_AGENT), weights=True) == TINY_AGENT
    assert not (hf_home / "hub").exists()


def test_a_cached_hub_id_resolves_offline_to_its_snapshot(hf_home: Path) -> None:
    snapshot = add_snapshot(hf_home, "acme/tiny-agent")
    path = local_dir("acme/tiny-agent", weights=True)
    assert path == snapshot
    assert (path / "model.safetensors").read_bytes() == (TINY_AGENT / "model.safetensors").read_bytes()


def test_a_revision_picks_its_snapshot(hf_home: Path) -> None:
    main = add_snapshot(hf_home, "acme/tiny-agent")
    v1 = add_snapshot(hf_home, "acme/tiny-agent", files=("config.json", "tokenizer.json", "tokenizer_config.json"),
                      revision="v1")
    assert local_dir("acme/tiny-agent", "v1") == v1 != main
    assert local_dir("acme/tiny-agent", main.name, weights=True) == main  # a commit hash
    with pytest.raises(ModelSourceError, match="no \\*.safetensors weights"):
        local_dir("acme/tiny-agent", "v1", weights=True)
    with pytest.raises(ModelSourceError, match="'acme/tiny-agent@v2' is not in the hub cache"):
        local_dir("acme/tiny-agent", "v2")


def test_an_id_not_in_the_cache_while_offline_is_one_clear_error(hf_home: Path) -> None:
    with pytest.raises(ModelSourceError) as err:
        local_dir("acme/never-downloaded")
    message = str(err.value)
    assert "'acme/never-downloaded' is not in the hub cache" in message and "HF_HUB_OFFLINE" in message
    assert "\n" not in message


def test_a_name_that_is_neither_a_directory_nor_an_id(hf_home: Path) -> None:
    with pytest.raises(ModelSourceError, match="neither a local directory nor a hub id"):
        local_dir("models/no/such-dir")


def test_resolve_keeps_the_hub_id_as_the_served_name(hf_home: Path) -> None:
    snapshot = add_snapshot(hf_home, "acme/tiny-agent")
    cfg = resolve(load_config(model="acme/tiny-agent"), weights=False)
    assert (cfg.model, cfg.served_model_name) == (str(snapshot), "acme/tiny-agent")
    named = resolve(load_config(model="acme/tiny-agent", served_model_name="tiny"), weights=False)
    assert named.served_model_name == "tiny"
    local = load_config(model=str(TINY_AGENT))
    assert resolve(local, weights=True) is local


def test_the_cli_exits_2_with_one_line_for_an_uncached_id(hf_home: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "turnstream.cli", "worker", "parser", "--model", "acme/absent",
                          "--redis-url", "redis://127.0.0.1:1"], capture_output=True, text=True, timeout=60,
                         cwd=REPO)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"turnstream: model: 'acme/absent' is not in the hub cache ({hf_home / 'hub'}) and HF_HUB_OFFLINE is set: "
        "download it once online, or unset HF_HUB_OFFLINE"]


class _StandInHub(BaseHTTPRequestHandler):
    """Answers model-info requests as the hub does for a missing repo, a gated one and a bad revision."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.startswith("/api/models/acme/gated"):
            self._refuse(403, "GatedRepo", "Access to model acme/gated is restricted.")
        elif self.path.startswith("/api/models/acme/tiny-agent/revision/nope"):
            self._refuse(404, "RevisionNotFound", "Invalid rev id: nope")
        else:
            self._refuse(404, "RepoNotFound", "Repository not found")

    def _refuse(self, status: int, code: str, message: str) -> None:
        body = ('{"error": "%s"}' % message).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in_hub(hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandInHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    try:
        yield url
    finally:
        server.shutdown()


@pytest.mark.parametrize(("model", "revision", "expected"), [
    ("acme/gated", "", "'acme/gated' is gated: accept its terms on https://huggingface.co/acme/gated and set HF_TOKEN"),
    ("acme/missing", "", "'acme/missing' is not a local directory, nor a hub repository this token can see"),
    ("acme/tiny-agent", "nope", "'acme/tiny-agent' has no revision 'nope'"),
])
def test_the_hubs_refusals_are_one_clear_line(stand_in_hub: str, model: str, revision: str, expected: str) -> None:
    with pytest.raises(ModelSourceError) as err:
        local_dir(model, revision)
    assert expected in str(err.value) and "\n" not in str(err.value)
