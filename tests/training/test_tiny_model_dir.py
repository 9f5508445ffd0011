"""The shipped models/tiny-agent directory loads in transformers and decodes like our own model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training.backends import TorchBackend, TransformersBackend
from training.template import render
from training.tools_spec import TOOLS


MODEL_DIR = Path(__file__).resolve().parents[2] / "models" / "tiny-agent"
pytestmark = pytest.mark.skipif(not (MODEL_DIR / "config.json").exists(), reason="no model in models/tiny-agent")
transformers = pytest.importorskip("transformers")
DEMO = [{"role": "user", "content": "What's the weather in Paris and book a table for 2 at Chez Nous at 19:00?"}]


def test_directory_is_a_small_qwen2_checkpoint() -> None:
    config = json.loads((MODEL_DIR / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"]
    assert sum(p.stat().st_size for p in MODEL_DIR.iterdir()) <= 20_000_000
    assert {"chat_template", "eos_token", "pad_token"} <= json.loads((MODEL_DIR / "tokenizer_config.json").read_text()).keys()
    assert (MODEL_DIR / "generation_config.json").exists() and (MODEL_DIR / "README.md").exists()


def test_tokenizer_loads_and_renders_like_ours(tokenizer) -> None:
    hf = transformers.PreTrainedTokenizerFast.from_pretrained(str(MODEL_DIR))
    text = hf.apply_chat_template(DEMO, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text == render(DEMO, TOOLS, add_generation_prompt=True)
    assert hf(text, add_special_tokens=False).input_ids == tokenizer.encode(text).ids
    assert hf.eos_token_id == 2 and hf.pad_token_id == 0


def test_transformers_greedy_matches_our_kv_cache_decoder(tokenizer) -> None:
    torch.set_num_threads(1)
    prompt = tokenizer.encode(render(DEMO, TOOLS, add_generation_prompt=True)).ids
    ours = TorchBackend(MODEL_DIR).generate(prompt, 40)
    theirs = TransformersBackend(MODEL_DIR).generate(prompt, 40)
    assert ours == theirs and len(ours) > 0


def test_auto_tokenizer_gives_the_same_ids(tokenizer) -> None:
    """AutoTokenizer picks Qwen2's class (and its pre-tokenizer); the ids must still be ours."""
    from training.datagen import DialogueGen, render_dialogue

    auto = transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR))
    gen = DialogueGen("eval", 1)
    for _ in range(30):
        text = render_dialogue(gen.dialogue())
        assert auto(text, add_special_tokens=False).input_ids == tokenizer.encode(text).ids
