"""Evaluate each new training snapshot and ship the best one so far to ``models/tiny-agent``.

    python -m training.watch --run .train/run1        (loops until the run's final step is evaluated)

The learning curve goes to ``<run>/curve.jsonl``; the model card is regenerated on every ship.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from training.backends import TorchBackend
from training.card import build_card
from training.evaluate import DEFAULT_MODEL, METRICS, build_items, evaluate

SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json")


def overall(rates: dict) -> float:
    return sum(rates.get(m, 0.0) for m in METRICS) / len(METRICS)


def read_curve(run: Path) -> list[dict]:
    path = run / "curve.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def evaluate_snapshot(snap: Path, items: list) -> dict:
    state = dict(line.split() for line in (snap / "train_state.txt").read_text().splitlines())
    t = time.time()
    rates = evaluate(TorchBackend(snap), items, progress=False)
    return {"step": int(state["step"]), "elapsed_s": float(state["elapsed_s"]), **rates,
            "eval_s": round(time.time() - t)}


def ship(snap: Path, row: dict, curve: list[dict], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_FILES:
        shutil.copy2(snap / name, dest / name)
    (dest / "README.md").write_text(build_card(dest, row, curve))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", type=Path, default=Path(".train/run1"))
    ap.add_argument("--dest", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--final-step", type=int, default=12000)
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    items = build_items(0, int(150 * args.scale), int(60 * args.scale), int(40 * args.scale), int(80 * args.scale))
    curve = read_curve(args.run)
    done = {r["step"] for r in curve}
    best = max((overall(r) for r in curve), default=-1.0)
    while True:
        snaps = [s for s in sorted((args.run / "snapshots").glob("step-*"))
                 if (s / "train_state.txt").exists() and int(s.name[5:]) not in done]
        if not snaps:
            if args.final_step in done:
                return 0
            time.sleep(20)
            continue
        snap = snaps[-1]  # only the newest: never fall behind the run
        done.update(int(s.name[5:]) for s in snaps[:-1])
        row = evaluate_snapshot(snap, items)
        curve.append(row)
        done.add(row["step"])
        with (args.run / "curve.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        shipped = overall(row) > best
        if shipped:
            best = overall(row)
            ship(snap, row, sorted(curve, key=lambda r: r["step"]), args.dest)
        print(f"step {row['step']} " + " ".join(f"{m} {row.get(m, 0):.3f}" for m in METRICS)
              + f" overall {overall(row):.3f}{' SHIPPED' if shipped else ''} ({row['eval_s']}s)", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
