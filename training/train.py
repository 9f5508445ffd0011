"""Train the tiny tool-calling Qwen2 model from scratch on generated dialogues (plain torch, CPU).

Resumable: rerunning the same command continues from ``<out>/ckpt.pt``.  Every checkpoint is
also exported as a Hugging Face directory under ``<out>/snapshots/step-NNNNNN``.

    python -m training.train --out .train/run1 --steps 18000

A second phase fine-tunes a finished model on another data version (new optimizer, own schedule):

    python -m training.train --out .train/run2 --init-from .train/run1/pick --data v2 --steps 7000 --lr 1e-3
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import re
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from runtime.cpu import CPUINFO, cpuinfo_fields, flags_of, native_bf16
from training import lineage
from training.datagen import DATA_VERSIONS, DialogueGen, learned_turns, render_dialogue
from training.export import PAD_ID, load_hf_dir, save_hf_dir
from training.model import ModelConfig, Qwen2
from training.tokenizer import train_tokenizer

BUCKETS = (192, 320, 512, 768, 1024)  # padded lengths; each step is one bucket of ~tokens_per_step tokens
_ASSISTANT = re.compile(r"<\|im_start\|>assistant\n(.*?<\|im_end\|>)", re.S)


def encode(tok: Tokenizer, text: str, learned: list[bool] | None = None) -> tuple[list[int], list[bool]]:
    """Token ids and, per token, whether it has loss: assistant output only, and of the assistant messages
    only those ``learned`` marks (one flag per message, ``datagen.learned_turns``; all when None)."""
    enc = tok.encode(text)
    spans = [m.span(1) for m in _ASSISTANT.finditer(text)]
    if learned is not None:
        if len(learned) != len(spans):
            raise ValueError(f"{len(learned)} learned flags for {len(spans)} assistant messages")
        spans = [span for span, keep in zip(spans, learned) if keep]
    mask, j = [], 0
    for start, _ in enc.offsets:
        while j < len(spans) and spans[j][1] <= start:
            j += 1
        mask.append(j < len(spans) and spans[j][0] <= start)
    return enc.ids, mask


def dialogue_example(gen: DialogueGen) -> tuple[str, list[bool]]:
    """One training dialogue, rendered with the tool list its system prompt shows, and which of its
    assistant messages are learned."""
    d = gen.dialogue()
    return render_dialogue(d, gen.tools(d)), learned_turns(d)


def dialogue_text(gen: DialogueGen) -> str:
    return dialogue_example(gen)[0]


def build_tokenizer(path: Path, vocab_size: int) -> Tokenizer:
    if path.exists():
        return Tokenizer.from_file(str(path))
    gen = DialogueGen("train", seed=10**6)
    tok = train_tokenizer((dialogue_text(gen) for _ in range(20000)), vocab_size)
    tok.save(str(path))
    return tok


class Batches:
    """Deterministic batches: step ``s`` always yields the same padded (ids, mask) tensors."""

    def __init__(self, tok: Tokenizer, seed: int, tokens_per_step: int, data: str = "v1") -> None:
        self.tok, self.seed, self.data = tok, seed, data
        self.sizes = {t: max(1, tokens_per_step // t) for t in BUCKETS}
        gen = DialogueGen("train", seed - 1, data)
        counts = {t: 0 for t in BUCKETS}
        for _ in range(2000):
            b = self.bucket(len(encode(tok, dialogue_text(gen))[0]))
            if b:
                counts[b] += 1
        # steps per bucket in proportion to dialogues per bucket / batch size: unbiased mix
        self.weights = [counts[t] / self.sizes[t] for t in BUCKETS]

    @staticmethod
    def bucket(n: int) -> int | None:
        return next((t for t in BUCKETS if n <= t), None)

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = random.Random(self.seed * 1_000_003 + step)
        length = rng.choices(BUCKETS, self.weights)[0]
        gen = DialogueGen("train", rng.getrandbits(48), self.data)
        rows: list[tuple[list[int], list[bool]]] = []
        while len(rows) < self.sizes[length]:
            ids, mask = encode(self.tok, *dialogue_example(gen))
            if self.bucket(len(ids)) == length:
                rows.append((ids, mask))
        ids_t = torch.full((len(rows), length), PAD_ID, dtype=torch.long)
        mask_t = torch.zeros((len(rows), length), dtype=torch.bool)
        for i, (ids, mask) in enumerate(rows):
            ids_t[i, : len(ids)] = torch.tensor(ids)
            mask_t[i, : len(mask)] = torch.tensor(mask)
        return ids_t, mask_t


def lr_at(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def machine_text(cpuinfo: Path = CPUINFO, cores: int | None = None) -> str:
    """The CPU as a model card states it: ``2-core Intel(R) Xeon(R) Processor (x86_64, native bf16: AMX), no GPU``."""
    fields = cpuinfo_fields(cpuinfo)
    bf16 = native_bf16(flags_of(fields))
    bf16 = f"native bf16: {bf16}" if bf16 else "no native bf16"
    name = fields.get("model name") or platform.processor() or "CPU"
    return f"{cores or os.cpu_count() or 1}-core {name} ({platform.machine()}, {bf16}), no GPU"


def compute_dtype(precision: str, flags: set[str] | None = None) -> torch.dtype:
    """The forward pass's dtype: ``bf16`` autocast where the CPU computes bf16 natively (AVX-512 BF16
    or AMX); ``auto`` falls back to fp32 elsewhere -- on an AVX2-only CPU a bf16 matmul is emulated and
    ~9x slower than fp32 (measured on this project's 2-core CI-class VM)."""
    if precision != "auto":
        return {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    return torch.bfloat16 if native_bf16(flags) else torch.float32


def loss_fn(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor,
            dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        logits = model(ids[:, :-1])
    target = ids[:, 1:].masked_fill(~mask[:, 1:], -100)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)


def schedules_text(schedules: list[tuple[int, int]]) -> str:
    """``0:6000,6000:11500``: each schedule's first step and its length (the cosine's end)."""
    return ",".join(f"{start}:{steps}" for start, steps in schedules)


def save_checkpoint(out: Path, model: Qwen2, opt: torch.optim.Optimizer, step: int, elapsed: float,
                    tok: Tokenizer, keep: int, run: dict) -> None:
    """``run``: how the run trained so far -- ``schedules`` (list of (first step, steps)), ``threads``,
    ``precision`` -- kept in the checkpoint and written beside each snapshot for the model card."""
    tmp = out / "ckpt.pt.tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                "config": model.cfg.to_dict(), "schedules": run["schedules"]}, tmp)
    tmp.replace(out / "ckpt.pt")
    snap = out / "snapshots" / f"step-{step:06d}"
    save_hf_dir(model, tok, snap)
    (snap / "train_state.txt").write_text(
        f"step {step}\nelapsed_s {elapsed:.0f}\nthreads {run['threads']}\nprecision {run['precision']}\n"
        f"schedules {schedules_text(run['schedules'])}\ndata {run['data']}\nlr {run['lr']}\nwarmup {run['warmup']}\nmachine {run['machine']}\n"
        + (f"init_from {run['init_from']}\n" if run.get("init_from") else ""))
    for old in sorted((out / "snapshots").glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def resumed_schedules(saved: list | None, step: int, steps: int) -> list[tuple[int, int]]:
    """The schedules after resuming at ``step`` with ``--steps steps``. A schedule ``(start, steps)``
    means: from ``start`` on, the lr follows the cosine of a ``steps``-step run (``lr_at``). Rerunning
    the same command continues its schedule; another ``--steps`` switches to that run's cosine from
    here (a longer one is a warm restart), recorded so that the card can say how to reproduce it. A
    checkpoint from before schedules were kept is taken to be the same command rerun."""
    schedules = [tuple(s) for s in saved] if saved else [(0, steps)]
    return schedules if schedules[-1][1] == steps else schedules + [(step, steps)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(".train/run1"))
    ap.add_argument("--steps", type=int, default=18000)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--tokens-per-step", type=int, default=4096)
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", choices=DATA_VERSIONS, default="v1", help="version of the phrasing parts")
    ap.add_argument("--init-from", type=Path, help="start from this model directory's weights and tokenizer "
                    "(its shape overrides --hidden etc.; a fresh optimizer)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-minutes", type=float, default=4.0)
    ap.add_argument("--keep", type=int, default=40, help="snapshots to keep")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                    help="bf16 autocast or fp32; auto: bf16 only where the CPU has native bf16 (AVX-512 BF16, AMX)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.init_from:
        model, tok = load_hf_dir(args.init_from)
        model.train()
        tok.save(str(args.out / "tokenizer.json"))
        # how the starting model was trained and its learning curve, for the watcher and the card
        lineage.write(args.out / lineage.INIT_LINEAGE, lineage.read(args.init_from))
        if (args.init_from / "curve.jsonl").exists():
            shutil.copy2(args.init_from / "curve.jsonl", args.out / "init_curve.jsonl")
        cfg = model.cfg
    else:
        tok = build_tokenizer(args.out / "tokenizer.json", args.vocab_size)
        cfg = ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=args.hidden, num_hidden_layers=args.layers,
                          intermediate_size=args.ffn, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads)
        model = Qwen2(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    step, elapsed, schedules = 0, 0.0, [(0, args.steps)]
    if (args.out / "ckpt.pt").exists():
        state = torch.load(args.out / "ckpt.pt", weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, elapsed = state["step"], state["elapsed"]
        schedules = resumed_schedules(state.get("schedules"), step, args.steps)
        print(f"resumed from step {step} ({elapsed / 60:.1f} min trained)", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    dtype = compute_dtype(args.precision)
    run = {"schedules": schedules, "threads": args.threads, "precision": "bf16" if dtype == torch.bfloat16 else "fp32",
           "data": args.data, "lr": args.lr, "init_from": str(args.init_from) if args.init_from else "",
           "warmup": args.warmup, "machine": machine_text()}
    print(f"params {n_params} config {cfg.to_dict()} args {vars(args)} compute {dtype}", flush=True)
    batches = Batches(tok, args.seed, args.tokens_per_step, args.data)
    fwd = model if args.no_compile else torch.compile(model)
    t0, last_ckpt, losses, tokens = time.time() - elapsed, time.time(), [], 0
    while step < args.steps:
        ids, mask = batches.get(step)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        loss = loss_fn(fwd, ids, mask, dtype)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        losses.append(loss.item())
        tokens += ids.numel()
        if step % 50 == 0:
            el = time.time() - t0
            print(f"step {step} loss {sum(losses) / len(losses):.4f} lr {lr_at(step, args):.2e} "
                  f"elapsed {el / 60:.1f}m tok/s {tokens / max(1e-9, el - elapsed):.0f}", flush=True)
            losses = []
        if time.time() - last_ckpt > args.ckpt_minutes * 60 or step == args.steps:
            save_checkpoint(args.out, model, opt, step, time.time() - t0, tok, args.keep, run)
            last_ckpt = time.time()
            print(f"checkpoint step {step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
