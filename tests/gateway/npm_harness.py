"""Real agent harnesses (CLIs published on npm) for the tests that drive them against the gateway.

``npm_bin`` installs ``package@version`` from the npm registry with the ordinary ``npm`` client,
once, under the test virtualenv (``<venv>/npm-harness/``: ``make clean`` removes it), and
returns the path of one of its commands.  Without ``npm`` on PATH the calling test is skipped
with that reason; an install that fails fails the test with npm's output.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

INSTALL_TIMEOUT_S = 600


def npm_bin(package: str, version: str, command: str) -> Path:
    """The path of ``command`` from ``package@version``, installed on first use."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: this test installs {package} from the npm registry "
                    "(install Node.js and npm to run it)")
    root = Path(sys.prefix) / "npm-harness" / f"{package.replace('/', '+')}@{version}"
    exe = root / "node_modules" / ".bin" / command
    if not _runs(exe):
        root.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(root), f"{package}@{version}"],
                              capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        if proc.returncode != 0 or not _runs(exe):
            pytest.fail(f"npm install {package}@{version} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return exe


def _runs(exe: Path) -> bool:
    if not exe.exists():
        return False
    proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    return proc.returncode == 0
