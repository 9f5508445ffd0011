"""How the vLLM tests run vLLM on a small CPU machine (see shared research: vllm_cpu_feasibility)."""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 32  # vLLM's CPU attention needs a multiple of 32
# Eager (no torch.compile: starts in ~15 s instead of ~45 s), fp32, a small KV pool.
ENGINE_ARGS = {"enforce_eager": True, "block_size": BLOCK_SIZE, "dtype": "float32", "max_model_len": 2048,
               "max_num_seqs": 16}


def set_vllm_env(cache_dir: Path) -> None:
    """Never download; engine core in-process with its worker; 1 GiB of KV; caches under ``cache_dir``."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(cache_dir / "vllm"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / "inductor"))
