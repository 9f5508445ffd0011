"""A model directory's ``lineage.jsonl``, and the older layout of one state file per phase it replaces."""

from __future__ import annotations

from pathlib import Path

from training import lineage

ONE = "step 12000\nelapsed_s 5000\nthreads 2\nprecision bf16\nschedules 0:12000\ndata v1\nlr 0.003\nwarmup 200\n"
TWO = ONE.replace("step 12000", "step 7000").replace("data v1", "data v2") + "init_from .train/run1/pick\n"
THREE = ONE.replace("step 12000", "step 3000").replace("data v1", "data v3") + "init_from .train/run2/pick\n"


def test_an_older_model_directory_reads_as_its_phases_oldest_first(tmp_path: Path) -> None:
    """train_state.txt (its own phase), init_state.txt (the model it started from), init_init_state.txt ..."""
    (tmp_path / "train_state.txt").write_text(THREE)
    (tmp_path / "init_state.txt").write_text(TWO)
    (tmp_path / "init_init_state.txt").write_text(ONE)
    phases = lineage.read(tmp_path)
    assert [(p["step"], p["data"]) for p in phases] == [(12000, "v1"), (7000, "v2"), (3000, "v3")]
    assert phases[2]["init_from"] == ".train/run2/pick" and "init_from" not in phases[0]
    lineage.write(tmp_path / lineage.LINEAGE, phases[:1])  # the new file wins over the old ones
    assert lineage.read(tmp_path) == phases[:1]


def test_an_older_run_reads_its_starting_models_and_a_run_from_nothing_has_none(tmp_path: Path) -> None:
    assert lineage.ancestors(tmp_path) == [] and lineage.nested([]) == {}
    (tmp_path / "init_state.txt").write_text(TWO)
    (tmp_path / "init_init_state.txt").write_text(ONE)
    assert [p["step"] for p in lineage.ancestors(tmp_path)] == [12000, 7000]


def test_nested_puts_the_newest_starting_model_on_top_as_the_card_reads_it() -> None:
    one, two = lineage.facts(ONE), lineage.facts(TWO)
    assert lineage.nested([one, two]) == {"init": two | {"init": one}}


def test_a_directory_without_recorded_training_has_no_lineage(tmp_path: Path) -> None:
    assert lineage.read(tmp_path) == []
