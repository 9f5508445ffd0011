"""``make gpu-check`` (scripts/gpu_check.py): safe anywhere, and sized to fit ten minutes on a GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_without_a_cuda_device_it_says_so_and_exits_0(tmp_path: Path) -> None:
    """CUDA hidden, as on a machine without a GPU: no report, no step run, exit 0."""
    report = tmp_path / "report.md"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, str(SCRIPT), "--report", str(report)], cwd=ROOT, env=env, check=False,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("gpu-check: no CUDA GPU on this machine"), run.stdout
    assert not report.exists()


def test_make_gpu_check_runs_the_script() -> None:
    dry = subprocess.run(["make", "-n", "gpu-check"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and "scripts/gpu_check.py" in dry.stdout, dry.stdout + dry.stderr


def test_the_steps_fit_the_budget_and_skip_the_vllm_parts_without_vllm(tmp_path: Path) -> None:
    gpu_check = _module()
    without = gpu_check.plan("python", None, "no vLLM venv", tmp_path, tmp_path)
    assert sum(s.timeout_s for s in without) <= gpu_check.BUDGET_S <= 600
    assert [s.skip for s in without] == ["", "no vLLM venv", "", ""]
    serve, agent = without[2].argv, without[3].argv
    assert serve[serve.index("--servers") + 1] == "turnstream-native"
    assert agent[agent.index("--sides") + 1] == "turnstream-native"
    assert all(s.env.get("TURNSTREAM_DEVICE") == "cuda" for s in without[2:])  # the native engine on the GPU

    vllm = tmp_path / "venv" / "bin" / "python"
    with_vllm = gpu_check.plan("python", vllm, "", tmp_path, tmp_path)
    tests = with_vllm[1].argv
    assert tests[0] == str(vllm) and "vllm" in tests and "tests/decode/test_vllm_engine.py" in tests
    assert "tests/bench/test_bench_vllm_smoke.py" not in tests  # steps 3 and 4 run those benchmarks
    serve = with_vllm[2].argv
    assert serve[serve.index("--servers") + 1] == "turnstream-native,vllm-server,turnstream-vllm"
    assert serve[serve.index("--vllm-venv") + 1] == str(tmp_path / "venv")
