"""The final pick of a training run is made on the selection set and measured on the evaluation sets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from training import lineage, watch

MODEL_DIR = Path(__file__).resolve().parents[2] / "models" / "tiny-agent"


def _snapshot(run: Path, step: int, complete: bool = True) -> Path:
    snap = run / "snapshots" / f"step-{step:06d}"
    snap.mkdir(parents=True)
    for name in watch.SHIPPED_FILES:
        shutil.copy2(MODEL_DIR / name, snap / name)
    if complete:  # the trainer writes its state last: it marks a complete snapshot
        (snap / "train_state.txt").write_text(f"step {step}\nelapsed_s {step / 2}\n")
    return snap


def test_pick_prefers_the_best_score_then_the_later_step(tmp_path: Path) -> None:
    a, b, c = (tmp_path / f"step-{s:06d}" for s in (900, 1000, 1100))
    assert watch.pick({a: 0.9, b: 0.95, c: 0.93}) == b
    assert watch.pick({a: 0.95, b: 0.95, c: 0.93}) == b


def test_snapshots_are_ordered_by_step_and_skip_incomplete_ones(tmp_path: Path) -> None:
    for step in (12000, 950, 3000):
        _snapshot(tmp_path, step)
    _snapshot(tmp_path, 12400, complete=False)
    assert [s.name for s in watch.snapshots(tmp_path)] == ["step-000950", "step-003000", "step-012000"]


def test_finalize_selects_on_the_selection_set_and_reports_the_eval_sets(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    run, dest = tmp_path / "run", tmp_path / "shipped"
    for step in (1000, 2000, 3000, 4000, 5000):
        _snapshot(run, step)
    # Selection scores make step 3000 the pick; on the eval sets step 5000 would look better, and
    # must not matter. Step 1000 is outside the newest four and must not even be scored.
    selection = {3000: 0.9, 4000: 0.8, 5000: 0.7, 2000: 0.6}
    eval_sets = {3000: 0.91, 5000: 0.99}
    scored, measured = [], []
    monkeypatch.setattr(watch, "TorchBackend", lambda snap: int(Path(snap).name[5:]))
    monkeypatch.setattr(watch, "selection", lambda: "selection-set")

    def fake_evaluate(step: int, items: str, progress: bool = True) -> dict:
        assert items == "selection-set"
        scored.append(step)
        return dict.fromkeys(watch.METRICS, selection[step])

    def fake_run_set(name: str, step: int, *a, **k) -> dict:
        measured.append((name, step))
        return dict.fromkeys(watch.METRICS, eval_sets[step]) | {"n": 10}

    monkeypatch.setattr(watch, "evaluate", fake_evaluate)
    monkeypatch.setattr(watch, "run_set", fake_run_set)
    monkeypatch.setattr(watch, "probe_report", lambda backend, verbose: ("[probe] 1/1", {"right_tool": 1.0}))
    record = watch.finalize(run, dest, candidates=4)
    assert sorted(scored) == [2000, 3000, 4000, 5000]
    assert measured == [("indist", 3000), ("harder", 3000), ("legacy", 3000)]
    assert record["snapshot"] == "step-003000" and record["row"]["harder"]["exact_args"] == 0.91
    assert json.loads((run / "final_eval.json").read_text())["snapshot"] == "step-003000"
    assert (dest / "model.safetensors").read_bytes() == (run / "snapshots/step-003000/model.safetensors").read_bytes()
    assert (dest / "curve.jsonl").read_text() == ""  # this run has no curve rows
    card = (dest / "README.md").read_text()
    assert "| exact_args | 91.0 % | 91.0 % | ≥ 85 % |" in card and "[probe] 1/1" in card and "{{" not in card


def test_train_state_reads_the_trainers_facts_and_older_snapshots(tmp_path: Path) -> None:
    old = _snapshot(tmp_path, 950)
    assert watch.train_state(old) == {"step": 950, "elapsed_s": 475.0}
    new = _snapshot(tmp_path, 11500)
    (new / "train_state.txt").write_text("step 11500\nelapsed_s 12000\nthreads 2\nprecision fp32\n"
                                         "schedules 0:6000,6000:11500\n")
    assert watch.train_state(new) == {"step": 11500, "elapsed_s": 12000.0, "threads": 2, "precision": "fp32",
                                      "schedules": [[0, 6000], [6000, 11500]]}


def test_the_card_says_how_make_train_reproduces_the_run() -> None:
    from training.card import reproduce_text

    assert "one run of `make train` in a fresh clone" in reproduce_text({})
    assert "one run of `make train TRAIN_STEPS=18000` in" in reproduce_text({"threads": 1, "schedules": [[0, 18000]]})
    text = reproduce_text({"threads": 2, "schedules": [[0, 6000], [6000, 11500]]})
    assert "`make train TRAIN_STEPS=6000 TRAIN_THREADS=2`, then `make train TRAIN_STEPS=11500 TRAIN_THREADS=2`" in text
    assert "from step 6000 the lr follows the 11500-step run's cosine" in text


def test_the_card_names_the_machine_that_trained(tmp_path: Path) -> None:
    from training.train import machine_text

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512_bf16 amx_bf16\n")
    assert machine_text(info, 2).startswith("2-core Intel(R) Xeon(R) Processor (")
    assert "native bf16: AMX), no GPU" in machine_text(info, 2)
    info.write_text("model name\t: AMD EPYC 7B13\nflags\t: fpu avx2 avx512_bf16\n")
    assert "native bf16: AVX-512 BF16" in machine_text(info, 2)
    info.write_text("model name\t: AMD EPYC 7B13\nflags\t: fpu avx2\n")
    assert "no native bf16" in machine_text(info, 2)


PHASE1 = ("step 11441\nelapsed_s 5045\nthreads 2\nprecision bf16\nschedules 0:12000\ndata v1\nlr 0.003\nwarmup 200\n"
          "machine 2-core Intel(R) Xeon(R) Processor (x86_64, native bf16: AMX), no GPU\n")


def test_a_fine_tuning_run_reads_its_own_facts_and_the_starting_models(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, 9000)
    (snap / "train_state.txt").write_text("step 9000\nelapsed_s 4800\nthreads 2\nprecision bf16\nschedules 0:10000\n"
                                          "data v2\nlr 0.001\nwarmup 100\nmachine 2-core AMD EPYC (x86_64, "
                                          "native bf16: AVX-512 BF16), no GPU\ninit_from .train/run1/pick\n")
    assert watch.train_state(snap) == {"step": 9000, "elapsed_s": 4800.0, "threads": 2, "precision": "bf16",
                                       "schedules": [[0, 10000]], "data": "v2", "lr": 0.001, "warmup": 100,
                                       "machine": "2-core AMD EPYC (x86_64, native bf16: AVX-512 BF16), no GPU",
                                       "init_from": ".train/run1/pick"}
    lineage.write(tmp_path / "init_lineage.jsonl", [lineage.facts(PHASE1)])
    row = watch.train_state(snap)
    assert row["init"]["step"] == 11441 and row["init"]["data"] == "v1" and row["init"]["lr"] == 0.003
    (tmp_path / "init_lineage.jsonl").unlink()  # a run started before lineage.jsonl: its init_state.txt
    (tmp_path / "init_state.txt").write_text(PHASE1)
    assert watch.train_state(snap) == row


def test_the_card_states_both_phases_of_a_two_phase_model() -> None:
    from training.card import phases_text, reproduce_text, trained_text

    row = {"step": 9000, "elapsed_s": 4800.0, "threads": 2, "precision": "bf16", "schedules": [[0, 10000]],
           "data": "v2", "lr": 0.001, "warmup": 100, "machine": "2-core AMD EPYC (x86_64, native bf16: AVX-512 BF16), "
           "no GPU", "init_from": ".train/run1/pick",
           "init": {"step": 11441, "elapsed_s": 5045.0, "threads": 2, "precision": "bf16", "schedules": [[0, 12000]],
                    "data": "v1", "lr": 0.003, "warmup": 200, "machine": "2-core Intel(R) Xeon(R) Processor "
                    "(x86_64, native bf16: AMX), no GPU"}}
    text = phases_text(row, "unused")
    assert "Phase 1, from nothing on data v1" in text and "peak lr 0.003, 200 warm-up steps, 12000-step cosine" in text
    assert "Its pick was step 11441, after 84 minutes" in text and "native bf16: AMX" in text
    assert "Phase 2, fine-tuning phase 1's pick on data v2" in text and "peak lr 0.001, 100 warm-up steps" in text
    assert "its step 9000, after 80 minutes (164 minutes of training in all)" in text
    assert trained_text(row).startswith("It was trained from scratch in two phases, about 84 + 80 minutes")
    repro = reproduce_text(row)
    assert "`make train` runs both phases" in repro and "started from `.train/run1/pick`" in repro
    assert "Phase 1 is the output of one run of `make train TRAIN_STEPS=12000 TRAIN_THREADS=2`" in repro
    single = {k: v for k, v in row.items() if k not in ("init", "init_from")}
    assert phases_text(single, "unused").startswith("- peak lr 0.001") and "two phases" not in trained_text(single)


PHASE2 = ("step 7000\nelapsed_s 5417\nthreads 2\nprecision bf16\nschedules 0:7000\ndata v2\nlr 0.001\nwarmup 100\n"
          "machine 2-core AMD EPYC (x86_64, native bf16: AVX-512 BF16), no GPU\ninit_from .train/run1/pick\n")


def test_a_third_phase_reads_the_chain_of_starting_models_and_ships_it_on(tmp_path: Path) -> None:
    """Phase 3 starts from phase 2's pick, which started from phase 1's: the trainer wrote their facts to
    init_lineage.jsonl; the card states all three, and the shipped directory carries the three phases in
    its lineage.jsonl so that a fourth phase could start from it."""
    from training.card import phases_text, reproduce_text, trained_text

    run = tmp_path / "run3"
    snap = _snapshot(run, 3000)
    (snap / "train_state.txt").write_text("step 3000\nelapsed_s 1500\nthreads 2\nprecision bf16\nschedules 0:3000\n"
                                          "data v3\nlr 0.0005\nwarmup 100\nmachine 2-core Intel(R) Xeon(R) "
                                          "Processor (x86_64, native bf16: AMX), no GPU\ninit_from .train/run2/pick\n")
    lineage.write(run / "init_lineage.jsonl", [lineage.facts(PHASE1), lineage.facts(PHASE2)])
    row = watch.train_state(snap)
    assert [row["step"], row["init"]["step"], row["init"]["init"]["step"]] == [3000, 7000, 11441]
    assert "init" not in row["init"]["init"]
    text = phases_text(row, "unused")
    assert "Phase 1, from nothing on data v1" in text and "Its pick was step 11441, after 84 minutes" in text
    assert "Phase 2, fine-tuning phase 1's pick on data v2" in text and "Its pick was step 7000, after 90 minutes" in text
    assert "Phase 3, fine-tuning phase 2's pick on data v3 (v2 plus names of several words" in text
    assert "peak lr 0.0005, 100 warm-up steps, 3000-step cosine" in text
    assert "its step 3000, after 25 minutes (199 minutes of training in all)" in text
    assert trained_text(row).startswith("It was trained from scratch in three phases, about 84 + 90 + 25 minutes")
    repro = reproduce_text(row)
    assert "`make train` runs all three phases" in repro and "phase 3 into `.train/run3` from phase 2's pick" in repro
    assert "(its pick goes to `.train/run2/pick`)" in repro and "phase 3 started from `.train/run2/pick`" in repro
    assert "Phase 1 is the output of one run of `make train TRAIN_STEPS=12000 TRAIN_THREADS=2`" in repro
    dest = tmp_path / "shipped"
    figures = {name: dict.fromkeys(watch.METRICS, 0.9) | {"n": 10} for name in ("indist", "harder", "legacy")}
    watch.ship(snap, row | figures, [], dest)
    own = lineage.parse_state(snap / "train_state.txt")
    assert lineage.read(dest) == [lineage.facts(PHASE1), lineage.facts(PHASE2), own]
    assert sorted(p.name for p in dest.iterdir()) == sorted([*watch.SHIPPED_FILES, "README.md", "curve.jsonl",
                                                             "lineage.jsonl"])
    assert "three phases" in (dest / "README.md").read_text()


def test_a_fine_tuning_runs_curve_follows_the_starting_models(tmp_path: Path) -> None:
    from training.card import curve_table

    rates = {"right_tool": 0.5, "exact_args": 0.5, "answer_values": 0.5, "no_tool": 1.0}
    (tmp_path / "init_curve.jsonl").write_text("".join(json.dumps({"step": s, "elapsed_s": s / 2, "indist": rates,
                                                                  "harder": rates}) + "\n" for s in (1000, 2000)))
    (tmp_path / "curve.jsonl").write_text("".join(json.dumps({"step": s, "elapsed_s": s, "indist": rates,
                                                             "harder": rates}) + "\n" for s in (600, 300)))
    curve = watch.full_curve(tmp_path)
    assert [(r["phase"], r["step"]) for r in curve] == [(1, 1000), (1, 2000), (2, 300), (2, 600)]
    table = curve_table(curve).splitlines()
    assert table[0].startswith("| phase | step | minutes |") and table[2].startswith("| 1 | 1000 | 8 |")
    assert table[-1].startswith("| 2 | 600 | 10 |")
    (tmp_path / "init_curve.jsonl").unlink()
    assert curve_table(watch.full_curve(tmp_path)).startswith("| step | minutes |")


def test_make_train_runs_the_phases_that_made_the_shipped_model() -> None:
    """`make train` reproduces the bundled model: its trainer commands, first to last, carry the data version,
    schedule length, peak lr, warm-up, threads and starting model that the shipped directory's recorded
    lineage (``lineage.jsonl``) says each phase had, and the card states that lineage."""
    import subprocess

    from training.card import phase_chain, phases_text
    from training.train import parse_args

    out = subprocess.run(["make", "-n", "train"], cwd=MODEL_DIR.parents[1], capture_output=True, text=True,
                         check=True).stdout
    commands = [parse_args(line.split("training.train ", 1)[1].split(";")[0].split())
                for line in out.splitlines() if "-m training.train " in line]
    chain = lineage.read(MODEL_DIR)
    row = chain[-1] | lineage.nested(chain[:-1])
    assert [state["step"] for state in phase_chain(row)] == [state["step"] for state in chain]
    assert phases_text(row, "unused") in (MODEL_DIR / "README.md").read_text()
    assert len(commands) == len(chain) > 1
    for i, (args, state) in enumerate(zip(commands, chain)):
        assert (args.data, args.steps, args.lr, args.warmup, args.threads) == (
            state["data"], state["schedules"][-1][1], state["lr"], state["warmup"], state["threads"]), f"phase {i + 1}"
        assert args.init_from == (None if i == 0 else commands[i - 1].out / "pick")
        assert state.get("init_from") == (None if i == 0 else str(commands[i - 1].out / "pick"))
