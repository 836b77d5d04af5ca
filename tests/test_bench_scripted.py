"""End to end on CPU with the scripted agent (examples/bench_scripted_agent.py) through the
command line: `bench run` over five operators (three with a known-good kernel, one without, one
whose kernel validates but breaks the output contract), resuming, `bench eval` on the smoke
shape, `bench report`."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from atrex_mcp.agentbench.layout import RunLayout, RunStore
from atrex_mcp.cli import main

ROOT = Path(__file__).resolve().parent.parent
KNOWN = ("rms_norm", "silu_and_mul", "l2_norm")
UNKNOWN = "moe_sum_reduce"  # no kernel in the scripted agent's folder: it stops without packaging
LEAKY = "layer_norm"  # its kernel validates but imports os.listdir: package refuses it
HIDDEN_NAMES = ("metadata.json", "roofline.json", "weights.json")


def scripted_agent(kernels: Path) -> str:
    return f"{sys.executable} {ROOT / 'examples' / 'bench_scripted_agent.py'} --kernels {kernels}"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("bench")
    kernels = base / "kernels"
    kernels.mkdir()
    for op in KNOWN:
        shutil.copy(ROOT / "gpu_wiki" / "kernels" / f"{op}.py", kernels / f"{op}.py")
    leaky = (ROOT / "gpu_wiki" / "kernels" / f"{LEAKY}.py").read_text()
    (kernels / f"{LEAKY}.py").write_text(leaky.replace("import torch\n", "import torch\nfrom os import listdir\n", 1))
    out = base / "scripted"
    ops = ",".join([*KNOWN, UNKNOWN, LEAKY])
    code = main(
        [
            "bench",
            "run",
            "--agent",
            scripted_agent(kernels),
            "--ops",
            ops,
            "--parallel",
            "2",
            "--budget-minutes",
            "4",
            "--agent-uid",
            "same",
            "--plain",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    return out


@pytest.mark.slow
def test_each_operator_ran_in_its_own_workspace_and_was_collected(run_dir):
    layout = RunLayout(run_dir)
    states = RunStore(layout).states([*KNOWN, UNKNOWN, LEAKY])
    for op in KNOWN:
        state = states[op]
        assert state.status == "done" and state.submission.outcome == "submitted", state
        assert state.exit_code == 0 and not state.timed_out and state.attempts == 1
        assert (run_dir / state.submission.artifact).read_text() == (
            ROOT / "gpu_wiki" / "kernels" / f"{op}.py"
        ).read_text()
        transcript = layout.transcript(op).read_text()
        assert (
            "list_problems:" in transcript and "validate: 1 passed, 0 failed" in transcript and "package:" in transcript
        )
        names = {p.name for p in layout.workspace(op).iterdir()}
        assert names == {"reference.py", "input.py", "shapes.json", "PROMPT.md", "kernel.py", "atrex-package"}
        assert not [p for p in layout.workspace(op).rglob("*") if p.name in HIDDEN_NAMES]
        assert f"`{op}`" in layout.prompt_file(op).read_text()
    missing = states[UNKNOWN]
    assert missing.status == "done" and missing.submission.outcome == "no_submission" and missing.exit_code == 3
    assert layout.transcript(UNKNOWN).read_text().startswith("stopped: no known kernel")


@pytest.mark.slow
def test_a_kernel_the_contract_refuses_is_reported_with_rule_line_and_fix(run_dir):
    layout = RunLayout(run_dir)
    state = RunStore(layout).load_state(LEAKY)
    line = (layout.workspace(LEAKY) / "kernel.py").read_text().splitlines().index("from os import listdir") + 1
    assert state.status == "done" and state.submission.outcome == "contract_failed"
    assert state.submission.artifact is None
    (violation,) = state.submission.violations
    assert violation.startswith(f"file_or_network_access (line {line}): import of os.listdir") and "fix: " in violation
    transcript = layout.transcript(LEAKY).read_text()
    assert "validate: 1 passed, 0 failed" in transcript and "contract: refused" in transcript
    assert f"contract: file_or_network_access (line {line})" in transcript and "— fix: " in transcript
    assert "stopped: package failed" in transcript and "contract_violation" in transcript


@pytest.mark.slow
def test_a_rerun_skips_finished_operators_and_redoes_an_interrupted_one(run_dir, capsys):
    store = RunStore(RunLayout(run_dir))
    crashed = store.load_state(UNKNOWN).model_copy(update={"status": "running"})  # as if the machine died mid-run
    store.save_state(crashed)
    started = time.monotonic()
    assert main(["bench", "run", "--out", str(run_dir), "--plain"]) == 0
    err = capsys.readouterr().err
    assert "4 already done" in err and f"{UNKNOWN}: agent started" in err
    assert not any(f"{op}: agent started" in err for op in (*KNOWN, LEAKY))
    assert store.load_state(UNKNOWN).attempts == 2 and store.load_state(KNOWN[0]).attempts == 1
    assert time.monotonic() - started < 120
    assert main(["bench", "run"]) == 2  # --out is required
    assert capsys.readouterr().err.startswith("error: atrex-mcp bench run: the following arguments are required: --out")
    assert main(["bench", "run", "--out", str(run_dir), "--condition", "optimizer", "--plain"]) == 2
    assert "other settings (--condition)" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_judges_each_submission_once_and_the_report_says_what_was_not_measured(run_dir, capsys):
    assert main(["bench", "eval", str(run_dir), "--shapes", "smoke", "--seeds", "1", "--plain"]) == 0
    err = capsys.readouterr().err
    assert "3 evaluated" in err and "2 without a submission" in err and "not timed: no GPU" in err
    for op in KNOWN:
        result = json.loads((run_dir / "eval" / f"{op}.json").read_text())
        assert result["compiled"] and [s["correct"] for s in result["shapes"]] == [True]
    assert main(["bench", "eval", str(run_dir), "--shapes", "smoke", "--seeds", "1", "--plain"]) == 0
    assert "3 already evaluated" in capsys.readouterr().err
    assert main(["bench", "eval", str(run_dir), "--shapes", "smoke", "--seeds", "2", "--plain"]) == 2

    assert main(["bench", "report", str(run_dir)]) == 0
    out_dir = run_dir / "report"
    report = json.loads((out_dir / "report.json").read_text())
    row = report["runs"][0]["row"]
    assert (row["operators"], row["submitted"], row["evaluated"]) == (5, 3, 3)
    assert row["compile_rate"] == pytest.approx(0.6) and row["correctness"] == pytest.approx(0.6)
    assert row["s"] is None and row["s_agg"] is None and row["dsl_adoption"] is None and row["vs_eager"] is None
    assert "no GPU" in row["s_note"]
    failures = {f["failure"]: f for f in report["failures"]}
    assert failures["agent/no_submission"]["operators"] == {"scripted": 1}
    assert failures["contract/file_or_network_access"]["operators"] == {"scripted": 1}
    lines = {line["op"]: line for line in report["runs"][0]["operators"]}
    assert (
        lines["rms_norm"]["regime"] == "memory"
        and lines["rms_norm"]["weight"] > 0
        and lines[UNKNOWN]["evaluated"] is False
    )
    html = (out_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "n/a" in html and "<script" not in html
    markdown = (out_dir / "report.md").read_text()
    assert "| scripted |" in markdown and "(s_by_regime.png)" in markdown and "agent/no_submission" in markdown
    for name in ("correctness_dsl.png", "s_by_regime.png", "s_vs_weight.png"):
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
