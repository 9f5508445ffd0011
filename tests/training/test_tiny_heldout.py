"""The harder set's phrasings are a separate procedure: never imported by the training side, and no
literal fragment of them occurs in generated training messages."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from training import heldout_phrasings as hp
from training.datagen import DATA_VERSIONS, DialogueGen
from training.harder import harder
from training.values import DEMO_VALUES, split_of

TRAINING = Path(__file__).resolve().parents[2] / "training"
TRAINING_SIDE = ("datagen", "requests", "phrasebook", "broad", "compose", "smalltalk", "answers", "results",
                 "values", "surface", "scripts", "zones", "train", "tokenizer", "template")


def _norm(text: str) -> str:
    return " " + " ".join(re.findall(r"[\w']+|[^\w\s]", text.lower())) + " "


@pytest.fixture(scope="module")
def training_messages() -> str:
    """Every user message of 20,000 training dialogues of each data version (v1 trains the first
    phase, v2 the fine-tuning phase; about 80,000 messages), normalised."""
    gens = [DialogueGen("train", 123, data) for data in DATA_VERSIONS]
    return "\n".join(_norm(x.user) for gen in gens for _ in range(20000) for x in gen.dialogue())


def test_no_training_module_imports_the_eval_only_phrasings() -> None:
    for name in TRAINING_SIDE:
        tree = ast.parse((TRAINING / f"{name}.py").read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert not {i for i in imported if "heldout" in i or "harder" in i or "probes" in i}, name


def test_generating_training_data_loads_no_eval_module() -> None:
    code = ("import sys; from training.train import Batches, dialogue_text; from training.datagen import DialogueGen; "
            "dialogue_text(DialogueGen('train', 0)); "
            "print(sorted(m for m in sys.modules if m.startswith('training.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=TRAINING.parent).stdout
    assert "heldout" not in out and "harder" not in out and "probes" not in out and "evalsets" not in out


def test_no_eval_template_fragment_occurs_in_training_messages(training_messages: str) -> None:
    checked = 0
    for template in hp.all_templates():
        for fragment in hp.fragments(template):
            if len(re.findall(r"[\w']+", fragment)) >= 3:  # three words or more
                checked += 1
                assert _norm(fragment) not in training_messages, (template, fragment)
        skeleton = _norm(re.sub(r"\{\w+\}", "", template))
        assert skeleton.strip() == "" or skeleton not in training_messages, template
    assert checked > 100


def test_most_eval_word_4grams_are_unseen_in_training(training_messages: str) -> None:
    """Not only whole fragments: most 4-word sequences of the eval templates never occur in training."""
    grams = set()
    for template in hp.all_templates():
        for fragment in hp.fragments(template):
            w = _norm(fragment).split()
            grams |= {" ".join(w[i:i + 4]) for i in range(len(w) - 3)}
    seen = sum(f" {g} " in training_messages for g in grams)
    assert len(grams) > 150 and seen / len(grams) < 0.1, (seen, len(grams))


def test_harder_items_use_held_out_values() -> None:
    for item in harder(0, 0.3):
        for call in item.calls:
            for key in ("city", "restaurant", "query"):
                value = call["arguments"].get(key)
                if value is not None and value not in DEMO_VALUES:
                    assert split_of(value) == "eval" or split_of(value.title()) == "eval" or value != value.lower(), value
