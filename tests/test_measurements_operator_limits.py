"""measurements/operator_limits.py on a two-operator synthetic problem set: each limit class from
times chosen against known W/Q, S and its ceiling, the ranking by weight × headroom, and every
input kind (bench run directory, report.json, wiki-kernels JSON) through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atrex_mcp.agentbench.evaluation import EvalError
from atrex_mcp.agentbench.models import AgentSpec, Isolation, RunConfig
from atrex_mcp.errors import ErrorInfo
from atrex_mcp.evaluate.models import KernelTime, TimingStats
from atrex_mcp.problemset.catalog import Catalog
from measurements import operator_limits as ol
from measurements_support import result, shape

FLOOR_MS = 0.005  # 5 µs
HBM = 4.8e12  # h200 datasheet bytes/s
BF16 = 989.5e12  # h200 datasheet bf16 FLOP/s

# W (bf16 FLOP) and Q (bytes) per shape, so that T_SOL on h200 is round
SHAPES = {
    "alpha": {
        "mem": (0, int(HBM * 100e-6)),  # memory-bound, T_SOL 100 µs
        "cmp": (int(BF16 * 1e-3), 1000),  # compute-bound, T_SOL 1 ms
        "slow": (0, int(HBM * 100e-6)),  # memory-bound, T_SOL 100 µs
        "tiny": (0, 4800),  # T_SOL 0.001 µs: far below one launch
        "host": (0, int(HBM * 2e-6)),  # T_SOL 2 µs
        "bad": (0, int(HBM * 100e-6)),
    },
    "beta": {"0": (0, int(HBM * 10e-6)), "1": (0, int(HBM * 10e-6))},
}
# times (ms) of alpha's shapes, and the class each must get
TIMES = {"mem": 0.150, "cmp": 2.0, "slow": 0.22, "tiny": 0.006, "host": 0.025}
EXPECTED = {"mem": "memory", "cmp": "compute", "slow": "kernel", "tiny": "launch", "host": "host", "bad": "failed"}
WEIGHTS = {"alpha": 0.6, "beta": 0.4}


def _problem_root(root: Path) -> Path:
    for op, shapes in SHAPES.items():
        d = root / op
        d.mkdir(parents=True)
        (d / "reference.py").write_text("# not run here\n")
        (d / "input.py").write_text("# not run here\n")
        listed: list[dict[str, object]] = [{"id": sid, "init": {}, "inputs": {}} for sid in shapes]
        listed.append({"id": "smoke", "smoke": True, "init": {}, "inputs": {}})
        (d / "shapes.json").write_text(json.dumps({"op": op, "shapes": listed}))
        (d / "metadata.json").write_text(json.dumps({"op": op, "dtype": "bf16", "shapes": {}}))
        records = {sid: {"flops": {"bf16": w}, "bytes_read": q, "bytes_written": 0} for sid, (w, q) in shapes.items()}
        (d / "roofline.json").write_text(json.dumps({"op": op, "shapes": records}))
    (root / "weights.json").write_text(json.dumps({"weights": WEIGHTS}))
    return root


def _alpha_result():
    shapes = []
    for sid in SHAPES["alpha"]:
        if sid == "bad":
            shapes.append(shape(sid, correct=False))
            continue
        s = shape(sid, TIMES[sid])
        if sid == "host":  # 25 µs (5 floors), but the host outran the spin
            s.timing = TimingStats(
                median_ms=0.025, q1_ms=0.025, q3_ms=0.025, iqr_ms=0.0, min_ms=0.025, calls=100, warmup_calls=10,
                input_sets=4, flush_bytes=1 << 27, covers_side_streams=False, sync_gap_ms=0.01, wall_s=0.1,
                host_bound=True,
            )  # fmt: skip
            s.kernels = [KernelTime(name="k", time_us=1.0, count=7, origin="candidate_dsl")]
        if sid == "tiny":
            s.kernels = [KernelTime(name="k", time_us=1.0, count=3, origin="candidate_dsl")]
        shapes.append(s)
    return result("alpha", shapes, candidate="candidate", started_at="2026-12-03T01:00:00+00:00")


@pytest.fixture
def catalog(tmp_path):
    return Catalog(_problem_root(tmp_path / "problems"))


def test_classify_thresholds_and_precedence():
    th = ol.Thresholds()
    assert ol.classify(0.61, 0.10, 50.0, None, th) == "memory"
    assert ol.classify(0.10, 0.51, 50.0, None, th) == "compute"
    assert ol.classify(0.70, 0.55, 50.0, None, th) == "memory"  # 0.70/0.60 > 0.55/0.50
    assert ol.classify(0.62, 0.60, 50.0, None, th) == "compute"  # 0.60/0.50 > 0.62/0.60
    assert ol.classify(0.65, 0.10, 1.5, None, th) == "memory"  # a rate reached outranks the floor
    assert ol.classify(0.10, 0.10, 2.0, None, th) == "launch"
    assert ol.classify(0.10, 0.10, 2.01, None, th) == "kernel"
    assert ol.classify(0.10, 0.10, 30.0, True, th) == "host"
    assert ol.classify(0.10, 0.10, 1.5, True, th) == "launch"
    assert ol.classify(0.65, 0.10, 30.0, True, th) == "memory"
    assert ol.classify(0.10, 0.10, 3.0, None, ol.Thresholds(launch_factor=4.0)) == "launch"


def test_shapes_classes_scores_and_ranking(catalog):
    src = ol._results_source(Path("synthetic"), [_alpha_result()], "evaluation results")
    report = ol.analyse(catalog, [src], FLOOR_MS, "floor.json")
    by_op = {o.op: o for o in report.operators}
    alpha, beta = by_op["alpha"], by_op["beta"]
    limits = {s.id: s for s in alpha.shapes}
    assert {sid: s.limit for sid, s in limits.items()} == EXPECTED

    mem = limits["mem"]
    assert mem.s == pytest.approx(100 / 150)
    assert mem.tbps == pytest.approx(HBM * 100e-6 / 150e-6 / 1e12)
    assert mem.hbm_fraction == pytest.approx(100 / 150)
    assert mem.hbm_fraction_measured == pytest.approx(HBM * 100e-6 / 4.632e12 / 150e-6)
    assert limits["cmp"].peak_fraction == pytest.approx(0.5, rel=1e-6)
    assert limits["cmp"].peak_fraction_measured == pytest.approx(989.5 / 784 / 2, rel=1e-6)
    assert limits["cmp"].tflops == pytest.approx(BF16 * 1e-3 / 2e-3 / 1e12, rel=1e-6)
    tiny = limits["tiny"]
    assert tiny.s_ceiling == pytest.approx(0.001e-3 / FLOOR_MS, rel=1e-3)
    assert tiny.t_over_floor == pytest.approx(1.2) and tiny.launches == 3
    assert limits["bad"].s is None and limits["bad"].failure == "correctness/numeric_mismatch"

    # S_i: the evaluator's median over correct shapes of min(S_j, 1); ceiling over every scored shape
    correct = sorted([100 / 150, 0.5, 0.1 / 0.22, 0.001e-3 / 0.006, 0.002 / 0.025])
    assert alpha.s == pytest.approx(correct[2])
    assert alpha.s_ceiling == pytest.approx(1.0)
    assert alpha.classes == {"memory": 1, "compute": 1, "kernel": 1, "launch": 1, "host": 1, "failed": 1}
    assert alpha.worst == ["slow", "cmp", "mem"]  # furthest below their ceilings of 1
    assert alpha.weighted_headroom == pytest.approx(0.6 * (1 - alpha.s))

    # beta has no result: S 0 against a ceiling of 1, and its 0.4 × 1 outranks alpha's 0.6 × 0.55
    assert beta.source is None and beta.s == 0 and beta.s_ceiling == pytest.approx(1.0)
    assert [o.op for o in report.operators] == ["beta", "alpha"] and report.top == ["beta", "alpha"]
    assert report.s_agg == pytest.approx(0.6 * alpha.s)
    assert report.s_agg_ceiling == pytest.approx(1.0)
    assert "no result in the inputs" in beta.statement
    assert "1 of 6 at 69 % of the measured HBM rate" in alpha.statement
    assert "1 of 6 launch-bound at 1.2× T_floor" in alpha.statement and "1 failed" in alpha.statement
    assert "1 of 6 host-bound (host launch work is the time: 5.0× T_floor, 7 launches" in alpha.statement


def _run_dir(root: Path, problems: Path) -> Path:
    config = RunConfig(
        name="run",
        agent=AgentSpec(kind="command", command=["true"]),
        ops=["alpha", "beta"],
        dsl="triton",
        condition="vanilla",
        budget_s=60,
        problems=[str(problems)],
        hardware="h200",
        server="stdio",
        isolation=Isolation(agent_uid=0, agent_gid=0, server_uid=0, transport="stdio"),
        created_at="2026-12-03T00:00:00+00:00",
        atrex_mcp_version="0",
    )
    (root / "eval").mkdir(parents=True)
    (root / "run.json").write_text(config.model_dump_json())
    (root / "eval" / "alpha.json").write_text(_alpha_result().model_dump_json())
    failed = EvalError(op="beta", error=ErrorInfo(stage="runtime", category="worker_died", message="lost"))
    (root / "eval" / "beta.error.json").write_text(failed.model_dump_json())
    return root


def test_command_line_on_a_run_dir_then_a_report_and_wiki_kernels(tmp_path, capsys):
    problems = _problem_root(tmp_path / "problems")
    run = _run_dir(tmp_path / "run", problems)
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps({"floor_ms": FLOOR_MS, "cases": {}}))
    out = tmp_path / "out" / "limits"
    assert ol.main([str(run), "--floor", str(floor), "--out", str(out), "--top", "2"]) == 0
    data = json.loads(Path(f"{out}.json").read_text())
    assert data["date"] == "2026-12-03" and data["gpu"] == "NVIDIA H200" and data["floor_ms"] == FLOOR_MS
    assert data["top"] == ["beta", "alpha"]
    beta = data["operators"][0]
    assert beta["s"] == 0 and beta["measured_shapes"] == 0 and beta["note"] == "evaluation failed: worker_died"
    md = Path(f"{out}.md").read_text()
    assert "1. beta" in md and "2. alpha" in md and "| tiny | launch |" in md
    assert "2. alpha" in capsys.readouterr().out

    # a later input replaces an earlier one's operators: a report gives beta an S, no shapes
    report = tmp_path / "report.json"
    operators = [{"op": "beta", "evaluated": True, "score": 0.9}]
    report.write_text(json.dumps({"generated_at": "2026-12-04T00:00:00", "runs": [{"operators": operators}]}))
    wiki = tmp_path / "wiki.json"
    kernels = {"alpha": {"operator": "alpha", "shapes": [{"id": "mem", "correct": True, "time_ms": 0.125}]}}
    wiki.write_text(json.dumps({"meta": {"date": "2026-12-05", "gpu": "NVIDIA H200"}, "kernels": kernels}))
    args = [str(run), str(report), str(wiki), "--floor", str(floor), "--out", str(out)]
    assert ol.main(args) == 0
    data = json.loads(Path(f"{out}.json").read_text())
    by_op = {o["op"]: o for o in data["operators"]}
    assert by_op["beta"]["s"] == 0.9 and by_op["beta"]["measured_shapes"] is None
    assert by_op["alpha"]["measured_shapes"] == 1 and by_op["alpha"]["s"] == pytest.approx(0.8)
    assert "[1 of 6 shapes measured]" in by_op["alpha"]["statement"]
    assert data["date"] == "2026-12-05" and data["top"][0] == "alpha"


def test_bad_inputs_get_one_line(tmp_path, capsys):
    junk = tmp_path / "junk.json"
    junk.write_text(json.dumps({"hello": 1}))
    assert ol.main([str(junk), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "[input/bad_limits_input]" in err and "Hint:" in err
    assert ol.main([str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps({"meta": {}, "kernels": {"alpha": {"shapes": []}}}))  # no "operator"
    assert ol.main([str(damaged)]) == 2
    assert "is damaged (KeyError" in capsys.readouterr().err
    no_floor = tmp_path / "nofloor.json"
    no_floor.write_text(json.dumps({"floor_ms": None, "note": "not timed: no GPU"}))
    run = _run_dir(tmp_path / "run", _problem_root(tmp_path / "problems"))
    assert ol.main([str(run), "--floor", str(no_floor)]) == 2
    assert "launch_floor.py measure" in capsys.readouterr().err
