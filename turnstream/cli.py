"""The ``turnstream`` command.

    turnstream up [--redis-url URL]        embedded server + one worker of each type + gateway
    turnstream demo                        up, one agent conversation, down
    turnstream worker {decode,parser,tools} [--pool NAME]
    turnstream gateway
    turnstream chat "message"              create a session and print its live stream
    turnstream tools list                  the tool registry with schemas
    turnstream bench NAME | all            benchmarks (bench/)
    turnstream eval tiny                   held-out evaluation of the bundled model
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from runtime import aio
from runtime.config import Config, ConfigError, load_config

log = logging.getLogger("turnstream")

_CONFIG_FLAGS = {
    "--redis-url": "redis_url", "--queue-url": "queue_url", "--worker-id": "worker_id", "--engine": "engine",
    "--model": "model", "--device": "device", "--tool-format": "tool_format", "--reasoning": "reasoning",
    "--replay-rate": "replay_rate", "--replay-mode": "replay_mode", "--pool": "pool", "--tools-config": "tools_config",
    "--host": "host",
    "--port": "port", "--max-turns": "max_turns", "--dispatch": "dispatch", "--log-level": "log_level",
    "--reclaim-idle-ms": "reclaim_idle_ms", "--replay-script": "replay_script", "--vllm-args": "vllm_args",
    "--api-keys-file": "api_keys_file", "--served-model-name": "served_model_name",
}


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    for flag, dest in _CONFIG_FLAGS.items():
        p.add_argument(flag, dest=dest, default=None)


def _config(args: argparse.Namespace) -> Config:
    given = {dest: getattr(args, dest, None) for dest in _CONFIG_FLAGS.values()}
    return load_config(**{k: v for k, v in given.items() if v is not None})


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname).1s %(name)s: %(message)s")


async def _until_signalled(main: Any) -> None:
    """Run ``main(stop)`` until SIGINT/SIGTERM sets ``stop``."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await main(stop)


def build_engine(cfg: Config) -> Any:
    """The decode engine named by the configuration."""
    if cfg.engine == "replay":
        import json

        from workers.decode.replay import ReplayEngine

        script = json.loads(open(cfg.replay_script).read()) if cfg.replay_script else None
        return ReplayEngine(cfg.model, rate=cfg.replay_rate, script=script, mode=cfg.replay_mode)
    if cfg.engine == "native":
        from workers.decode.native.engine import NativeEngine

        return NativeEngine.from_config(cfg)
    from workers.decode.vllm_engine import VllmEngine

    return VllmEngine.from_config(cfg)


async def _registry(cfg: Config) -> Any:
    """The started tool registry (MCP tools listed) named by the configuration."""
    from workers.tools.config import open_registry

    return await open_registry(cfg.tools_config or None)


async def _worker(kind: str, cfg: Config) -> None:
    from runtime import bus

    r = bus.connect(cfg.redis_url)
    try:
        if kind == "decode":
            from workers.decode.worker import DecodeWorker

            await _until_signalled(DecodeWorker(cfg, build_engine(cfg), r).run)
        elif kind == "parser":
            from runtime.tool_catalog import ToolCatalog
            from runtime.tool_queue import Dispatcher, arq_pool
            from workers.parser.worker import ParserWorker

            arq = await arq_pool(cfg.arq_url)
            try:
                await _until_signalled(ParserWorker(cfg, r, Dispatcher(arq, ToolCatalog(r))).run)
            finally:
                await arq.aclose()
        else:
            from workers.tools.worker import run_tools_worker

            registry = await _registry(cfg)
            await _until_signalled(lambda stop: run_tools_worker(cfg, r, registry, stop))
    finally:
        await r.aclose()


def _gateway(cfg: Config) -> None:
    from gateway.app import serve

    serve(cfg)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="turnstream", description="Serve tool-calling LLM agents on Redis Streams.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("up", "demo", "gateway"):
        p = sub.add_parser(name)
        _add_config_flags(p)
        p.add_argument("--workers", default="decode,parser,tools", help="worker kinds to start (up/demo)")
        p.add_argument("--data-dir", default=None, help="embedded server data dir (append-only file kept there)")
    w = sub.add_parser("worker")
    w.add_argument("kind", choices=["decode", "parser", "tools"])
    _add_config_flags(w)
    c = sub.add_parser("chat")
    c.add_argument("message")
    c.add_argument("--url", default="http://127.0.0.1:8000")
    c.add_argument("--max-turns", type=int, default=8)
    c.add_argument("--api-key", default=None)
    t = sub.add_parser("tools")
    t.add_argument("action", choices=["list"])
    _add_config_flags(t)
    b = sub.add_parser("bench")
    b.add_argument("name")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    e = sub.add_parser("eval")
    e.add_argument("name", choices=["tiny"])
    e.add_argument("rest", nargs=argparse.REMAINDER)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = _config(args) if hasattr(args, "redis_url") else load_config()
        if args.cmd == "demo" and args.log_level is None and "TURNSTREAM_LOG_LEVEL" not in os.environ:
            cfg = cfg.replace(log_level="ERROR")  # the demo's output is the transcript; logs only on errors
    except ConfigError as exc:
        print(f"turnstream: configuration error: {exc}", file=sys.stderr)
        return 2
    _setup_logging(cfg.log_level)
    if args.cmd == "worker":
        aio.run(_worker(args.kind, cfg), cfg.loop)
        return 0
    if args.cmd == "gateway":
        _gateway(cfg)
        return 0
    if args.cmd in ("up", "demo"):
        from turnstream.stack import run_stack

        return run_stack(cfg, args.workers.split(","), demo=args.cmd == "demo", data_dir=args.data_dir)
    if args.cmd == "chat":
        from turnstream.chat import chat

        return asyncio.run(chat(args.url, args.message, max_turns=args.max_turns, api_key=args.api_key))
    if args.cmd == "tools":
        from workers.tools import format_registry

        async def show() -> str:
            registry = await _registry(cfg)
            try:
                return format_registry(registry)
            finally:
                await registry.aclose()

        print(asyncio.run(show()))
        return 0
    if args.cmd == "bench":
        from bench import run_bench

        return run_bench(args.name, args.rest)
    from training.evaluate import main as eval_main

    return eval_main(args.rest)


if __name__ == "__main__":
    sys.exit(main())
