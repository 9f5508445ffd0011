"""Logits of the native models match transformers (float32) for prefill, chunked prefill and decode."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from engine_harness import checkpoint
from workers.decode.native.block_manager import BlockManager
from workers.decode.engine import SamplingParams
from workers.decode.errors import ModelLoadError
from workers.decode.native.loader import ModelArgs, inv_freq
from workers.decode.native.model_runner import ModelRunner
from workers.decode.native.models import load_model
from workers.decode.native.scheduler import ScheduledBatch
from workers.decode.native.sequence import Sequence

BLOCK = 4
ATOL = 1e-4

ARCHS = {
    "llama": {},
    "llama-rope-llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    "llama-rope-linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "qwen2": {},
    "qwen2-untied": {"tie_word_embeddings": False},
    "qwen3": {},
}


def _setup(case: str, device: str = "cpu"):
    arch = case.split("-")[0]
    path = checkpoint(arch, **ARCHS[case])
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ours = load_model(path, torch.device(device), torch.float32, max_len=256)
    return hf, ModelRunner(ours, num_blocks=64, block_size=BLOCK), BlockManager(64, BLOCK)


def _seq(tokens: list[int], blocks: BlockManager, rid: str) -> Sequence:
    seq = Sequence(rid=rid, session=rid, token_ids=list(tokens), params=SamplingParams(), block_size=BLOCK,
                   max_total_tokens=256)
    blocks.allocate(seq, blocks.plan(seq))
    return seq


def _step(runner: ModelRunner, blocks: BlockManager, chunks: dict[Sequence, int]) -> dict[Sequence, torch.Tensor]:
    """Run one step; all-row logits per sequence (its chunk's rows), then advance the sequences."""
    batch = ScheduledBatch()
    for seq, n in chunks.items():
        blocks.append(seq)
        batch.add(seq, n)
    input_ids, positions, meta, _, _ = runner.prepare(batch)
    with torch.inference_mode():
        logits = runner.model.logits(runner.model(input_ids, positions, meta))
    out, row = {}, 0
    ordered = [s for s, n in chunks.items() if n == 1] + [s for s, n in chunks.items() if n > 1]
    for seq in ordered:
        out[seq] = logits[row:row + chunks[seq]]
        row += chunks[seq]
    for seq, n in chunks.items():
        seq.num_computed_tokens += n
    return out


def _reference(hf, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf(torch.tensor([tokens])).logits[0].float()


def _prefill_chunks_and_decode(case: str, device: str, atol: float) -> None:
    hf, runner, blocks = _setup(case, device)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, hf.config.vocab_size, (11,), generator=gen).tolist()
    seq = _seq(tokens, blocks, "a")
    got = torch.cat([_step(runner, blocks, {seq: 5})[seq], _step(runner, blocks, {seq: 6})[seq]]).cpu()
    torch.testing.assert_close(got, _reference(hf, tokens), atol=atol, rtol=0)
    for _ in range(7):  # decode across two block boundaries (positions 11..17, block size 4)
        seq.append_token(int(got[-1].argmax()))
        got = _step(runner, blocks, {seq: 1})[seq].cpu()
        torch.testing.assert_close(got[-1], _reference(hf, seq.token_ids)[-1], atol=atol, rtol=0)


@pytest.mark.parametrize("case", list(ARCHS))
def test_prefill_chunks_and_decode_match_transformers(case: str) -> None:
    _prefill_chunks_and_decode(case, "cpu", ATOL)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", ["llama", "qwen2", "qwen3"])
def test_cuda_matches_transformers_on_cpu(case: str) -> None:
    _prefill_chunks_and_decode(case, "cuda", 1e-3)


@pytest.mark.parametrize("case", ["qwen2", "qwen3"])
def test_mixed_batch_of_decodes_and_prefills_matches_transformers(case: str) -> None:
    hf, runner, blocks = _setup(case)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, hf.config.vocab_size, (n,), generator=gen).tolist() for n in (3, 9, 6)]
    a, b, c = (_seq(p, blocks, rid) for p, rid in zip(prompts, "abc"))
    _step(runner, blocks, {a: 3, b: 9})
    for seq in (a, b):
        seq.append_token(7)
    out = _step(runner, blocks, {a: 1, b: 1, c: 6})  # two decodes of different lengths + a prefill
    for seq in (a, b, c):
        torch.testing.assert_close(out[seq][-1], _reference(hf, seq.token_ids)[-1], atol=ATOL, rtol=0)


def test_rope_tables_match_transformers() -> None:
    path = checkpoint("llama", **ARCHS["llama-rope-llama3"])
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    torch.testing.assert_close(inv_freq(ModelArgs.from_dir(path)), hf.model.rotary_emb.inv_freq.float())


def test_sharded_checkpoints_load_and_bad_ones_fail_clearly(tmp_path) -> None:
    path = checkpoint("qwen2")
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    sharded = tmp_path / "sharded"
    hf.save_pretrained(sharded, max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").exists()
    a = load_model(path, torch.device("cpu"), torch.float32, max_len=64)
    b = load_model(sharded, torch.device("cpu"), torch.float32, max_len=64)
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    config = json.loads((sharded / "config.json").read_text())
    (sharded / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ModelLoadError, match="not supported"):
        load_model(sharded, torch.device("cpu"), torch.float32, max_len=64)
    (sharded / "config.json").write_text(json.dumps(config))
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    (sharded / first).unlink()
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != first}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="lacks weights"):
        load_model(sharded, torch.device("cpu"), torch.float32, max_len=64)


def test_rotate_with_folded_signs_is_transformers_rotate_half_exactly() -> None:
    from transformers.models.qwen2.modeling_qwen2 import rotate_half

    from workers.decode.native.bound import rotate
    from workers.decode.native.models import Rotary

    args = ModelArgs.from_dir(checkpoint("qwen2"))
    rotary, positions = Rotary(args, 128), torch.tensor([0, 3, 17, 100])
    half_cos, half_sin = rotary.cos[positions].unsqueeze(1), rotary.sin[positions].unsqueeze(1)
    hf_cos, hf_sin = torch.cat((half_cos, half_cos), dim=-1), torch.cat((half_sin, half_sin), dim=-1)
    x = torch.randn(4, args.num_heads + args.num_kv_heads, args.head_dim)
    assert torch.equal(rotate(x, *rotary.tables(positions, torch.float32)), x * hf_cos + rotate_half(x) * hf_sin)
