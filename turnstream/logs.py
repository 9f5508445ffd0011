"""Logging set-up: readable text lines, or one JSON object per line (``log_format = json``).

A JSON line carries ``ts``, ``level``, ``logger``, ``msg`` and, when the line concerns one
session, ``sid`` (and ``turn``): from ``session_context`` where the code set it, else from the
``sid=... turn=...`` words every per-session log line of turnstream starts with.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time

session_context: contextvars.ContextVar[str] = contextvars.ContextVar("turnstream_sid", default="")
_SID = re.compile(r"\bsid=([0-9A-Za-z_-]+)")
_PATH_SID = re.compile(r"/v1/(?:sessions|responses)/(?:resp_)?([0-9A-Za-z]+)")
_TURN = re.compile(r"\bturn=(\d+)")
TEXT_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        out: dict[str, object] = {"ts": round(record.created, 6), "level": record.levelname, "logger": record.name,
                                  "msg": msg}
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _, status = record.args
            out.update(client=client, method=method, path=path, status=status)
            msg = _first(_PATH_SID, str(path)) and f"sid={_first(_PATH_SID, str(path))}"
        sid = getattr(record, "sid", "") or session_context.get() or _first(_SID, msg)
        if sid:
            out["sid"] = sid
        turn = _first(_TURN, msg)
        if turn:
            out["turn"] = int(turn)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))


def _first(pattern: re.Pattern[str], text: str) -> str:
    m = pattern.search(text)
    return m.group(1) if m else ""


def setup_logging(level: str, fmt: str = "text") -> None:
    """Configure the root logger (stderr) once per process; uvicorn's loggers follow it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs a line per request it makes: not at INFO
    logging.getLogger("httpx").setLevel(logging.WARNING if root.level == logging.INFO else logging.NOTSET)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
