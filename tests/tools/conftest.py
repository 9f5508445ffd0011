"""Fixtures for the tool tests: a local HTTP server on 127.0.0.1 and the test MCP server script."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

MCP_SERVER = Path(__file__).with_name("mcp_server.py")


@dataclass
class LocalServer:
    """What the local HTTP server saw: request counts by path, the last JSON body and headers."""

    url: str
    hits: dict[str, int] = field(default_factory=dict)
    last_body: object = None
    last_headers: dict[str, str] = field(default_factory=dict)


def _handler(state: LocalServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, status: int, body: bytes, kind: str = "application/json", **headers: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = urlsplit(self.path)
            state.hits[path.path] = state.hits.get(path.path, 0) + 1
            state.last_headers = dict(self.headers)
            match path.path:
                case "/hello":
                    self._reply(200, b"hello from the test server", "text/plain; charset=utf-8")
                case "/query":
                    self._reply(200, json.dumps(parse_qs(path.query)).encode())
                case "/big":
                    self._reply(200, b"x" * 200_000, "text/plain")
                case "/binary":
                    self._reply(200, bytes(range(256)), "application/octet-stream")
                case "/redirect-out":
                    self._reply(302, b"", "text/plain", Location="http://elsewhere.invalid/")
                case "/slow":
                    time.sleep(2)
                    self._reply(200, b"late", "text/plain")
                case _:
                    self._reply(404, b'{"error": "no such page"}')

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            state.hits[path] = state.hits.get(path, 0) + 1
            state.last_headers = dict(self.headers)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.last_body = json.loads(body or b"null")
            match path:
                case "/echo":
                    self._reply(200, json.dumps({"received": state.last_body}).encode())
                case "/fail500":
                    self._reply(500, b"internal trouble", "text/plain")
                case "/reject":
                    self._reply(422, b'{"detail": "order not found"}')
                case "/big":
                    self._reply(200, b"y" * 50_000, "text/plain")
                case "/slow":
                    time.sleep(2)
                    self._reply(200, b"late", "text/plain")
                case _:
                    self._reply(404, b"")

    return Handler


@pytest.fixture
def local_http() -> Iterator[LocalServer]:
    """A threaded HTTP server on 127.0.0.1 (only) on a free port."""
    state = LocalServer(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def mcp_command() -> tuple[str, list[str]]:
    """Command and arguments that start the test MCP server over stdio."""
    return sys.executable, [str(MCP_SERVER)]
