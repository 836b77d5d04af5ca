"""The judge-throughput script (measurements/judge_throughput_gpu.py), as a CPU dry run: it judges
the wiki kernels through bench eval's local path and reports where each shape's time went, by
part, by request to the worker and by the judge's own functions, with no per-shape time or S."""

from __future__ import annotations

import json

import measurements_support  # noqa: F401  (puts measurements/ on the path)
from measurements import judge_throughput_gpu


def test_a_dry_run_judges_the_smoke_shapes_and_splits_their_seconds(tmp_path, capsys):
    import atrex_mcp.evaluate as evaluate_package
    from atrex_mcp.evaluate import evaluator, session

    before = (evaluate_package.evaluate, session.Session.call, evaluator.compare_outputs, evaluator.Trial.inputs)
    assert (
        judge_throughput_gpu.main(["--ops", "l2_norm", "--seeds", "2", "--shapes", "smoke", "--out", str(tmp_path)])
        == 0
    )
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("judge_throughput: 1 shapes in ") and "s/shape" in line
    (report,) = tmp_path.glob("*.json")
    found = json.loads(report.read_text())
    op = found["ops"]["l2_norm"]
    assert (found["shapes_judged"], op["judged"], op["verdicts"]) == (1, 1, {"correct": 1})
    assert set(op["parts_per_shape_s"]) >= {"correctness", "reference_and_compare"}
    assert op["requests"]["run"]["n"] == 2 and op["requests"]["load"]["n"] == 1  # one run request per seed
    assert op["judge_functions"]["reference_output"]["n"] == 2
    # seed #1's reference was made while the worker ran seed #0, and part of it hidden by that run
    assert op["judge_functions"]["reference_ahead"]["n"] == 1 and found["overlap"] == "on"
    assert 0 <= op["judge_functions"]["reference_ahead_hidden"]["s"] <= op["judge_functions"]["reference_ahead"]["s"]
    assert "s of references made while the worker ran" in line
    assert "time_ms" not in report.read_text() and "score" not in report.read_text()
    assert (tmp_path / report.name.replace(".json", ".md")).read_text().startswith("# Judge throughput")
    # the meter's wrappers (and the deadline they give each evaluation) are gone with the run
    after = (evaluate_package.evaluate, session.Session.call, evaluator.compare_outputs, evaluator.Trial.inputs)
    assert after == before


def test_a_run_kept_in_run_dir_is_continued_and_a_cut_short_operator_judged_again(tmp_path, capsys):
    """--run-dir: the second call judges only what the first did not judge in full, and reports
    every operator judged so far, with the meter's figures of both calls."""
    import pytest

    from atrex_mcp.evaluate.models import EvalResult

    run = tmp_path / "kept"
    args = ["--ops", "l2_norm,rms_norm", "--seeds", "1", "--shapes", "smoke", "--run-dir", str(run)]
    assert judge_throughput_gpu.main([*args, "--out", str(tmp_path / "a")]) == 0
    path = run / "run" / "eval" / "l2_norm.json"
    cut = EvalResult.model_validate_json(path.read_text()).model_copy(update={"partial": "deadline"})
    path.write_text(cut.model_dump_json())  # as if the first call's budget had run out in it
    kept = (run / "run" / "eval" / "rms_norm.json").read_text()
    assert judge_throughput_gpu.main([*args, "--out", str(tmp_path / "b")]) == 0
    (report,) = (tmp_path / "b").glob("*.json")
    found = json.loads(report.read_text())
    assert found["judged_again"] == ["l2_norm"] and set(found["ops"]) == {"l2_norm", "rms_norm"}
    assert (run / "run" / "eval" / "rms_norm.json").read_text() == kept  # not judged again
    assert found["shapes_judged"] == 2 and all(o["requests"]["run"]["n"] == 1 for o in found["ops"].values())
    assert found["wall_s"] == pytest.approx(sum(o["wall_s"] for o in found["ops"].values()), abs=0.02)
    assert all("reference_ahead" not in o["judge_functions"] for o in found["ops"].values())  # one seed: no next
    with pytest.raises(SystemExit, match="continue it with --ops l2_norm,rms_norm"):
        judge_throughput_gpu.main(["--ops", "l2_norm", *args[2:], "--out", str(tmp_path / "c")])
    capsys.readouterr()


def test_overlap_off_judges_in_the_strict_order_and_restores_the_setting(tmp_path, capsys):
    from atrex_mcp.evaluate import evaluator

    limit = evaluator.OVERLAP_MAX_BYTES
    args = ["--ops", "l2_norm", "--seeds", "2", "--shapes", "smoke", "--overlap", "off", "--out", str(tmp_path)]
    assert judge_throughput_gpu.main(args) == 0
    assert "overlap off: 0.0 s of references made" in capsys.readouterr().out.strip().splitlines()[-1]
    (report,) = tmp_path.glob("*.json")
    found = json.loads(report.read_text())
    assert found["overlap"] == "off" and "reference_ahead" not in found["ops"]["l2_norm"]["judge_functions"]
    assert found["ops"]["l2_norm"]["verdicts"] == {"correct": 1}
    assert limit == evaluator.OVERLAP_MAX_BYTES


def test_the_memory_watch_keeps_each_operators_fullest_sample_under_the_step_in_progress(tmp_path):
    """A sample taken inside a metered function carries that function's label; each operator keeps
    its highest sample, through a run continued over calls, and the report names the step."""
    meter = judge_throughput_gpu.Meter()
    meter.op = "rms_norm"
    gib = judge_throughput_gpu.GIB

    def reference(used_bytes: int) -> None:
        meter.sample_memory(used_bytes, 3 * gib, 140 * gib)

    timed = meter._timed(meter.functions, "reference_output", reference)
    meter.sample_memory(10 * gib, 1 * gib, 140 * gib)  # between requests
    timed(90 * gib + (4 << 20))
    timed(40 * gib)
    meter.sample_memory(90 * gib + (2 << 20), 1 * gib, 140 * gib)  # lower, though the same to 0.01 GiB
    assert meter.labels == [] and meter.label == "between"
    assert meter.per_op("rms_norm")["gpu_memory_highest"] == {
        "label": "reference_output", "used_gib": 90.0, "judge_reserved_gib": 3.0, "total_gib": 140.0
    }  # fmt: skip
    meter.merge_into(tmp_path / "meter.json")
    kept = judge_throughput_gpu.Meter.load(tmp_path / "meter.json")
    assert kept.per_op("rms_norm")["gpu_memory_highest"]["label"] == "reference_output"
    found = {"set": "wiki", "seeds": 1, "shapes_judged": 1, "wall_s": 1.0, "call_wall_s": 1.0, "s_per_shape": 1.0,
             "full_set_projection_min": 7.3, "warm_profiler": True, "parts_per_shape_s": {},
             "date": "2026-12-02T00:00:00Z", "gpu": "test", "gpus": 1, "commit": "abc", "command": "x",
             "versions": {},
             "ops": {"rms_norm": {"judged": 1, "s_per_shape": 1.0, "parts_per_shape_s": {}, "worker_start_s": 0,
                                  "spawned_ahead_s": 0, "profile": {"first_s": None, "others_median_s": None},
                                  "witness": {}, "verdicts": {}, **kept.per_op("rms_norm")}}}  # fmt: skip
    assert "| rms_norm | reference_output | 90.0 | 3.0 | 140.0 |" in judge_throughput_gpu.markdown(found)


def test_a_spent_budget_starts_no_evaluation_and_the_next_call_judges_them(tmp_path, capsys, monkeypatch):
    """Once the budget is spent, the evaluations still to come start no worker (the call ends in
    time); they are named not started, and a next call with --run-dir judges them."""
    run = tmp_path / "kept"
    args = ["--ops", "l2_norm,rms_norm", "--seeds", "1", "--shapes", "smoke", "--run-dir", str(run)]
    monkeypatch.setattr(judge_throughput_gpu, "MIN_EVALUATION_S", 1e9)  # as if the budget were spent already
    assert judge_throughput_gpu.main([*args, "--out", str(tmp_path / "a")]) == 0
    (report,) = (tmp_path / "a").glob("*.json")
    found = json.loads(report.read_text())
    assert found["not_started"] == ["l2_norm", "rms_norm"] and found["shapes_judged"] == 0
    assert not list((run / "run" / "eval").glob("l2_norm.json"))
    assert (
        "Not started, the budget spent: l2_norm, rms_norm."
        in (tmp_path / "a" / report.name).with_suffix(".md").read_text()
    )
    monkeypatch.undo()
    assert judge_throughput_gpu.main([*args, "--out", str(tmp_path / "b")]) == 0
    (report,) = (tmp_path / "b").glob("*.json")
    found = json.loads(report.read_text())
    assert found["not_started"] == [] and found["shapes_judged"] == 2
    assert {op: o["verdicts"] for op, o in found["ops"].items()} == {
        "l2_norm": {"correct": 1},
        "rms_norm": {"correct": 1},
    }
    capsys.readouterr()
