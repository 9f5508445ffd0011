"""Real agent harnesses for the tests, installed from the npm registry (``npm install``).

``npm_bin(package, version, binary)`` installs ``package@version`` once into
``.cache/npm/<package>@<version>`` (ignored by git) and returns the path of its ``binary``.
Where npm is missing the calling test is skipped, and the reason says so; where npm is there
but the install fails, the test fails (nothing is skipped silently).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "npm"


def npm_bin(package: str, version: str, binary: str) -> Path:
    """The installed ``binary`` of ``package@version`` (skips the test when there is no npm)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: cannot install {package}@{version} from the npm registry")
    prefix = CACHE / f"{package.replace('/', '+')}@{version}"
    path = prefix / "node_modules" / ".bin" / binary
    if not path.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                               f"{package}@{version}"], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not path.exists():
            pytest.fail(f"npm could not install {package}@{version} (rc={proc.returncode}): {proc.stderr[-400:]}")
    return path
