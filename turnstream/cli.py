"""The ``turnstream`` command.

    turnstream up [--redis-url URL]        embedded server + one worker of each type + gateway
    turnstream demo                        up, one agent conversation, down
    turnstream worker {decode,parser,tools}
    turnstream gateway
    turnstream status                      the live processes of each kind, with their load
    turnstream healthcheck                 is this container's process alive (Docker HEALTHCHECK)
    turnstream chat "message"              create a session and print its live stream
    turnstream tools list                  the tool registry with schemas
    turnstream bench NAME | all            benchmarks (bench/)
    turnstream eval tiny                   held-out evaluation of the bundled model

Each command offers the configuration flags of the processes it runs (``runtime.config``: one
table of keys with their help and defaults); every flag also reads ``TURNSTREAM_<KEY>``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from dataclasses import MISSING, Field
from typing import Any

from runtime import aio
from runtime.config import ENV_PREFIX, KINDS, Config, ConfigError, load_config, unknown_env
from runtime.model_source import ModelSourceError
from turnstream import __version__
from turnstream.logs import setup_logging

log = logging.getLogger("turnstream")

# which processes each command runs (its flags are theirs)
_COMMAND_KINDS = {"up": KINDS, "demo": KINDS, "gateway": ("gateway",), "decode": ("decode",),
                  "parser": ("parser",), "tools": ("tools",)}


def _default(f: Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


def _add_config_flags(p: argparse.ArgumentParser, kinds: tuple[str, ...]) -> None:
    group = p.add_argument_group("configuration (flag > TURNSTREAM_<KEY> > default)")
    for f in Config.keys_for(*kinds):
        default = _default(f)
        shown = ",".join(default) if isinstance(default, tuple) else default
        group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, metavar=f.name.upper(),
                           help=f"{f.metadata['help']} (default: {shown!r})")


def _config(args: argparse.Namespace, kinds: tuple[str, ...]) -> Config:
    given = {f.name: getattr(args, f.name, None) for f in Config.keys_for(*kinds)}
    return load_config(settle=False, **{k: v for k, v in given.items() if v is not None})


def _check_stack(args: argparse.Namespace, cfg: Config) -> None:
    """``up``/``demo``: ``StackError`` (a ``ConfigError``) where the stack cannot start, before its model is fetched."""
    if args.cmd in ("up", "demo"):
        from turnstream.stack import check

        check(cfg, args.workers.split(","))


def _with_model(args: argparse.Namespace, cfg: Config) -> Config:
    """A hub-id model fetched into the hub cache (weights only where this process decodes), then ``auto``
    tool format and reasoning settled from its files and logged with the reason.  ``up`` does both once,
    before its children start: they get the local directory and the settled names."""
    from runtime import model_info, model_source

    if args.cmd in ("up", "demo"):
        weights = "decode" in args.workers.split(",") and cfg.engine != "replay"
    elif args.cmd == "worker" and args.kind in ("decode", "parser"):
        weights = args.kind == "decode" and cfg.engine != "replay"
    elif args.cmd == "gateway":
        weights = False
    else:
        return cfg
    cfg, lines = model_info.settle(model_source.resolve(cfg, weights))
    model_info.report(lines)
    return cfg


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

            worker = DecodeWorker(cfg, build_engine(cfg), r)
            if cfg.gateway_in_decoder == "on":
                from turnstream.colocated import serve_with_gateway

                await serve_with_gateway(cfg, worker.run)
            else:
                await _until_signalled(worker.run)
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


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="turnstream", description="Serve tool-calling LLM agents on Redis Streams.")
    ap.add_argument("--version", action="version", version=f"turnstream {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, what in (("up", "the whole stack on this machine until Ctrl-C"),
                       ("demo", "the stack, one agent conversation, then stop")):
        p = sub.add_parser(name, help=what, description=what)
        p.add_argument("--workers", default="decode,parser,tools", help="worker kinds to start (default: %(default)s)")
        p.add_argument("--data-dir", default=None, help="embedded server data dir, append-only file kept there "
                                                        "(default: a temporary dir)")
        p.add_argument("--ready-timeout", type=float, default=120.0,
                       help="seconds the processes may take to come up, engine loaded (default: %(default)s; "
                            "vLLM on a busy CPU can take minutes)")
        _add_config_flags(p, KINDS)
    g = sub.add_parser("gateway", help="the HTTP/WebSocket gateway", description="the HTTP/WebSocket gateway")
    _add_config_flags(g, ("gateway",))
    w = sub.add_parser("worker", help="one worker process", description="one worker process")
    kinds = w.add_subparsers(dest="kind", required=True, metavar="KIND")
    for kind, what in (("decode", "a decode worker (the engine)"), ("parser", "a parser worker"),
                       ("tools", "a tool worker of one pool")):
        _add_config_flags(kinds.add_parser(kind, help=what, description=what), (kind,))
    sub.add_parser("healthcheck", help="exit 0 when this container's turnstream process is alive (Docker)")
    st = sub.add_parser("status", help="the live processes of each kind, with their load")
    st.add_argument("--redis-url", dest="redis_url", default=None, metavar="REDIS_URL",
                    help="the deployment's Redis (default: TURNSTREAM_REDIS_URL)")
    c = sub.add_parser("chat", help="create a session and print its live stream")
    c.add_argument("message")
    c.add_argument("--url", default="http://127.0.0.1:8000", help="the gateway (default: %(default)s)")
    c.add_argument("--max-turns", type=int, default=8, help="turns allowed (default: %(default)s)")
    c.add_argument("--api-key", default=None, help="API key (default: none, for an open gateway)")
    t = sub.add_parser("tools", help="the tool registry with schemas")
    t.add_argument("action", choices=["list"])
    _add_config_flags(t, ("tools",))
    b = sub.add_parser("bench", help="benchmarks: turnstream bench NAME --help")
    b.add_argument("name")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    e = sub.add_parser("eval", help="held-out evaluation of the bundled model")
    e.add_argument("name", choices=["tiny"])
    e.add_argument("rest", nargs=argparse.REMAINDER)
    return ap


def _kinds(args: argparse.Namespace) -> tuple[str, ...]:
    if args.cmd == "worker":
        return (args.kind,)
    return _COMMAND_KINDS.get(args.cmd, ("tools",) if args.cmd == "tools" else ())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = _config(args, _kinds(args)) if _kinds(args) else load_config(redis_url=getattr(args, "redis_url", None))
        if args.cmd == "demo" and args.log_level is None and f"{ENV_PREFIX}LOG_LEVEL" not in os.environ:
            cfg = cfg.replace(log_level="ERROR")  # the demo's output is the transcript; logs only on errors
        _check_stack(args, cfg)
    except ConfigError as exc:  # a StackError too
        print(f"turnstream: configuration error: {exc}", file=sys.stderr)
        return 2
    setup_logging(cfg.log_level, cfg.log_format)
    for var in unknown_env():
        log.warning("unknown configuration variable %s is ignored", var)
    try:
        cfg = _with_model(args, cfg)
    except ModelSourceError as exc:
        print(f"turnstream: {exc}", file=sys.stderr)
        return 2
    return _run(args, cfg)


def _run(args: argparse.Namespace, cfg: Config) -> int:
    if args.cmd == "worker":
        aio.run(_worker(args.kind, cfg), cfg.loop, cfg.gc_young)
        return 0
    if args.cmd == "gateway":
        from turnstream.gateways import serve

        return serve(cfg)
    if args.cmd in ("up", "demo"):
        from turnstream.stack import run_stack

        return run_stack(cfg, args.workers.split(","), demo=args.cmd == "demo", data_dir=args.data_dir,
                         ready_timeout_s=args.ready_timeout)
    if args.cmd == "healthcheck":
        from turnstream.healthcheck import healthcheck

        return healthcheck(cfg)
    if args.cmd == "status":
        from turnstream.status import status

        return asyncio.run(status(cfg.redis_url))
    if args.cmd == "chat":
        from turnstream.chat import chat

        return asyncio.run(chat(args.url, args.message, max_turns=args.max_turns, api_key=args.api_key))
    if args.cmd == "tools":
        return _tools_list(cfg)
    if args.cmd == "bench":
        from bench import run_bench

        return run_bench(args.name, args.rest)
    from training.evaluate import main as eval_main

    return eval_main(args.rest)


def _tools_list(cfg: Config) -> int:
    from workers.tools import format_registry

    async def show() -> str:
        registry = await _registry(cfg)
        try:
            return format_registry(registry)
        finally:
            await registry.aclose()

    print(asyncio.run(show()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
