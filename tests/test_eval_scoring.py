"""Scores and the main table: S_j, S_i, S_agg, operator-balanced rates, baseline ratios."""

from __future__ import annotations

import json

import pytest

from atrex_mcp.cli import main as cli_main
from atrex_mcp.evaluate import scoring
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.models import DeviceInfo, EvalResult, Isolation, ShapeResult
from atrex_mcp.evaluate.table import main_table, render_markdown
from atrex_mcp.problemset.catalog import Catalog
from eval_support import T_SOL_MS, make_problem_root


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return Catalog(make_problem_root(tmp_path_factory.mktemp("problems")))


def _result(
    op: str,
    shapes: list[tuple[str, bool, float | None, float | None]],
    candidate: str = "candidate",
    compiled: bool = True,
) -> EvalResult:
    return EvalResult(
        op=op,
        candidate=candidate,
        candidate_sha256="0" * 64,
        dsl="triton",
        hardware="h200",
        compiled=compiled,
        shapes=[
            ShapeResult(
                id=i,
                correct=ok,
                time_ms=t,
                dsl_share=d,
                category=None if ok else "numeric_mismatch",
                stage=None if ok else "correctness",
            )
            for i, ok, t, d in shapes
        ],
        device=DeviceInfo(kind="cuda", name="NVIDIA H200"),
        isolation=Isolation(),
        started_at="2026-01-01T00:00:00+00:00",
    )


def test_shape_score_is_never_clipped():
    assert scoring.shape_score(2.0, 1.0) == 2.0
    assert scoring.shape_score(1.0, 4.0) == 0.25
    assert scoring.shape_score(None, 1.0) is None and scoring.shape_score(1.0, None) is None


def test_operator_score_is_the_median_over_correct_shapes_and_zero_without_any():
    assert scoring.operator_score([(True, 0.2), (True, 0.4), (False, None), (True, 0.9)]) == (0.4, "")
    assert scoring.operator_score([(False, None), (False, None)]) == (0.0, "")
    score, note = scoring.operator_score([(True, None)])
    assert score is None and note


def test_aggregate_normalises_weights_and_counts_missing_operators_as_zero():
    score, missing = scoring.aggregate({"a": 0.5}, {"a": 2.0, "b": 2.0})
    assert score == pytest.approx(0.25) and missing == ["b"]
    assert scoring.aggregate({"a": None}, {"a": 1.0})[0] is None


def test_times_are_never_scored_against_another_accelerator(catalog, tmp_path):
    assert scoring.profile_mismatch("h200-measured", "NVIDIA H200") == ""
    assert scoring.profile_mismatch("h20", "NVIDIA H200") and scoring.profile_mismatch("xpu-a", "NVIDIA H200")
    run = tmp_path / "run-x"
    run.mkdir()
    (run / "rms_norm.json").write_text(_result("rms_norm", [("0", True, 2 * T_SOL_MS, 1.0)]).model_dump_json())
    assert main_table([run], catalog, "h200").rows[0].per_operator[0].score == pytest.approx(0.5)
    assert main_table([run], catalog, "xpu-a").rows[0].per_operator[0].score is None


def test_roofline_reports_why_a_score_is_missing(catalog):
    roof = scoring.Roofline.load(catalog, "rms_norm", "h200")
    assert roof.t_sol_ms("0") == (T_SOL_MS, "")
    value, reason = scoring.Roofline.load(catalog, "rms_norm", "no-such-profile").t_sol_ms("0")
    assert value is None and "no-such-profile" in reason and "h200" in reason


def test_main_table_rows_ratios_and_dsl_adoption(catalog, tmp_path):
    run = tmp_path / "run-a"
    base = tmp_path / "baselines"
    run.mkdir(), base.mkdir()
    # candidate: shape 0 at 2·T_SOL, shape 1 faster than T_SOL (S = 2 counted, clipped at 1 in S_i), DSL-dominant
    cand = _result("rms_norm", [("0", True, 2 * T_SOL_MS, 0.9), ("1", True, T_SOL_MS / 2, 0.8)])
    (run / "rms_norm.json").write_text(cand.model_dump_json())
    (base / "rms_norm.eager.json").write_text(
        _result(
            "rms_norm", [("0", True, 8 * T_SOL_MS, 0.0), ("1", True, 2 * T_SOL_MS, 0.0)], candidate="eager"
        ).model_dump_json()
    )
    (base / "rms_norm.torch-compile.json").write_text(
        _result(
            "rms_norm", [("0", True, 4 * T_SOL_MS, 0.0), ("1", True, T_SOL_MS, 0.0)], candidate="torch-compile"
        ).model_dump_json()
    )
    (run / "notes.json").write_text(json.dumps({"not": "a result"}))
    table = main_table([run], catalog, "h200", [base])
    row = next(r for r in table.rows if r.run == "run-a")
    op = row.per_operator[0]
    assert op.score == pytest.approx((0.5 + 1.0) / 2) and op.faster_than_sol == 1
    assert op.vs_eager == pytest.approx(4.0) and op.vs_torch_compile == pytest.approx(2.0)
    assert op.dsl_dominant and row.dsl_adoption == 1.0 and row.compile_rate == 1.0 and row.correctness == 1.0
    assert row.s_agg == pytest.approx(op.score)  # one operator with weight 1
    assert {r.run for r in table.rows} == {"run-a", "eager", "torch-compile"}
    eager = next(r for r in table.rows if r.run == "eager")
    assert eager.dsl_adoption == 0.0 and eager.per_operator[0].vs_torch_compile == pytest.approx(0.5)
    markdown = render_markdown(table)
    assert "| run-a | 1 | 100% | 100% | 100% | 100% |" in markdown


def test_rates_are_operator_balanced(catalog, tmp_path):
    results = [
        _result("rms_norm", [(str(i), i < 1, 1.0, 0.0) for i in range(10)]),
        _result("other_op", [("0", True, 1.0, 1.0)]),
        _result("broken_op", [("0", False, None, None)], compiled=False),
    ]
    run = tmp_path / "run-b"
    run.mkdir()
    for r in results:
        (run / f"{r.op}.json").write_text(r.model_dump_json())
    row = main_table([run], catalog, "h200").rows[0]
    assert row.correctness == pytest.approx((0.1 + 1.0 + 0.0) / 3)
    assert row.fully_correct == pytest.approx(1 / 3) and row.compile_rate == pytest.approx(2 / 3)
    assert row.dsl_adoption == pytest.approx(1 / 3)
    assert row.failures == {"correctness/numeric_mismatch": 10}


def test_score_cli_writes_markdown_and_json(catalog, tmp_path, capsys):
    run = tmp_path / "run-c"
    run.mkdir()
    (run / "rms_norm.json").write_text(_result("rms_norm", [("0", True, 2 * T_SOL_MS, 1.0)]).model_dump_json())
    assert cli_main(["score", str(run), "--problems", str(catalog.roots[0]), "--out", str(tmp_path / "table")]) == 0
    assert "| run-c |" in capsys.readouterr().out
    assert json.loads((tmp_path / "table.json").read_text())["rows"][0]["s_agg"] == pytest.approx(0.5)


def test_dsl_adoption_is_not_applicable_when_nothing_was_profiled(catalog, tmp_path):
    run = tmp_path / "cpu-run"
    run.mkdir()
    (run / "rms_norm.json").write_text(_result("rms_norm", [("0", True, None, None)]).model_dump_json())
    table = main_table([run], catalog, "h200")
    assert table.rows[0].dsl_adoption is None
    assert "| n/a |" in render_markdown(table)


def test_floor_aware_scores_stand_beside_s_when_a_floor_is_given(catalog, tmp_path):
    assert scoring.floor_aware_score(0.010, 0.005, 0.020) == pytest.approx(0.5)  # T_SOL above the floor: S itself
    assert scoring.floor_aware_score(0.001, 0.005, 0.004) == pytest.approx(1.25)  # below: floor / T_cand, not clipped
    run = tmp_path / "run-f"
    run.mkdir()
    (run / "rms_norm.json").write_text(_result("rms_norm", [("0", True, 4 * T_SOL_MS, 1.0)]).model_dump_json())
    plain = main_table([run], catalog, "h200")
    assert plain.rows[0].s_floor_agg is None and "S_floor" not in render_markdown(plain)
    table = main_table([run], catalog, "h200", floor_ms=2 * T_SOL_MS)
    row, op = table.rows[0], table.rows[0].per_operator[0]
    assert op.score == pytest.approx(0.25) and op.score_floor == pytest.approx(0.5)
    assert row.s_agg == pytest.approx(0.25) and row.s_floor_agg == pytest.approx(0.5)
    assert "S_floor_agg" in render_markdown(table)


def test_a_partial_operator_score_covers_the_judged_shapes_and_says_so():
    judged = [(True, 0.2), (False, None), (True, 0.6)]
    assert scoring.judged_operator_score(judged, 0) == scoring.operator_score(judged)
    score, note = scoring.judged_operator_score(judged, 2)
    assert score == pytest.approx(0.4) and note.startswith("partial: over the 3 judged shapes only, 2 not run")
    assert scoring.judged_operator_score([], 3) == (None, "partial: no shape was judged (3 not run)")


def test_a_partial_result_is_marked_in_the_table_and_its_not_run_shapes_are_no_failures(catalog, tmp_path):
    run = tmp_path / "run-p"
    run.mkdir()
    partial = _result("rms_norm", [("0", True, 2 * T_SOL_MS, 1.0), ("1", True, 2 * T_SOL_MS, 1.0)])
    partial.shapes.append(ShapeResult(id="smoke", correct=False, stage=tx.NOT_RUN, category=tx.NOT_RUN_DEADLINE))
    partial.partial = "deadline"
    (run / "rms_norm.json").write_text(partial.model_dump_json())
    table = main_table([run], catalog, "h200")
    row, op = table.rows[0], table.rows[0].per_operator[0]
    assert op.score == pytest.approx(0.5) and (op.shapes, op.correct, op.not_run, op.partial) == (2, 2, 1, "deadline")
    assert op.correctness == 1.0 and row.fully_correct == 0.0 and row.failures == {}
    assert row.partial_operators == ["rms_norm"] and row.s_agg == pytest.approx(0.5)
    markdown = render_markdown(table)
    assert "| 0.5000 † |" in markdown and "2/2 (+1 not run)" in markdown
    assert "rms_norm (deadline: 1 of 3 shapes not run)" in markdown


def test_an_operator_with_no_shape_judged_is_in_no_rate(catalog, tmp_path):
    """A sampled baseline can leave an operator wholly unjudged: it did not fail to compile and
    is not 0 % correct; it is in none of the rates, reads "—", and counts 0 in S_agg (†)."""
    run = tmp_path / "run-u"
    run.mkdir()
    (run / "rms_norm.json").write_text(
        _result("rms_norm", [("0", True, 2 * T_SOL_MS, 1.0), ("1", False, None, None)]).model_dump_json()
    )
    unjudged = _result("l2_norm", [], compiled=False)
    unjudged.shapes = [ShapeResult(id="0", correct=False, stage=tx.NOT_RUN, category=tx.NOT_RUN_UNSELECTED)]
    unjudged.partial = "selection"
    (run / "l2_norm.json").write_text(unjudged.model_dump_json())
    table = main_table([run], catalog, "h200")
    row = table.rows[0]
    op = next(o for o in row.per_operator if o.op == "l2_norm")
    assert (op.compiled, op.correctness, op.score) == (None, None, None)
    assert (row.compile_rate, row.correctness, row.fully_correct) == (1.0, 0.5, 0.0)
    alone = tmp_path / "run-v"  # the weighted operator itself unjudged: 0 in S_agg, listed as missing
    alone.mkdir()
    (alone / "rms_norm.json").write_text(unjudged.model_copy(update={"op": "rms_norm"}).model_dump_json())
    row = main_table([alone], catalog, "h200").rows[0]
    assert (row.s_agg, row.missing_operators, row.per_operator[0].compiled) == (0.0, ["rms_norm"], None)
    assert "| l2_norm | — | 0/0 (+1 not run) |" in render_markdown(table)


def test_a_complete_result_carries_no_partial_mark(catalog, tmp_path):
    run = tmp_path / "run-q"
    run.mkdir()
    (run / "rms_norm.json").write_text(_result("rms_norm", [("0", True, 2 * T_SOL_MS, 1.0)]).model_dump_json())
    table = main_table([run], catalog, "h200")
    op = table.rows[0].per_operator[0]
    assert (op.not_run, op.partial, table.rows[0].partial_operators) == (0, None, [])
    assert "†" not in render_markdown(table) and "not run" not in render_markdown(table)
