"""measurements/optimise_over_mcp.py end to end on CPU: the loop an agent drives over stdio
(atrex-mcp serve as a subprocess), every call recorded, the iteration's plan citing the profile
and wiki ids the server returned, the package written, and a budget that stops it cleanly."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atrex_mcp.paths import REPO_ROOT
from tests.server_fixtures import hidden_figures, leaks

SCRIPT = REPO_ROOT / "measurements" / "optimise_over_mcp.py"
BASELINE = REPO_ROOT / "measurements" / "kernels" / "rms_norm_two_pass.py"
CANDIDATE = REPO_ROOT / "gpu_wiki" / "kernels" / "rms_norm.py"
PLAN = REPO_ROOT / "measurements" / "kernels" / "rms_norm_plan.json"
LOOP = [
    "list_problems",
    "get_problem",
    "wiki_search",
    "wiki_read",
    "validate",
    "start_run",
    "profile_kernel",
    "submit_baseline",
    "record_iteration",
    "run_state",
    "package_run",
]


def command(out: Path, *extra: str, pair: str | None = None) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TRITON_INTERPRET": "1", "HOME": str(out.parent)}
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--pair",
        pair or f"rms_norm:{BASELINE}:{CANDIDATE}:{PLAN}",
        "--out",
        str(out),
        *extra,
    ]
    return cmd, env


def drive(out: Path, *extra: str, pair: str | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    cmd, env = command(out, *extra, pair=pair)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    timeline = out / "timeline.json"
    assert timeline.is_file(), done.stdout + done.stderr
    return done, json.loads(timeline.read_text())


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_text().encode()).hexdigest()


def test_the_loop_over_stdio_records_every_call_and_cites_what_the_server_returned(tmp_path):
    out = tmp_path / "loop"
    done, result = drive(out, "--shapes", "rms_norm=smoke")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert result["pairs"][0]["verdict"] == "ok" and result["pairs"][0]["shapes"] == ["smoke"]
    assert "rms_norm: ok; baseline accepted; iteration rejected: not timed" in done.stdout
    calls = {c["tool"]: c for c in result["calls"]}
    assert [c["tool"] for c in result["calls"]] == LOOP and result["status"] == "finished"
    assert all(not c["is_error"] and isinstance(c["answer"], dict) and c["wall_s"] > 0 for c in result["calls"])
    # Kernel sources are recorded as their hash, never as text.
    assert calls["validate"]["arguments"]["source"]["sha256"] == sha(BASELINE)
    assert calls["record_iteration"]["arguments"]["source"]["sha256"] == sha(CANDIDATE)
    assert "tl.load" not in json.dumps([c["arguments"] for c in result["calls"]])

    profile = calls["profile_kernel"]["answer"]
    assert profile["device"] == "cpu (Triton interpreter)" and profile["fallback"]
    top_hit = calls["wiki_search"]["answer"]["hits"][0]["doc_id"]
    assert calls["wiki_read"]["answer"]["doc"]["doc_id"] == top_hit
    record = calls["record_iteration"]["answer"]["record"]
    assert record["number"] == 1 and record["plan"]["evidence"] == [profile["profile_id"]]
    assert top_hit in record["plan"]["knowledge"] and record["plan"]["category"] == "split_fusion"
    assert record["status"] == "rejected" and "not timed" in record["reason"]  # CPU: nothing can be timed
    iteration = calls["record_iteration"]["answer"]
    assert not iteration["timed"] and any("does not mean slower" in n for n in iteration["notes"])
    assert "shapes_json" not in calls["get_problem"]["answer"]
    assert not calls["wiki_read"]["answer"]["doc"]["text"].startswith("+++")
    assert calls["run_state"]["answer"]["summary"]["recorded"] == 1

    # The package holds the accepted kernel (the baseline, since nothing was timed) and its manifest.
    package = calls["package_run"]["answer"]
    assert Path(package["artifact"]).read_text() == BASELINE.read_text() and Path(package["manifest"]).is_file()
    assert Path(package["artifact"]).is_relative_to(out / "workspace")

    # The run's own timeline, as `atrex-mcp runs show --json` prints it.
    run = json.loads((out / "rms_norm" / "run_timeline.json").read_text())
    assert run["run"]["run_id"] == calls["start_run"]["answer"]["run_id"]
    assert [it["number"] for it in run["iterations"]] == [0, 1]
    assert run["iterations"][1]["plan"]["evidence"] == [profile["profile_id"]]
    assert "packaged" in {e["kind"] for e in run["events"]}
    markdown = (out / "timeline.md").read_text()
    assert all(f" {tool} |" in markdown for tool in LOOP) and "status **finished**" in markdown


def test_the_budget_stops_the_loop_cleanly_with_what_it_did(tmp_path):
    out = tmp_path / "short"
    done, result = drive(out, "--budget-s", "5")
    assert done.returncode == 1 and result["status"] == "stopped by the budget"
    tools = [c["tool"] for c in result["calls"]]
    assert tools == LOOP[: len(tools)] and "validate" not in tools  # measuring calls keep a reserve the budget lacks
    assert result["pairs"][0]["not_run"].startswith(f"budget spent before {LOOP[len(tools)]}")
    assert "not run: budget spent" in " ".join(result["pairs"][0]["verdict"])
    assert "stopped by the budget" in (out / "timeline.md").read_text()


def test_a_signal_stops_the_loop_and_keeps_the_call_in_flight_and_the_run_timeline(tmp_path):
    out = tmp_path / "killed"
    cmd, env = command(out)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # stop it once the run exists
        timeline = out / "timeline.json"  # replaced whole after each call, never read half-written
        if timeline.is_file() and "start_run" in [c["tool"] for c in json.loads(timeline.read_text())["calls"]]:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    result = json.loads((out / "timeline.json").read_text())
    assert proc.returncode == 1 and result["status"] == "killed by SIGTERM", stdout + stderr[-3000:]
    pair = result["pairs"][0]
    run = json.loads((out / "rms_norm" / "run_timeline.json").read_text())
    assert pair["run_timeline"] == "rms_norm/run_timeline.json" and run["run"]["run_id"] == pair["run_id"]
    assert pair["verdict"] != "ok" and "killed by SIGTERM" in (out / "timeline.md").read_text()
    if result["calls"][-1]["tool"] != "start_run":  # the call it interrupted is recorded as such
        assert result["calls"][-1]["error"].startswith("interrupted")


def test_shapes_for_an_operator_without_a_pair_is_refused_in_one_line(tmp_path):
    cmd, env = command(tmp_path / "bad", "--shapes", "fused_moe=spread:4")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--shapes fused_moe=spread:4: no --pair for fused_moe (pairs: rms_norm)" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_benchmark_mode_answers_carry_no_hidden_figure(tmp_path):
    out = tmp_path / "bench"
    done, result = drive(out, "--benchmark-mode", pair=f"rms_norm:{BASELINE}:{CANDIDATE}")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert [c["tool"] for c in result["calls"]] == LOOP
    numbers, strings = hidden_figures("rms_norm")
    text = json.dumps([c["answer"] for c in result["calls"]])
    assert not leaks(text, numbers, strings)
    assert 't_sol_ms": 0' not in text and all(
        h["doc_id"] != "kernels/rms_norm" for h in result["calls"][2]["answer"]["hits"]
    )


def load_script():
    spec = importlib.util.spec_from_file_location("optimise_over_mcp", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_loop_asks_for_the_shapes_a_cut_get_problem_answer_left_out():
    """unified_attention's get_problem answer is cut to fit; the script reads the ids its note names."""
    from atrex_mcp.policy import Policy
    from atrex_mcp.problemset.catalog import Catalog
    from atrex_mcp.server.app import DEFAULT_MAX_OUTPUT_CHARS, ServerConfig, ServerContext, fit_output
    from atrex_mcp.server.tools import get_problem

    app = ServerContext.__new__(ServerContext)
    app.catalog = Catalog()
    app.policy, app.config = Policy("optimize", app.catalog), ServerConfig(mode="optimize")
    answer = fit_output(get_problem(app, "unified_attention"), DEFAULT_MAX_OUTPUT_CHARS).model_dump(mode="json")
    left_out = load_script().shapes_left_out(answer)
    kept = [s["id"] for s in answer["shapes"]]
    assert (
        left_out
        and "smoke" in left_out
        and kept + left_out == [s.id for s in app.catalog.visible("unified_attention").shapes]
    )


def test_a_pair_is_whole_only_with_an_accepted_baseline_and_a_judged_timed_iteration():
    script = load_script()
    steps = ["get_problem", "validate_baseline", "start_run", "profile_baseline", "submit_baseline"]
    steps += ["record_iteration", "run_state", "package_run"]
    done = {
        "op": "rms_norm",
        "steps": {name: {"ok": True} for name in steps},
        "baseline_record": {"status": "accepted"},
        "iteration": {"status": "accepted", "reason": "faster beyond measured noise", "timed": True},
        "run_id": "run-1",
        "run_timeline": "rms_norm/run_timeline.json",
        "skipped": "profile_candidate: 3 s of the pair's budget left, the baseline's profile took 9 s",
    }
    assert script.pair_problems(done, gpu=True) == []
    assert script.pair_problems({**done, "skipped": None}, gpu=True) == ["not called: profile_candidate"]
    untimed = {**done, "iteration": {**done["iteration"], "status": "rejected", "timed": False}}
    assert script.pair_problems(untimed, gpu=False) == []
    assert script.pair_problems(untimed, gpu=True) == ["the iteration was not timed although the server has a GPU"]
    failed = {**done, "iteration": {"status": "failed", "reason": "not correct"}}
    assert "the iteration is failed, not accepted or rejected with a reason" in script.pair_problems(failed, gpu=True)
