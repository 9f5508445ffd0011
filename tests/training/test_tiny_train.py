"""The trainer is deterministic given its seed, resumable, and puts loss on assistant tokens only."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from training import train
from training.datagen import DialogueGen
from training.train import Batches, dialogue_text, encode

TINY = ["--hidden", "32", "--layers", "1", "--ffn", "64", "--heads", "2", "--kv-heads", "1", "--tokens-per-step", "512",
        "--warmup", "2", "--no-compile", "--ckpt-minutes", "1000"]


def test_loss_mask_covers_exactly_the_assistant_turns(tokenizer) -> None:
    text = dialogue_text(DialogueGen("train", 6))
    ids, mask = encode(tokenizer, text)
    learned = tokenizer.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    expected = "".join(part.split("<|im_end|>")[0] + "<|im_end|>" for part in text.split("<|im_start|>assistant\n")[1:])
    assert learned == expected


def test_batches_are_a_function_of_the_step(tokenizer) -> None:
    a, b = Batches(tokenizer, 3, 1024), Batches(tokenizer, 3, 1024)
    for step in (0, 7, 7, 123):
        ia, ma = a.get(step)
        ib, mb = b.get(step)
        assert torch.equal(ia, ib) and torch.equal(ma, mb)
    one, two = a.get(1)[0], a.get(2)[0]
    assert one.shape != two.shape or not torch.equal(one, two)


def _run(out: Path, tokenizer, steps: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "tokenizer.json").exists():
        tokenizer.save(str(out / "tokenizer.json"))
    assert train.main(["--out", str(out), "--steps", str(steps), *TINY]) == 0
    return load_file(str(out / "snapshots" / f"step-{steps:06d}" / "model.safetensors"))


def test_same_seed_same_weights_and_a_resumed_run_equals_an_uninterrupted_one(tmp_path: Path, tokenizer) -> None:
    torch.set_num_threads(1)
    whole = _run(tmp_path / "a", tokenizer, 4)
    again = _run(tmp_path / "b", tokenizer, 4)
    _run(tmp_path / "c", tokenizer, 2)
    resumed = _run(tmp_path / "c", tokenizer, 4)  # the same command with more steps continues from step 2
    assert all(torch.equal(whole[k], again[k]) for k in whole)
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
