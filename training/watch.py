"""Follow a training run: a learning curve while it trains, then pick and ship the final checkpoint.

    python -m training.watch --run .train/run1 --final-step 12000 --scale 0.5

While the run trains, each new snapshot is evaluated on a ``--scale`` fraction of the held-out
evaluation set and appended to ``<run>/curve.jsonl`` (the curve is reported, never used to pick).
When the snapshot of ``--final-step`` exists, the newest ``--candidates`` snapshots are scored on a
separate selection set (``build_items(seed=1)``), the best is measured on the whole evaluation set
(seed 0), and it is copied to ``--dest`` with its model card.  ``--finalize`` does only that last
part, for a run that has already ended.
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
from training.evaluate import DEFAULT_MODEL, METRICS, build_items, evaluate, report

SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json")
SELECTION_SEED = 1


def overall(rates: dict) -> float:
    return sum(rates.get(m, 0.0) for m in METRICS) / len(METRICS)


def read_curve(run: Path) -> list[dict]:
    path = run / "curve.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def snapshots(run: Path) -> list[Path]:
    """Complete snapshots of ``run``, oldest first (a snapshot is complete once its state is written)."""
    snaps = [s for s in (run / "snapshots").glob("step-*") if (s / "train_state.txt").exists()]
    return sorted(snaps, key=lambda s: int(s.name[5:]))


def evaluate_snapshot(snap: Path, items: list) -> dict:
    state = dict(line.split() for line in (snap / "train_state.txt").read_text().splitlines())
    t = time.time()
    rates = evaluate(TorchBackend(snap), items, progress=False)
    return {"step": int(state["step"]), "elapsed_s": float(state["elapsed_s"]), **rates,
            "eval_s": round(time.time() - t)}


def pick(scores: dict[Path, float]) -> Path:
    """The best-scoring snapshot; on a tie, the later one (more training, same measured quality)."""
    return max(scores, key=lambda s: (scores[s], int(s.name[5:])))


def ship(snap: Path, row: dict, curve: list[dict], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_FILES:
        shutil.copy2(snap / name, dest / name)
    (dest / "README.md").write_text(build_card(dest, row, curve))


def finalize(run: Path, dest: Path, candidates: int) -> dict:
    """Pick among the newest snapshots on the selection set, measure the pick on the eval set, ship it."""
    snaps = snapshots(run)[-candidates:]
    if not snaps:
        raise SystemExit(f"no snapshots in {run / 'snapshots'}")
    selection = build_items(SELECTION_SEED)
    scores = {}
    for snap in snaps:
        scores[snap] = overall(evaluate(TorchBackend(snap), selection, progress=False))
        print(f"selection {snap.name} overall {scores[snap]:.4f}", flush=True)
    best = pick(scores)
    row = evaluate_snapshot(best, build_items(0))
    record = {"snapshot": best.name, "selection": {s.name: round(v, 4) for s, v in scores.items()}, "row": row}
    (run / "final_eval.json").write_text(json.dumps(record, indent=2) + "\n")
    ship(best, row, sorted(read_curve(run), key=lambda r: r["step"]), dest)
    print(f"shipped {best.name} to {dest}\n{report(row)}", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path(".train/run1"))
    ap.add_argument("--dest", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--final-step", type=int, default=12000)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the eval set for the curve")
    ap.add_argument("--candidates", type=int, default=4, help="newest snapshots the final pick is made from")
    ap.add_argument("--finalize", action="store_true", help="skip the curve: pick and ship now")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.finalize:
        finalize(args.run, args.dest, args.candidates)
        return 0
    items = build_items(0, int(150 * args.scale), int(60 * args.scale), int(40 * args.scale), int(80 * args.scale))
    done = {r["step"] for r in read_curve(args.run)}
    while True:
        new = [s for s in snapshots(args.run) if int(s.name[5:]) not in done]
        if not new:
            if args.final_step in done:
                finalize(args.run, args.dest, args.candidates)
                return 0
            time.sleep(20)
            continue
        snap = new[-1]  # only the newest: never fall behind the run
        done.update(int(s.name[5:]) for s in new[:-1])
        row = evaluate_snapshot(snap, items)
        done.add(row["step"])
        with (args.run / "curve.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"step {row['step']} " + " ".join(f"{m} {row.get(m, 0):.3f}" for m in METRICS)
              + f" overall {overall(row):.3f} ({row['eval_s']}s)", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
