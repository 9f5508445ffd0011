"""The trainer is deterministic given its seed, resumable, and puts loss on assistant tokens only."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from runtime import cpu
from training import lineage, train
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
    # each snapshot says how it was trained; the card's reproduction line reads it
    state = (tmp_path / "a" / "snapshots" / "step-000004" / "train_state.txt").read_text().splitlines()
    assert state[0] == "step 4" and "threads 1" in state and "schedules 0:4" in state
    assert any(line in ("precision fp32", "precision bf16") for line in state)
    resumed_state = (tmp_path / "c" / "snapshots" / "step-000004" / "train_state.txt").read_text().splitlines()
    assert "schedules 0:2,2:4" in resumed_state


def test_a_second_phase_starts_from_the_given_model_on_its_own_data(tmp_path: Path, tokenizer) -> None:
    torch.set_num_threads(1)
    first = _run(tmp_path / "a", tokenizer, 2)
    start = tmp_path / "a" / "snapshots" / "step-000002"
    # lr 0: the second phase's weights are exactly the model it started from (no fresh initialisation)
    assert train.main(["--out", str(tmp_path / "b"), "--steps", "2", "--init-from", str(start), "--data", "v2",
                       *TINY, "--lr", "0"]) == 0
    second = load_file(str(tmp_path / "b" / "snapshots" / "step-000002" / "model.safetensors"))
    assert all(torch.equal(first[k], second[k]) for k in first)
    state = (tmp_path / "b" / "snapshots" / "step-000002" / "train_state.txt").read_text().splitlines()
    assert "data v2" in state and f"init_from {start}" in state and "lr 0.0" in state and "warmup 2" in state
    assert any(line.startswith("machine ") and line.endswith(", no GPU") for line in state)
    # the starting model's own facts travel with the run, for the card
    assert lineage.ancestors(tmp_path / "b") == [lineage.parse_state(start / "train_state.txt")]
    assert (tmp_path / "b" / "tokenizer.json").read_text() == (start / "tokenizer.json").read_text()


def test_batches_draw_the_data_version_asked_for(tokenizer) -> None:
    v1, v2 = Batches(tokenizer, 3, 1024), Batches(tokenizer, 3, 1024, "v2")
    assert v1.data == "v1" and v2.data == "v2"
    assert any(not torch.equal(v1.get(s)[0], v2.get(s)[0]) if v1.get(s)[0].shape == v2.get(s)[0].shape else True
               for s in range(3))


def test_a_longer_steps_on_resume_is_recorded_as_a_new_schedule() -> None:
    assert train.resumed_schedules([[0, 6000]], 3000, 6000) == [(0, 6000)]  # rerun after an interruption
    assert train.resumed_schedules([[0, 6000]], 6000, 11500) == [(0, 6000), (6000, 11500)]  # warm restart
    assert train.resumed_schedules([[0, 6000], [6000, 11500]], 9000, 11500) == [(0, 6000), (6000, 11500)]
    assert train.resumed_schedules(None, 3000, 6000) == [(0, 6000)]  # a checkpoint from before schedules
    assert train.schedules_text([(0, 6000), (6000, 11500)]) == "0:6000,6000:11500"


def test_bf16_only_where_the_cpu_computes_it_natively(tmp_path: Path) -> None:
    """On an AVX2-only CPU a bf16 matmul is emulated (~9x slower than fp32 here): auto picks fp32 there."""
    avx2 = {"fpu", "sse4_2", "avx", "avx2", "fma"}
    assert train.compute_dtype("auto", avx2) is torch.float32
    assert train.compute_dtype("auto", avx2 | {"avx512f", "avx512_bf16"}) is torch.bfloat16
    assert train.compute_dtype("auto", avx2 | {"amx_bf16", "amx_tile"}) is torch.bfloat16
    assert train.compute_dtype("bf16", avx2) is torch.bfloat16 and train.compute_dtype("fp32", {"amx_bf16"}) is torch.float32
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu.cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu.native_bf16(cpu.cpu_flags(info)) == "AVX-512 BF16"
    assert cpu.cpu_flags(tmp_path / "absent") == set()


def test_the_fp32_loss_is_the_plain_forward_pass(tokenizer) -> None:
    torch.manual_seed(0)
    model = train.Qwen2(train.ModelConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=1,
                                          intermediate_size=64, num_attention_heads=2, num_key_value_heads=1))
    ids, mask = Batches(tokenizer, 1, 512).get(0)
    loss = train.loss_fn(model, ids, mask, torch.float32)
    target = ids[:, 1:].masked_fill(~mask[:, 1:], -100)
    logits = model(ids[:, :-1])
    assert logits.dtype is torch.float32
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
    assert torch.equal(loss, want)
    assert not torch.equal(train.loss_fn(model, ids, mask, torch.bfloat16), want)  # bf16 autocast differs


def test_quiet_history_answers_get_no_loss(tokenizer) -> None:
    """A quiet (terse, history-only) answer is in the text the model reads but not in what it learns;
    every other assistant turn still is."""
    from training.datagen import learned_turns, render_dialogue
    gen = DialogueGen("train", 8, "v5")
    d = next(d for d in (gen.dialogue() for _ in range(2000)) if any(x.quiet for x in d))
    text = render_dialogue(d)
    ids, mask = encode(tokenizer, text, learned_turns(d))
    learned = tokenizer.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    everything = tokenizer.decode([i for i, m in zip(ids, encode(tokenizer, text)[1]) if m], skip_special_tokens=False)
    quiet = [x.answer + "<|im_end|>" for x in d if x.quiet]
    assert quiet and all(q in everything and q not in learned for q in quiet)
    assert len(everything) - len(learned) == sum(map(len, quiet))
    with pytest.raises(ValueError, match="learned flags"):  # flags that do not line up are refused
        encode(tokenizer, text, learned_turns(d)[:-1])