"""Follow a training run: a learning curve while it trains, then pick and ship the final checkpoint.

    python -m training.watch --run .train/run1 --final-step 18000 --scale 0.5

While the run trains, each new snapshot is evaluated on a ``--scale`` fraction of the in-distribution
and the harder evaluation sets and appended to ``<run>/curve.jsonl`` (the curve is reported, never
used to pick).  When the snapshot of ``--final-step`` exists, the newest ``--candidates`` snapshots
are scored on a separate selection set (in-distribution, another seed: never an evaluation set),
the best is measured on every report (indist, harder, probe, legacy) and copied to ``--dest`` with
its model card and the learning curve.  ``--finalize`` does only that last part, for a run that has already ended.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from training import lineage
from training.backends import TorchBackend
from training.card import build_card
from training.evalsets import selection
from training.evaluate import DEFAULT_MODEL, METRICS, evaluate, probe_report, report, run_set
from training.lineage import parse_state

SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json")
CURVE_SETS = ("indist", "harder")


def overall(rates: dict) -> float:
    return sum(rates.get(m, 0.0) for m in METRICS) / len(METRICS)


def read_curve(run: Path, name: str = "curve.jsonl") -> list[dict]:
    path = run / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def full_curve(run: Path) -> list[dict]:
    """The run's curve, after the curve of the model it started from (``--init-from``) where there is one;
    rows carry their ``phase`` (1, 2, ...)."""
    earlier = read_curve(run, "init_curve.jsonl")
    phase = max((r.get("phase", 1) for r in earlier), default=0) + 1
    own = [r | {"phase": phase} for r in sorted(read_curve(run), key=lambda r: r["step"])]
    return [r if "phase" in r else r | {"phase": 1} for r in earlier] + own


def snapshots(run: Path) -> list[Path]:
    """Complete snapshots of ``run``, oldest first (a snapshot is complete once its state is written)."""
    snaps = [s for s in (run / "snapshots").glob("step-*") if (s / "train_state.txt").exists()]
    return sorted(snaps, key=lambda s: int(s.name[5:]))


def train_state(snap: Path) -> dict:
    """The trainer's facts about a snapshot (``parse_state``); for a run that started from another model,
    that model's own facts under ``init``, and so on back to the phase trained from nothing."""
    return parse_state(snap / "train_state.txt") | lineage.nested(lineage.ancestors(snap.parent.parent))


def curve_point(snap: Path, scale: float) -> dict:
    """One learning-curve row: both sets at ``scale``."""
    t, backend = time.time(), TorchBackend(snap)
    row = parse_state(snap / "train_state.txt") | {name: run_set(name, backend, 0, scale, progress=False)
                                                   for name in CURVE_SETS}
    return row | {"eval_s": round(time.time() - t)}


def full_eval(snap: Path) -> dict:
    """Every report on the shipped checkpoint: indist, harder, probe, legacy."""
    backend = TorchBackend(snap)
    row = train_state(snap) | {name: run_set(name, backend, progress=False) for name in ("indist", "harder", "legacy")}
    row["probe_text"], row["probe"] = probe_report(backend, verbose=True)
    return row


def pick(scores: dict[Path, float]) -> Path:
    """The best-scoring snapshot; on a tie, the later one (more training, same measured quality)."""
    return max(scores, key=lambda s: (scores[s], int(s.name[5:])))


def ship(snap: Path, row: dict, curve: list[dict], dest: Path) -> None:
    """Copy the checkpoint to ``dest`` with its card, its learning curve (``curve.jsonl``) and how each phase
    that made it was trained (``lineage.jsonl``: the run's starting models, then this snapshot)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_FILES:
        shutil.copy2(snap / name, dest / name)
    lineage.write(dest / lineage.LINEAGE,
                  lineage.ancestors(snap.parent.parent) + [parse_state(snap / "train_state.txt")])
    (dest / "README.md").write_text(build_card(dest, row, curve))
    (dest / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))


def finalize(run: Path, dest: Path, candidates: int) -> dict:
    """Pick among the newest snapshots on the selection set, measure the pick on every report, ship it."""
    snaps = snapshots(run)[-candidates:]
    if not snaps:
        raise SystemExit(f"no snapshots in {run / 'snapshots'}")
    items = selection()
    scores = {}
    for snap in snaps:
        scores[snap] = overall(evaluate(TorchBackend(snap), items, progress=False))
        print(f"selection {snap.name} overall {scores[snap]:.4f}", flush=True)
    best = pick(scores)
    row = full_eval(best)
    record = {"snapshot": best.name, "selection": {s.name: round(v, 4) for s, v in scores.items()}, "row": row}
    (run / "final_eval.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    ship(best, row, full_curve(run), dest)
    print(f"shipped {best.name} to {dest}", flush=True)
    for name in ("indist", "harder", "legacy"):
        print(report(name, row[name]), flush=True)
    print(row["probe_text"], flush=True)
    return record


def follow(run: Path, final_step: int, scale: float) -> None:
    """Append a curve row for the newest unevaluated snapshot until ``final_step``'s has one."""
    done = {r["step"] for r in read_curve(run)}
    while final_step not in done:
        new = [s for s in snapshots(run) if int(s.name[5:]) not in done]
        if not new:
            time.sleep(20)
            continue
        snap = new[-1]  # only the newest: never fall behind the run
        done.update(int(s.name[5:]) for s in new[:-1])
        row = curve_point(snap, scale)
        done.add(row["step"])
        with (run / "curve.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"step {row['step']} " + " | ".join(
            f"{name} " + " ".join(f"{m} {row[name].get(m, 0):.3f}" for m in METRICS) for name in CURVE_SETS)
            + f" ({row['eval_s']}s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path(".train/run1"))
    ap.add_argument("--dest", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--final-step", type=int, default=18000)
    ap.add_argument("--scale", type=float, default=0.5, help="fraction of the evaluation sets for the curve")
    ap.add_argument("--candidates", type=int, default=4, help="newest snapshots the final pick is made from")
    ap.add_argument("--finalize", action="store_true", help="skip the curve: pick and ship now")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if not args.finalize:
        follow(args.run, args.final_step, args.scale)
    finalize(args.run, args.dest, args.candidates)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
