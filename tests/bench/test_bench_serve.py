"""``bench serve``'s pure parts: its request check, its goals against vLLM's server, the process tree's CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import serve, serve_report
from bench.common import QUIET_WINDOW_S, tree_cpu_seconds
from bench.servers import Server, vllm_cli_flags


def test_serve_requests_must_stream_text_and_count_tokens() -> None:
    ok = {"ttft": 0.01, "chars": 40, "usage": True, "tokens": 12, "finish": "length", "error": None}
    assert serve.check("native", 4, [ok]) == []
    problems = serve.check("native", 4, [{**ok, "tokens": 0}, {"error": "HTTP 500", "ttft": None, "tokens": 0}])
    assert problems[0].startswith("native at concurrency 4, request 0: no text, token count or finish reason")
    assert problems[1] == "native at concurrency 4, request 1: HTTP 500"


def _figures(ttft: float, tok_s: float) -> dict:
    return {"ttft_p50_ms": ttft, "ttft_p90_ms": ttft, "tok_s": tok_s, "cpu_ms_per_token": 1.0, "lengths": [],
            "cpu_ms_per_token_by_process": {"worker decode": 0.6, "gateway": 0.4}}


def test_serve_goals_compare_against_vllms_own_server() -> None:
    summary = {"vllm-server": {1: _figures(30, 100), 32: _figures(200, 500)},
               "turnstream-vllm": {1: _figures(37, 90), 32: _figures(226, 480)},
               "turnstream-native": {1: _figures(20, 150), 32: _figures(250, 700)}}
    met = serve_report.goals(summary, [1, 32])
    assert met["turnstream-vllm"]["ttft"] == {1: True, 32: False} and met["turnstream-vllm"]["throughput"]
    assert met["turnstream-native"]["ttft"] == {1: True, 32: False} and not met["turnstream-native"]["met"]
    assert serve_report.goals({"turnstream-native": summary["turnstream-native"]}, [1, 32]) == {}
    assert "turnstream-vllm: TTFT goal MISSED (@1 ok, @32 missed)" in serve_report.table(summary, [1, 32], met)
    summary["turnstream-native"][32]["background_cores"] = 0.42
    assert "turnstream-native 42 % of a core at most" in serve_report.table(summary, [1, 32], met)
    summary["vllm-server"][32]["cpu_ms_per_token_by_process"] = {"vllm api server": 0.9, "VLLM::Worker": 0.2}
    line = ("Pipeline CPU per token at 32: turnstream-vllm 1000 µs (worker decode 600, gateway 400, worker parser 0, "
            "valkey-server 0) against vLLM's API server 900 µs: goal MISSED")
    assert line in serve_report.table(summary, [1, 32], met)
    assert serve_report.pipeline_line({"turnstream-vllm": summary["turnstream-vllm"]}, 32) == ""
    colocated = {**summary, "turnstream-vllm": {32: {**summary["turnstream-vllm"][32],
                                                      "cpu_ms_per_token_by_process": {"worker decode": 0.85}}}}
    assert serve_report.pipeline_line(colocated, 32) == (  # the gateway in the decoder's process: no gateway part
        "Pipeline CPU per token at 32: turnstream-vllm 850 µs (worker decode (with the gateway) 850, worker parser 0, "
        "valkey-server 0) against vLLM's API server 900 µs: goal met")
    assert "SSE frames a request" not in serve_report.table(summary, [1, 32], met)  # a summary without them
    summary["vllm-server"][32].update(frames_per_request=38.0, tokens=576, requests=16)
    summary["turnstream-vllm"][32].update(frames_per_request=7.5, tokens=576, requests=16)
    assert "vllm-server 38.0 (36.0 tokens), turnstream-vllm 7.5 (36.0 tokens)" in serve_report.table(summary, [1, 32], met)


def _burner(tmp_path, seconds: float) -> Server:
    """A server whose tree burns ``seconds`` of CPU, then sleeps (as vLLM's engine spins after a request).
    Returned once the burn has begun: an interpreter still starting (slow on a loaded machine, and
    mostly waiting on the disk) is quiet, and ``settle`` would rightly return before the burn."""
    started = tmp_path / "burning"
    burn = (f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
            f"while time.process_time() < {seconds}: pass\ntime.sleep(60)")
    server = Server("burner", [sys.executable, "-c", burn], dict(os.environ))
    server.start(tmp_path / "burner.log")
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline and server.proc.poll() is None, "the burner never started"
        time.sleep(0.01)
    return server


def test_settle_waits_until_every_server_is_quiet(tmp_path) -> None:
    busy = _burner(tmp_path, 0.6)
    try:
        assert serve.settle({"busy": busy}) is not None
        assert busy.cpu_seconds() >= 0.55  # it returned once the burn was over, not before
        assert serve.settle({"busy": busy}) == QUIET_WINDOW_S  # quiet already: one window
    finally:
        busy.proc.kill()
        busy.proc.wait()


def test_settle_gives_up_on_a_server_that_never_goes_quiet(tmp_path) -> None:
    spinning = _burner(tmp_path, 600.0)
    try:
        assert serve.settle({"spinning": spinning}, timeout_s=3 * QUIET_WINDOW_S) is None
    finally:
        spinning.proc.kill()
        spinning.proc.wait()


def test_vllm_flags_from_engine_arguments() -> None:
    assert vllm_cli_flags({"enforce_eager": True, "max_model_len": 2048, "trust_remote_code": False}) == [
        "--enforce-eager", "--max-model-len", "2048"]


def test_tree_cpu_seconds_counts_the_children() -> None:
    burn = "import time\nwhile time.process_time() < 0.3: pass\nprint(flush=True)\ntime.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # it has used 0.3 s of CPU
        assert tree_cpu_seconds(child.pid) >= 0.25
        assert tree_cpu_seconds(os.getpid()) - time.process_time() >= 0.25  # the child's CPU is in our tree
    finally:
        child.kill()
        child.wait()


def test_processes_are_named_by_what_they_run() -> None:
    from bench.servers import process_label

    # a process whose command line reads as a decoder's, alive until killed
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; print(flush=True); time.sleep(60)",
                              "-m", "turnstream.cli", "worker", "decode"], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # it runs its own command line now (not the forked parent's)
        assert process_label(child.pid) == "worker decode"
        assert process_label(os.getpid()) != "worker decode"
    finally:
        child.kill()
        child.stdout.close()
    deadline = time.monotonic() + 10
    while process_label(child.pid) == "worker decode" and time.monotonic() < deadline:
        time.sleep(0.05)  # the kill lands
    assert process_label(child.pid) == "exited"  # a zombie: not reaped yet
    child.wait()
    assert process_label(child.pid) == "exited"


def test_a_servers_processes_are_found_by_label_for_its_flame_graphs(tmp_path) -> None:
    argv = [sys.executable, "-c", "import sys, time; print(flush=True); time.sleep(60)",
            "-m", "turnstream.cli", "worker", "decode"]  # reads as a decoder
    server = Server("tree", argv, dict(os.environ))
    server.start(tmp_path / "tree.log")
    try:
        deadline = time.monotonic() + 30
        while "worker decode" not in server.pids() and time.monotonic() < deadline:
            time.sleep(0.05)  # the interpreter is up and runs its own command line
        assert server.pids() == {"worker decode": [server.proc.pid]}
        assert serve.flame_targets(server.pids()) == {"decode": server.proc.pid}  # its flame graph's name
    finally:
        server.proc.kill()
        server.proc.wait()


def test_several_processes_of_one_label_get_a_flame_graph_each() -> None:
    assert serve.flame_targets({"gateway": [11, 12], "worker parser": [13], "valkey-server": [14]}) == {
        "gateway-1": 11, "gateway-2": 12, "parser": 13}


def test_a_supervisor_of_processes_of_its_own_label_is_left_out(tmp_path) -> None:
    """``turnstream up`` with several gateway processes: a supervisor and its children all read as
    "gateway"; the children serve, so they are the ones profiled."""
    child = ("import subprocess, sys, time\n"
             "procs = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '-m', 'turnstream.cli',"
             " 'gateway']) for _ in range(2)]\n"
             "print(flush=True)\ntime.sleep(60)")
    server = Server("supervised", [sys.executable, "-c", child, "-m", "turnstream.cli", "gateway"], dict(os.environ))
    server.start(tmp_path / "supervised.log")
    try:
        deadline = time.monotonic() + 30
        while len(server.pids().get("gateway", [])) != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = server.pids()["gateway"]
        assert len(found) == 2 and server.proc.pid not in found
    finally:
        os.killpg(server.proc.pid, 9)
        server.proc.wait()


def test_the_split_sets_each_request_apart_from_its_tokens() -> None:
    """``--split``: a one-token request's CPU is the cost per request; the measured requests' CPU beyond
    it, over their other tokens, the cost per further token."""
    summary = {"vllm-server": {32: {"tokens": 360, "requests": 10,  # 36 tokens a request
                                    "cpu_ms_per_token_by_process": {"vllm api server": 0.1, "VLLM::Worker": 0.2}}},
               "turnstream-vllm": {32: {"tokens": 360, "requests": 10, "cpu_ms_per_token_by_process": {
                   "worker decode": 0.08, "gateway": 0.06, "valkey-server": 0.02}}}}
    split = {"vllm-server": {"requests": 64, "cpu_ms_per_request_by_process": {"vllm api server": 2.2}},
             "turnstream-vllm": {"requests": 64, "cpu_ms_per_request_by_process": {
                 "worker decode": 2.0, "gateway": 1.6, "valkey-server": 0.6}}}
    text = serve_report.split_lines(summary, split, 32)
    assert "- vllm-server: vLLM's API server 2.20 ms a request + 40 µs a further token" in text  # (3.6 - 2.2) / 35
    assert "- turnstream-vllm: the pipeline 4.20 ms a request + 45 µs a further token" in text  # (5.76 - 4.2) / 35
    assert "worker decode 2.00 ms + 25 µs" in text and "worker parser 0.00 ms + 0 µs" in text
    assert serve_report.split_lines(summary, {}, 32) == ""
    alone = {"cpu_ms_per_request": 0.5, "cpu_us_per_further_token": 20.0, "cpu_us_per_token": 33.0,
             "tokens_per_request": 36.0}
    text = serve_report.split_lines(summary, {**split, serve_report.ENGINE_ALONE: alone}, 32)
    assert "- vllm-engine-alone: vLLM's AsyncLLM with nothing around it" in text
    assert "0.50 ms a request + 20 µs a further token (33 µs a token over 36.0 tokens)" in text
    # what each side carries beyond the engine client: 2.2 - 0.5, 40 - 20; 4.2 - 0.5, 45 - 20; decoder 2.0 - 0.5, 25 - 20
    assert ("beyond it, per request and further token: vLLM's API server 1.70 ms + 20 µs; turnstream-vllm's "
            "pipeline 3.70 ms + 25 µs (its decoder 1.50 ms + 5 µs)") in text
    assert serve_report.split_lines(summary, {serve_report.ENGINE_ALONE: alone}, 32) == ""  # nothing to set apart


def test_one_token_requests_must_report_their_token() -> None:
    ok = {"ttft": None, "chars": 0, "tokens": 1, "usage": True, "finish": "length", "error": None}
    assert serve.check_one_token("native", 32, [ok]) == []
    problems = serve.check_one_token("native", 32, [{**ok, "usage": False}, {"error": "HTTP 500", "tokens": 0}])
    assert problems == ["native at concurrency 32, one-token request 0: no usage of one token",
                        "native at concurrency 32, one-token request 1: HTTP 500"]


def test_summary_counts_the_frames_a_request_took() -> None:
    one = {"ttft": 0.01, "chars": 40, "usage": True, "tokens": 12, "finish": "length", "error": None, "prompt": "p"}
    run = {"results": [{**one, "frames": 3}, {**one, "frames": 5}], "wall_s": 1.0, "cpu_s": 0.5,
           "cpu_by_process": {"gateway": 0.5}}
    level = serve.summarise({4: [run]})[4]
    assert (level["frames_per_request"], level["tokens"], level["requests"]) == (4.0, 24, 2)


def test_the_plot_stacks_each_servers_cpu_per_token_by_process(tmp_path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = {"vllm-server": {32: _figures(30, 100)}, "turnstream-vllm": {32: _figures(20, 120)}}
    summary["vllm-server"][32]["cpu_ms_per_token_by_process"] = {"vllm api server": 0.1, "VLLM::Worker": 0.0004}
    fig, ax = plt.subplots()
    serve_report.cpu_bars(ax, summary, list(summary), 32)
    stacked = {(p.get_x(), p.get_height(), p.get_y()) for p in ax.patches if p.get_height() > 0}
    assert len(stacked) == 3  # the API server's 100 µs; 600 + 400 µs stacked; a process under 1 µs left out
    assert max(y + h for _, h, y in stacked) == 1000.0
    plt.close(fig)
    serve_report.plot(tmp_path / "serve.png", summary, [32])
    assert (tmp_path / "serve.png").stat().st_size > 0
