"""How a checkpoint was trained, phase by phase, in one file: ``lineage.jsonl``.

A shipped or picked model directory holds ``lineage.jsonl``: one JSON object per training phase, oldest
first, each the trainer's facts about that phase's pick (``parse_state``: step, seconds trained, threads,
precision, schedules, data version, peak lr, warm-up, machine, starting model); the last line is the
directory's own checkpoint.  A run started from such a directory (``--init-from``) keeps the starting model's
lineage as ``init_lineage.jsonl``, beside ``init_curve.jsonl``, for its watcher and the model card.

Directories and runs made before this file existed carry the same facts as ``train_state.txt`` plus a chain
of ``init_state.txt``, ``init_init_state.txt``, ... (one file per earlier phase).  ``read`` and ``ancestors``
accept both layouts, so old runs still resume and old picks can still be started from.
"""

from __future__ import annotations

import json
from pathlib import Path

LINEAGE = "lineage.jsonl"
INIT_LINEAGE = "init_lineage.jsonl"


def parse_state(path: Path) -> dict:
    """A snapshot's ``train_state.txt`` (``facts``)."""
    return facts(path.read_text())


def facts(text: str) -> dict:
    """The text of a ``train_state.txt``: step and seconds trained; threads, precision, lr schedules, data
    version, peak lr, warm-up, machine and starting model where the trainer wrote them (older files have fewer)."""
    state = dict((line.split(maxsplit=1) + [""])[:2] for line in text.splitlines() if line)
    row: dict = {"step": int(state["step"]), "elapsed_s": float(state["elapsed_s"])}
    for key, cast in (("threads", int), ("precision", str), ("data", str), ("lr", float), ("warmup", int),
                      ("machine", str), ("init_from", str)):
        if key in state:
            row[key] = cast(state[key])
    if "schedules" in state:
        row["schedules"] = [[int(n) for n in part.split(":")] for part in state["schedules"].split(",")]
    return row


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(path: Path, phases: list[dict]) -> None:
    path.write_text("".join(json.dumps(phase) + "\n" for phase in phases))


def _state_chain(directory: Path, prefix: str = "init_") -> list[dict]:
    """The older layout's ``init_state.txt``, ``init_init_state.txt``, ... of ``directory``, oldest first."""
    path = directory / f"{prefix}state.txt"
    return _state_chain(directory, "init_" + prefix) + [parse_state(path)] if path.exists() else []


def read(model_dir: Path) -> list[dict]:
    """The phases that made the checkpoint in ``model_dir``, oldest first, its own last; [] when unrecorded."""
    if (model_dir / LINEAGE).exists():
        return _load(model_dir / LINEAGE)
    own = model_dir / "train_state.txt"
    return _state_chain(model_dir) + [parse_state(own)] if own.exists() else []


def ancestors(run: Path) -> list[dict]:
    """The phases that made the model ``run`` started from, oldest first; [] for a run from nothing."""
    return _load(run / INIT_LINEAGE) if (run / INIT_LINEAGE).exists() else _state_chain(run)


def nested(phases: list[dict]) -> dict:
    """The card's shape of a run's starting models: ``{"init": newest | {"init": the one before | ...}}``;
    ``{}`` for none."""
    out: dict = {}
    for phase in phases:
        out = {"init": phase | out}
    return out
