"""The report's arithmetic on a run with GPU-timed results (written here as the evaluator
would, against the real roofline of each shape), and the multi-run report through the CLI."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from atrex_mcp.agentbench.layout import RunStore
from atrex_mcp.agentbench.models import OpState, Submission
from atrex_mcp.agentbench.report import build_report
from atrex_mcp.agentbench.report_render import write_report
from atrex_mcp.agentbench.runner import RunRequest, open_run
from atrex_mcp.cli import main
from atrex_mcp.evaluate.models import DeviceInfo, EvalResult, Isolation, ShapeResult
from atrex_mcp.problemset.catalog import Catalog

PROFILE = "h200"


def t_sol(op: str, shape: str) -> float:
    return Catalog().hidden(op).roofline["shapes"][shape]["t_sol_ms"][PROFILE]


def result(op: str, shapes: list[ShapeResult], candidate: str = "candidate") -> EvalResult:
    return EvalResult(
        op=op,
        candidate=candidate,
        candidate_sha256="0" * 64,
        dsl="triton",
        hardware=PROFILE,
        compiled=True,
        shapes=shapes,
        device=DeviceInfo(kind="cuda", name="NVIDIA H200"),
        isolation=Isolation(),
        started_at="2026-01-01T00:00:00+00:00",
    )


def timed(op: str, shape: str, factor: float, dsl_share: float | None = 0.9, correct: bool = True) -> ShapeResult:
    """A shape timed at `factor` × its speed-of-light time (S_j = 1/factor)."""
    if not correct:
        return ShapeResult(
            id=shape, correct=False, stage="correctness", category="numeric_mismatch", message="off by a lot"
        )
    return ShapeResult(id=shape, correct=True, time_ms=t_sol(op, shape) * factor, dsl_share=dsl_share)


def make_run(root: Path, name: str) -> Path:
    _config, layout = open_run(
        RunRequest(out=root / name, agent="/bin/true", ops="rms_norm,silu_and_mul,l2_norm", agent_uid="same")
    )
    store = RunStore(layout)
    for op, outcome, timed_out in (
        ("rms_norm", "submitted", False),
        ("silu_and_mul", "submitted", False),
        ("l2_norm", "no_submission", True),
    ):
        store.save_state(
            OpState(
                op=op,
                status="done",
                attempts=1,
                timed_out=timed_out,
                elapsed_s=60.0,
                submission=Submission(
                    outcome=outcome, artifact=f"ops/{op}/submission/{op}.py" if outcome == "submitted" else None
                ),
            )
        )
    layout.baselines_dir.mkdir(parents=True)
    results = [
        result("rms_norm", [timed("rms_norm", "0", 2.0), timed("rms_norm", "1", 2.0), timed("rms_norm", "2", 0.5)]),
        result(
            "silu_and_mul",
            [timed("silu_and_mul", "0", 4.0, dsl_share=0.3), timed("silu_and_mul", "1", 1.0, correct=False)],
        ),
    ]
    for r in results:
        (layout.eval_dir / f"{r.op}.json").write_text(r.model_dump_json())
    eager = result("rms_norm", [timed("rms_norm", s, 3.0, dsl_share=None) for s in ("0", "1", "2")], candidate="eager")
    (layout.baselines_dir / "rms_norm.eager.json").write_text(eager.model_dump_json())
    return layout.root


def test_scores_and_rates_over_every_operator_of_the_run(tmp_path):
    report = build_report([make_run(tmp_path, "timed")])
    row = report.runs[0].row
    weights = Catalog().weights()
    s_i = {
        "rms_norm": 0.5,
        "silu_and_mul": 0.25,
        "l2_norm": 0.0,
    }  # medians of 1/factor over correct shapes; no submission = 0
    assert row.timed and row.dsl_measured and row.s_note is None
    assert row.compile_rate == pytest.approx(2 / 3) and row.correctness == pytest.approx((1 + 0.5 + 0) / 3)
    assert row.fully_correct == pytest.approx(1 / 3) and row.dsl_adoption == pytest.approx(1 / 3)
    assert row.s == pytest.approx(statistics.fmean(s_i.values()))
    assert row.s_agg == pytest.approx(sum(weights[op] * s for op, s in s_i.items()) / sum(weights[op] for op in s_i))
    assert row.vs_eager == pytest.approx(1.5) and row.vs_torch_compile is None
    lines = {line.op: line for line in report.runs[0].operators}
    assert lines["rms_norm"].faster_than_sol == 1 and lines["rms_norm"].regime == "memory"
    assert (
        lines["silu_and_mul"].failure == "correctness/numeric_mismatch"
        and lines["l2_norm"].failure == "agent/budget_reached"
    )
    assert any("faster than the roofline" in n for n in row.notes)
    failures = {f.failure: f for f in report.failures}
    assert failures["correctness/numeric_mismatch"].operators == {"timed": 1} and failures[
        "correctness/numeric_mismatch"
    ].shapes == {"timed": 1}
    assert [b.run for b in report.baselines] == ["eager"] and report.baselines[0].s is not None


def test_an_evaluation_that_judged_no_shape_counts_as_failed_in_the_rates(tmp_path):
    """The main table leaves an operator with no judged shape out of its rates (a sampled
    baseline did not measure it); a benchmark run was given the operator, so here it fails."""
    root = make_run(tmp_path, "stopped")
    lost = result("silu_and_mul", [ShapeResult(id="0", correct=False, stage="not_run", category="not_run_deadline")])
    lost.partial = "deadline"
    (root / "eval" / "silu_and_mul.json").write_text(lost.model_dump_json())
    row = build_report([root]).runs[0].row
    assert row.compile_rate == pytest.approx(1 / 3) and row.correctness == pytest.approx(1 / 3)


@pytest.mark.slow
def test_report_files_show_the_numbers(tmp_path):
    report = build_report([make_run(tmp_path, "timed")])
    paths = write_report(report, tmp_path / "out")
    assert {p.name for p in paths} == {
        "report.md",
        "report.html",
        "report.json",
        "correctness_dsl.png",
        "s_by_regime.png",
        "s_vs_weight.png",
    }
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert f"| {report.runs[0].row.s:.4f} |" in markdown and "1.50×" in markdown and "(1 shape(s) S>1)" in markdown
    assert json.loads((tmp_path / "out" / "report.json").read_text())["runs"][0]["row"]["s"] == pytest.approx(
        report.runs[0].row.s
    )


def test_several_runs_in_one_report_need_an_out_dir(tmp_path, capsys):
    first, second = make_run(tmp_path, "a"), make_run(tmp_path, "b")
    assert main(["bench", "report", str(first), str(second)]) == 2
    assert "needs --out" in capsys.readouterr().err
    assert (
        main(["bench", "report", str(first), str(second), "--out", str(tmp_path / "both"), "--title", "Two runs"]) == 0
    )
    report = json.loads((tmp_path / "both" / "report.json").read_text())
    assert [r["row"]["run"] for r in report["runs"]] == ["a", "b"] and report["title"] == "Two runs"
    html = (tmp_path / "both" / "report.html").read_text()
    assert "<h2>Per operator: a</h2>" in html and "<h2>Per operator: b</h2>" in html and "a: operators" in html


def test_times_are_not_scored_against_another_accelerators_profile(tmp_path):
    row = build_report([make_run(tmp_path, "timed")], hardware="h100-sxm").runs[0].row
    assert row.timed and row.s is None and row.s_agg is None and "another accelerator" in row.s_note
