"""``make gpu-check``: the whole pipeline on a GPU, one command, one report, within ten minutes.

    python scripts/gpu_check.py [--report PATH] [--vllm-venv DIR] [--budget-s 570]

On a machine where torch sees a CUDA device it runs, each step under its own timeout inside one budget:

1. the native engine's CUDA tests (``tests/decode/test_engine_models.py -k cuda``: logits on CUDA equal to
   transformers on CPU, Llama, Qwen2 and Qwen3);
2. the vLLM backend's tests (``-m vllm``, as ``make test-vllm`` runs them) with the vLLM venv's python;
3. ``turnstream bench serve`` at a small size: the bundled model through the native engine on the GPU
   (``TURNSTREAM_DEVICE=cuda``), and through vLLM's own server and ``turnstream up --engine vllm``;
4. ``turnstream bench agent --small``: the same agent tasks through the same sides, in tight memory.

Steps 2-4 use the vLLM venv (``--vllm-venv``, default ``.venv-vllm``: it must hold a GPU build of vLLM);
without one, step 2 and the vLLM sides are skipped, saying why.  Everything goes to one markdown report
(default ``bench/results/gpu-check.md``; the benchmarks' own files beside it, under ``gpu-check/``), so
that a GPU lent for a few minutes leaves a record.  Exit 0 when every step that ran passed, 1 otherwise.

Without a CUDA device (no torch, a CPU build, no driver, ``CUDA_VISIBLE_DEVICES=``) it says so and exits 0:
``make gpu-check`` is safe to run anywhere.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: bench.common from this checkout
DEFAULT_REPORT = REPO / "bench" / "results" / "gpu-check.md"
DEFAULT_VLLM_VENV = REPO / ".venv-vllm"
BUDGET_S = 570  # the whole check fits in ten minutes, report and start-up included
TAIL_LINES = 25
# both vLLM servers of a benchmark run at once on the one GPU; the native engine's pool is small
VLLM_ARGS = {"enforce_eager": True, "gpu_memory_utilization": 0.3}
CUDA_TESTS = ["tests/decode/test_engine_models.py", "-k", "cuda"]
# the bench smoke tests are left out: steps 3 and 4 run those benchmarks on the GPU themselves
VLLM_TEST_SKIP = {"tests/bench/test_bench_vllm_smoke.py"}


def cuda_device() -> tuple[str | None, str]:
    """The name of the first CUDA device, or None and why there is none."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device"
    props = torch.cuda.get_device_properties(0)
    return (f"{props.name} ({props.total_memory / 2**30:.0f} GiB), torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}"), ""


def vllm_python(venv: Path) -> tuple[Path | None, str]:
    """The vLLM venv's python, or None and why it cannot be used (the benchmarks' rule, then an import)."""
    from bench.common import vllm_python as bench_vllm_python

    python, why = bench_vllm_python(venv)
    if python is None:
        return None, why
    probe = subprocess.run([str(python), "-c", "import vllm"], check=False, capture_output=True, text=True, timeout=180)
    if probe.returncode != 0:
        return None, f"{python} cannot import vllm: {' '.join(probe.stderr.strip().splitlines()[-1:])}"
    return python, ""


@dataclass
class Step:
    """One command of the check, with its share of the budget."""

    name: str
    argv: list[str]
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    skip: str = ""  # why it does not run here
    outputs: list[Path] = field(default_factory=list)  # markdown files it writes, copied into the report


def plan(python: str, vllm: Path | None, why_no_vllm: str, out: Path, tmp: Path) -> list[Step]:
    """The steps, in order; their timeouts add up to at most ``BUDGET_S``."""
    vllm_env = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "VLLM_CACHE_ROOT": str(tmp / "vllm"), "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
                "XDG_CACHE_HOME": str(tmp / "cache")}
    vllm_tests = sorted(set(glob.glob("tests/test_*vllm*.py", root_dir=REPO))
                        | set(glob.glob("tests/*/test_*vllm*.py", root_dir=REPO)) - VLLM_TEST_SKIP)
    pytest = ["-m", "pytest", "-q", "-p", "no:cacheprovider"]
    bench = [python, "-m", "turnstream.cli", "bench"]
    vllm_flags = ["--vllm-args", json.dumps(VLLM_ARGS)] + (["--vllm-venv", str(vllm.parent.parent)] if vllm else [])
    serve_servers = "turnstream-native" + (",vllm-server,turnstream-vllm" if vllm else "")
    agent_sides = "turnstream-native" + (",vllm-client,turnstream-vllm" if vllm else "")
    on_gpu = {"TURNSTREAM_DEVICE": "cuda", **vllm_env}
    return [
        Step("native engine CUDA tests", [python, *pytest, *CUDA_TESTS], 60),
        Step("vLLM backend tests", [str(vllm), *pytest, "-m", "vllm", *vllm_tests] if vllm else [], 210,
             vllm_env, skip=why_no_vllm),
        Step("bench serve (small, GPU)", [*bench, "serve", "--out", str(out / "serve"), "--servers", serve_servers,
                                          "--concurrency", "1,4", "--requests", "2", "--min-requests", "1",
                                          "--rounds", "1", "--max-tokens", "64", "--start-timeout", "90", *vllm_flags],
             140, on_gpu, outputs=[out / "serve" / "serve.md"]),
        Step("bench agent (small, GPU)", [*bench, "agent", "--out", str(out / "agent"), "--small", "--tasks", "4",
                                          "--min-tasks", "2", "--concurrency", "1,4", "--memory", "tight",
                                          "--sides", agent_sides, "--vllm-block-size", "16",
                                          "--start-timeout", "90", *vllm_flags],
             160, on_gpu, outputs=[out / "agent" / "agent.md"]),
    ]


@dataclass
class Result:
    step: Step
    status: str  # passed | failed | timed out | skipped
    seconds: float = 0.0
    output: str = ""


def run(step: Step, timeout_s: float) -> Result:
    """Run ``step`` in its own process group; on timeout the whole group (servers included) is killed."""
    if step.skip:
        return Result(step, "skipped", output=step.skip)
    t0 = time.monotonic()
    proc = subprocess.Popen(step.argv, cwd=REPO, env={**os.environ, **step.env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        status = "passed" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        status = f"timed out ({timeout_s:.0f} s)"
    return Result(step, status, time.monotonic() - t0, output)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:160].replace("|", "\\|") if lines else ""


def report(results: list[Result], device: str, vllm_note: str, seconds: float) -> str:
    lines = [f"# gpu-check, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"- device: {device}", f"- host: {platform.node()}, Python {platform.python_version()}",
             f"- vLLM: {vllm_note}", f"- whole check: {seconds:.0f} s (budget {BUDGET_S} s)", "",
             "| step | result | seconds | last line |", "|---|---|---|---|"]
    lines += [f"| {r.step.name} | {r.status} | {r.seconds:.0f} | {last_line(r.output)} |" for r in results]
    for r in results:
        lines += ["", f"## {r.step.name}: {r.status}", ""]
        if r.step.skip:
            lines.append(f"Skipped: {r.step.skip}")
            continue
        lines += ["```sh", " ".join(r.step.argv), "```", "", "```",
                  *r.output.splitlines()[-TAIL_LINES:], "```"]
        for md in r.step.outputs:
            if md.exists():
                lines += ["", md.read_text().strip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", type=Path, default=DEFAULT_REPORT, help="the markdown report (default: %(default)s)")
    ap.add_argument("--vllm-venv", type=Path, default=DEFAULT_VLLM_VENV, help="a venv with a GPU build of vllm")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="seconds for all steps together")
    args = ap.parse_args(argv)

    device, why = cuda_device()
    if device is None:
        print(f"gpu-check: no CUDA GPU on this machine ({why}); nothing to check.")
        return 0
    t0 = time.monotonic()
    vllm, why_no_vllm = vllm_python(args.vllm_venv)
    vllm_note = str(vllm) if vllm else f"not used: {why_no_vllm}"
    print(f"gpu-check: {device}; vLLM: {vllm_note}", flush=True)
    out = args.report.parent / args.report.stem
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for step in plan(sys.executable, vllm, why_no_vllm, out, Path(tmp)):
            left = args.budget_s - (time.monotonic() - t0)
            if not step.skip and left < 10:
                step.skip = "no time left in the budget"
            print(f"gpu-check: {step.name} ...", flush=True)
            result = run(step, min(step.timeout_s, left))
            print(f"gpu-check: {step.name}: {result.status} ({result.seconds:.0f} s)", flush=True)
            results.append(result)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(report(results, device, vllm_note, time.monotonic() - t0))
    print(f"gpu-check: report in {args.report}")
    return 0 if all(r.status in ("passed", "skipped") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
