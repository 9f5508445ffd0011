from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # training/ is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from tokenizers import Tokenizer  # noqa: E402

from training.datagen import DialogueGen, render_dialogue
from training.tokenizer import train_tokenizer

MODEL_DIR = ROOT / "models" / "tiny-agent"


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    """The shipped tokenizer when there is one, else a small one trained on the spot."""
    if (MODEL_DIR / "tokenizer.json").exists():
        return Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    gen = DialogueGen("train", 7)
    return train_tokenizer((render_dialogue(gen.dialogue()) for _ in range(1000)), 1024)
