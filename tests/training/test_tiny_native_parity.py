"""The native engine and transformers give the same greedy turns for the shipped tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.evalsets import indist

MODEL_DIR = Path(__file__).resolve().parents[2] / "models" / "tiny-agent"
pytestmark = pytest.mark.skipif(not (MODEL_DIR / "config.json").exists(), reason="no model in models/tiny-agent")
pytest.importorskip("workers.decode.native.engine")
pytest.importorskip("transformers")


def test_native_greedy_equals_transformers_and_ours() -> None:
    from training.backends import NativeBackend, TorchBackend, TransformersBackend

    torch.set_num_threads(1)
    items = indist(seed=3, scale=0.04)  # every category once or more; answers include tool turns
    native = NativeBackend(MODEL_DIR)
    try:
        got = [native.complete(i.messages, 80) for i in items]
    finally:
        native.close()
    hf, ours = TransformersBackend(MODEL_DIR), TorchBackend(MODEL_DIR)
    assert got == [hf.complete(i.messages, 80) for i in items]
    assert got == [ours.complete(i.messages, 80) for i in items]
