"""Issue-8 bench scripts on CPU: the evaluator cost model and budgeted selection, the
launch-floor-aware score, the stability comparison, ncu CSV splitting for the timing-accuracy
check, the throughput split and the near-roofline list, and CPU dry runs of the scripts."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import pytest

from atrex_mcp.evaluate.models import Overhead
from atrex_mcp.evaluate.scoring import floor_aware_score
from atrex_mcp.problemset.catalog import Catalog
from measurements import (
    baselines,
    compile_estimate,
    eval_cost,
    launch_floor,
    stability,
    timing_accuracy,
    transfer_cost,
)
from measurements_support import MEASUREMENTS, result, shape, write_run
from sandbox.timing import Primitives, plan_calls


@pytest.fixture(scope="module")
def catalog():
    return Catalog()


# -- cost model and selection ------------------------------------------------------------------


def test_cost_model_counts_the_calls_the_evaluator_makes():
    model = eval_cost.CostModel(seeds=5)
    for t_ms in (0.01, 1.0, 50.0):
        plan = plan_calls(t_ms)
        full, counted = model.calls(t_ms)
        assert counted == plan.calls and full == 2 * 5 + 2 + plan.warmup + plan.calls + 3 + 2
    for t_ms in (136.0, 1340.0):  # long calls: one per set, ended at the stop's first look
        plan = plan_calls(t_ms)
        full, counted = model.calls(t_ms)
        assert plan.long and counted == plan.first_check == 5 and full == 2 * 5 + 2 + 1 + 5 + 3 + 2
    assert model.shape_seconds(500.0, "eager") > model.shape_seconds(1.0, "eager")
    assert model.shape_seconds(1.0, "torch-compile") == pytest.approx(
        model.shape_seconds(1.0, "eager") + model.compile_s
    )
    assert sum(model.parts(2.0, "eager").values()) == pytest.approx(model.shape_seconds(2.0, "eager"))
    slow = eval_cost.CostModel(
        compile_s=2.0, compile_by_op={"loopy": eval_cost.CompileFit(5.0, 0.05)}
    )  # longer for longer calls
    assert slow.parts(1000.0, "torch-compile", "loopy")["compile"] == pytest.approx(55.0)
    assert slow.parts(1000.0, "torch-compile", "other")["compile"] == 2.0


def test_calibration_recovers_the_fixed_costs_from_evaluator_fields():
    truth = eval_cost.CostModel(worker_s=3.0, shape_s=0.5, compile_s=7.0, compile_first_s=20.0)

    def run(op: str, candidate: str) -> object:
        shapes, spent = [], 0.0
        for k, t_ms in enumerate((0.1, 2.0, 40.0)):
            full, timed = truth.calls(t_ms)
            compile_s = (
                truth.compile_s + (truth.compile_first_s if k == 0 else 0.0) if candidate == "torch-compile" else 0.0
            )
            work = full * t_ms / 1e3 + truth.loop_overhead_s(timed) + truth.shape_s
            seconds = {
                "correctness": 0.2 * work + compile_s,
                "first_call_extra": compile_s,
                "timing": 0.7 * work,
                "profile": 0.1 * work,
            }
            spent += work + compile_s
            shapes.append(shape(str(k), t_ms, seconds=seconds))
        return result(op, shapes, candidate, overhead=Overhead(worker_start_s=2.5, total_s=spent + truth.worker_s))

    fitted = eval_cost.CostModel().calibrated(
        [run("a", "eager"), run("b", "eager"), run("c", "torch-compile"), run("d", "torch-compile")]
    )
    assert fitted.worker_s == pytest.approx(3.0) and fitted.shape_s == pytest.approx(0.5)
    assert fitted.compile_s == pytest.approx(7.0) and fitted.compile_first_s == pytest.approx(20.0)
    assert fitted.compile_by_op == {
        "c": (pytest.approx(7.0), 0.0, None),
        "d": (pytest.approx(7.0), 0.0, None),
    }  # no eager times: the median
    assert fitted.source.startswith("calibrated")


def test_calibration_fits_compile_time_to_the_shapes_eager_time_per_operator():
    """A reference that loops in Python compiles longer for longer shapes (Dynamo unrolls the
    loop): with eager times, each operator's compile cost is fitted as a + b × eager ms; a flat
    or falling trend, or fewer than 3 shapes, keeps the median."""
    eager = {
        "loopy": {"0": 1.0, "1": 100.0, "2": 1000.0},
        "flat": {"0": 1.0, "1": 50.0, "2": 90.0},
        "few": {"0": 1.0, "1": 9.0},
    }
    compile_s = {"loopy": lambda t: 2.0 + 0.08 * t, "flat": lambda t: 3.0 - 0.001 * t, "few": lambda t: 1.0 + t}
    runs = [
        result(
            op,
            [
                shape(
                    sid,
                    0.5,
                    seconds={
                        "correctness": 1.0 + compile_s[op](t),
                        "first_call_extra": compile_s[op](t),
                        "timing": 0.5,
                    },
                )
                for sid, t in times.items()
            ],
            "torch-compile",
        )
        for op, times in eager.items()
    ]
    fitted = eval_cost.CostModel(eager_ms=eager).calibrated(runs)
    assert fitted.compile_by_op["loopy"] == (pytest.approx(2.0), pytest.approx(0.08), None)
    assert fitted.compile_seconds("loopy", 1000.0) == pytest.approx(82.0)
    assert fitted.compile_seconds("loopy", 1e6) == 120.0  # never more than the stage limit, where the worker is stopped
    assert fitted.compile_by_op["flat"] == (pytest.approx(compile_s["flat"](50.0)), 0.0, None)
    assert fitted.compile_by_op["few"] == (pytest.approx(6.0), 0.0, None)
    assert "eager_ms" not in fitted.describe()


def test_a_shape_that_ran_into_the_compile_limit_counts_at_the_limit_in_the_fit():
    """gated_delta_rule_update compiled T = 1 in 4 s and ran past 120 s at T = 512 and 3251: from
    the smallest shape that ran into the limit on, shapes are predicted at the limit instead of at
    the one short shape's 4 s; shapes between the two lie on the line joining them."""
    eager = {"recurrent": {"0": 0.6, "14": 150.0, "17": 900.0}}
    timed_out = [
        shape(sid, correct=False).model_copy(
            update={"stage": "runtime", "category": "timeout", "time_ms": None, "seconds": {"correctness": 120.0}}
        )
        for sid in ("14", "17")
    ]
    compiled = shape("0", 0.03, seconds={"correctness": 4.5, "first_call_extra": 4.3, "timing": 0.5})
    fitted = eval_cost.CostModel(eager_ms=eager).calibrated(
        [result("recurrent", [compiled, *timed_out], "torch-compile")]
    )
    slope = (120.0 - 4.3) / (150.0 - 0.6)
    assert fitted.compile_by_op["recurrent"] == (pytest.approx(4.3 - 0.6 * slope), pytest.approx(slope), 150.0)
    assert (
        fitted.compile_seconds("recurrent", 0.6) == pytest.approx(4.3)
        and fitted.compile_seconds("recurrent", 150.0) == 120.0
    )
    assert fitted.compile_seconds("recurrent", 75.3) == pytest.approx((4.3 + 120.0) / 2)


def test_calibration_fits_the_per_shape_cost_to_the_shapes_traffic():
    """Large shapes cost seconds per GB (inputs made twice, outputs through files, K seeds): with
    a traffic table the per-shape cost is fitted as shape_s + byte_s × bytes."""
    traffic = {"a": {"0": 1e6, "1": 2e9, "2": 8e9}}
    truth = eval_cost.CostModel(shape_s=0.5, byte_s=3.5e-9, traffic=traffic)
    shapes = []
    for sid, t_ms in (("0", 0.1), ("1", 2.0), ("2", 40.0)):
        full, timed = truth.calls(t_ms, traffic["a"][sid])  # shape 2's 8 GB get 3 input sets, so 3 timed calls
        work = full * t_ms / 1e3 + truth.loop_overhead_s(timed) + truth.shape_s + truth.byte_s * traffic["a"][sid]
        shapes.append(shape(sid, t_ms, seconds={"correctness": 0.6 * work, "timing": 0.4 * work}))
    fitted = eval_cost.CostModel(traffic=traffic).calibrated([result("a", shapes)])
    assert fitted.shape_s == pytest.approx(0.5) and fitted.byte_s == pytest.approx(3.5e-9)
    assert fitted.shape_seconds(40.0, "eager", "a", "2") == pytest.approx(truth.shape_seconds(40.0, "eager", "a", "2"))
    assert "traffic" not in fitted.describe()


def test_representative_order_gives_every_operator_its_fastest_shape_first():
    times = {"a": {"0": 5.0, "1": 0.1, "2": 1.0, "3": 3.0}, "b": {"0": 0.5}, "c": {"0": 9.0, "1": 2.0}}
    order = eval_cost.representative_order(
        times, {"c": 0.6, "a": 0.3, "b": 0.1}, large_shapes=1, large_range_ms=(1.0, 20.0)
    )
    assert order[:3] == [("c", "1"), ("a", "1"), ("b", "0")]  # by weight, each its fastest
    assert order[3:5] == [("c", "0"), ("a", "3")]  # median shapes
    assert order[5:] == [("a", "0")]  # one large shape, heaviest operator with one left inside the range


def test_spread_order_samples_evenly_by_eager_time_median_first():
    times = {"a": {str(i): float(i) for i in range(10)}, "b": {"0": 0.5, "1": 0.2}, "c": {"0": 1.0}}
    order = eval_cost.spread_order(times, {"a": 0.5, "b": 0.3, "c": 0.2}, per_op=3)
    # a: ranks at quantiles 1/6, 1/2, 5/6 of 10 shapes -> 1, 5, 8; b: both shapes; c: its one
    assert order[:3] == [("a", "5"), ("b", "1"), ("c", "0")]  # every operator's most central pick first
    assert sorted(order[3:]) == [("a", "1"), ("a", "8"), ("b", "0")]
    assert len(order) == len(set(order))


def test_fit_to_budget_counts_a_worker_start_per_new_operator_and_lists_what_it_leaves():
    model = eval_cost.CostModel(worker_s=10.0, shape_s=1.0, call_overhead_s=0.0)
    times = {"a": {"0": 0.001, "1": 0.001}, "b": {"0": 0.001}}
    kept, left = eval_cost.fit_to_budget([("a", "0"), ("b", "0"), ("a", "1")], times, model, "eager", budget_s=13.0)
    assert kept == {"a": ["0", "1"]} and left == [("b", "0")]


def test_session_split_packs_whole_operators():
    sessions = baselines.session_split({"a": 300.0, "b": 250.0, "c": 200.0, "d": 700.0}, 540.0)
    assert sessions == [["d"], ["a", "c"], ["b"]]


# -- launch floor -------------------------------------------------------------------------------


def test_floor_aware_score_equals_s_above_the_floor_and_uses_the_floor_below_it():
    assert floor_aware_score(0.010, 0.005, 0.020) == pytest.approx(0.5)  # T_SOL above the floor: S itself
    assert floor_aware_score(0.001, 0.005, 0.010) == pytest.approx(0.5)  # below: floor / T_cand
    assert floor_aware_score(0.001, 0.005, 0.004) == pytest.approx(1.25)  # not clipped
    assert floor_aware_score(None, 0.005, 0.01) is None
    assert floor_aware_score(0.001, 0.005, None) is None


def test_shapes_below_floor_grow_with_the_floor(catalog):
    low, high = launch_floor.shapes_below_floor(catalog, 1e-9), launch_floor.shapes_below_floor(catalog, 1.0)
    assert set(low) == set(catalog.names())
    assert all(low[op]["h200"] == 0 for op in low)
    assert high["rms_norm"]["h200"] == high["rms_norm"]["shapes"] == len(catalog.visible("rms_norm").scored_shapes)
    assert all(low[op][p] <= high[op][p] for op in low for p in launch_floor.PROFILES)


def test_floor_scores_report_both_scores_and_aggregates(catalog):
    t_sol = catalog.hidden("rms_norm").roofline["shapes"]["15"]["t_sol_ms"]["h200"]  # far below a microsecond
    floor_ms = 0.004
    results = [result("rms_norm", [shape("15", 0.008), shape("0", 0.02, correct=False)])]
    report = launch_floor.floor_scores(results, catalog, "h200", floor_ms)["eager"]
    row = report["operators"]["rms_norm"]
    assert row["s"] == pytest.approx(t_sol / 0.008) and row["s_floor"] == pytest.approx(0.5)
    weight = catalog.weights()["rms_norm"]
    assert report["s_floor_agg"] == pytest.approx(weight * 0.5) and "unified_attention" in report["missing_operators"]


# -- stability ----------------------------------------------------------------------------------


def test_deviation_stats_median_and_p90():
    stats = stability.deviation_stats([1.0, 1.01, 0.98, 1.05, 1.0, 0.9, 1.02, 1.0, 1.0, 1.03])
    assert stats["n"] == 10 and stats["median_abs_dev"] == pytest.approx(0.015)
    assert stats["max_abs_dev"] == pytest.approx(0.1) and 0.05 <= stats["p90_abs_dev"] <= 0.1
    assert stability.deviation_stats([])["median_abs_dev"] is None


def test_compare_runs_pairs_shapes_and_separates_the_20us_threshold(tmp_path):
    a = write_run(
        tmp_path / "a", [result("rms_norm", [shape("0", 0.100), shape("1", 0.010), shape("2", 1.0), shape("3", None)])]
    )
    b = write_run(
        tmp_path / "b", [result("rms_norm", [shape("0", 0.101), shape("1", 0.013), shape("2", 0.97), shape("4", 1.0)])]
    )
    report = stability.compare_runs(a, b)
    assert report["pairs"] == 3 and report["above"]["n"] == 2 and report["all"]["n"] == 3
    assert report["above"]["max_abs_dev"] == pytest.approx(0.03)
    assert report["worst"][0]["shape"] == "1" and report["meets_target"] is False  # p90 over 2 shapes = 3 %
    assert report["only_in_b"] == 1 and report["only_in_a"] == 0  # shape 3 was never timed in A
    assert "| > 20 µs | 2 |" in stability.render(report)


def test_compare_runs_reports_host_bound_shapes_apart(tmp_path):
    """A shape whose host outran the spin on most calls in either run is host-bound: its spread
    is reported apart from the GPU-bound shapes'."""
    from atrex_mcp.evaluate.models import TimingStats

    def timed(sid, ms, late):
        return shape(sid, ms).model_copy(
            update={
                "timing": TimingStats(
                    median_ms=ms,
                    q1_ms=ms,
                    q3_ms=ms,
                    iqr_ms=0,
                    min_ms=ms,
                    calls=100,
                    warmup_calls=3,
                    input_sets=2,
                    flush_bytes=1,
                    covers_side_streams=False,
                    sync_gap_ms=0.01,
                    wall_s=1.0,
                    host_late_calls=late,
                )
            }
        )

    a = write_run(tmp_path / "a", [result("rms_norm", [timed("0", 0.5, 0), timed("1", 0.5, 90)])])
    b = write_run(tmp_path / "b", [result("rms_norm", [timed("0", 0.501, 1), timed("1", 0.25, 100)])])
    report = stability.compare_runs(a, b)
    assert report["above_gpu_bound"]["n"] == 1 and report["above_gpu_bound"]["max_abs_dev"] == pytest.approx(0.002)
    assert report["above_host_bound"]["n"] == 1 and report["above_host_bound"]["max_abs_dev"] == pytest.approx(0.5)
    assert "| > 20 µs, host-bound | 1 |" in stability.render(report)


# -- correctness-stage cost per GB of output -------------------------------------------------------


def test_transfer_cost_is_what_correctness_spends_beyond_the_calls_per_output_gb(tmp_path, catalog):
    """Seconds beyond 2 × seeds calls at the timed median, per seed and GB written; small outputs left out."""
    hidden = catalog.hidden("per_token_group_quant_fp8")
    sizes = {
        s.id: hidden.roofline_entry(s.id)["bytes_written"] / 1e9
        for s in catalog.visible("per_token_group_quant_fp8").scored_shapes
    }
    big, small = max(sizes, key=sizes.get), min(sizes, key=sizes.get)
    calls = 2 * 5 * 0.1 / 1e3
    seconds = {
        "correctness": 5.0,
        "first_call_extra": 1.0,
        "reference_and_compare": 2.0 + calls,
    }  # 6 s beyond the calls
    run = write_run(
        tmp_path / "r",
        [result("per_token_group_quant_fp8", [shape(big, 0.1, seconds=seconds), shape(small, 0.1, seconds=seconds)])],
    )
    rows = transfer_cost.seconds_per_output_gb(run, catalog, min_output_gb=0.2, seeds=5)
    assert [(op, sid) for _, op, sid in rows] == [("per_token_group_quant_fp8", big)]
    assert rows[0][0] == pytest.approx(6.0 / (5 * sizes[big]))


# -- torch.compile from a sample ---------------------------------------------------------------


def test_compile_estimate_scores_the_sample_beside_eager_on_the_same_shapes(tmp_path, catalog):
    """torch.compile judged on one rms_norm shape, twice as fast as eager there: its S_i is twice
    eager's on that shape, the lower-bound S_agg counts every other operator as 0, the measured
    weight is rms_norm's, and eager's full S_i uses all its shapes."""
    from atrex_mcp.evaluate import scoring

    ids = [s.id for s in catalog.visible("rms_norm").scored_shapes][:3]
    eager = write_run(tmp_path / "eager", [result("rms_norm", [shape(i, 0.1 * (k + 1)) for k, i in enumerate(ids)])])
    compiled = write_run(tmp_path / "tc", [result("rms_norm", [shape(ids[1], 0.1)], candidate="torch-compile")])
    report = compile_estimate.estimate(eager, compiled)
    t_sol = scoring.Roofline.load(catalog, "rms_norm", "h200").t_sol_ms(ids[1])[0]
    row = report["profiles"]["h200"]["operators"]["rms_norm"]
    assert row["sample"] == 1 and row["torch_compile"] == pytest.approx(t_sol / 0.1)
    assert row["eager_sample"] == pytest.approx(t_sol / 0.2) and row["eager_full"] is not None
    weights = catalog.weights()
    share = weights["rms_norm"] / sum(weights.values())
    agg = report["profiles"]["h200"]["torch_compile"]
    assert agg["weight_measured"] == pytest.approx(share) and agg["lower_bound"] == pytest.approx(share * t_sol / 0.1)
    assert agg["renormalised"] == pytest.approx(t_sol / 0.1)
    assert report["speedup"]["geomean"] == pytest.approx(2.0) and report["failures"] == []


# -- timing accuracy: ncu CSV ------------------------------------------------------------------


def _ncu_csv(rows: list[tuple[str, float, str]]) -> str:
    header = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid '
        'Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    )
    lines = ["==PROF== Connected to process 1", header]
    for i, (name, value, unit) in enumerate(rows):
        lines.append(
            f'"{i}","1","python3","h","{name}","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler '
            f'metrics","gpu__time_duration.sum","{unit}","{value}"'
        )
    return "\n".join(lines) + "\n"


def test_ncu_launches_are_split_at_markers_and_summed_per_call():
    rows = [(timing_accuracy.MARKER, 1500, "nsecond")]
    rows += [("scale_kernel", 2000 + i, "nsecond") for i in range(5)]
    rows += [(timing_accuracy.MARKER, 1500, "nsecond")]
    for i in range(5):  # a two-kernel call: GEMM + a split-K reduction
        rows += [("nvjet_gemm", 1.0 + 0.01 * i, "msecond"), ("splitk_reduce", 10_000, "nsecond")]
    rows += [(timing_accuracy.MARKER, 1500, "nsecond"), ("odd", 1, "nsecond")]
    parsed = timing_accuracy.launches(_ncu_csv(rows))
    assert len(parsed) == len(rows) and parsed[7] == ("nvjet_gemm", 1.0e6)
    cases = timing_accuracy.per_case_ncu(parsed, ["scale", "gemm", "odd"])
    assert cases["scale"]["median_ms"] == pytest.approx(0.002002) and cases["scale"]["kernels_per_call"] == 1
    assert cases["gemm"]["median_ms"] == pytest.approx(1.02 + 0.01) and cases["gemm"]["kernels_per_call"] == 2
    assert cases["odd"]["median_ms"] is None and "1 launches for 5 calls" in cases["odd"]["note"]


@pytest.mark.slow
def test_run_ncu_wraps_the_child_with_the_clock_left_alone_and_reads_its_log(tmp_path, monkeypatch):
    """A stand-in `ncu` on PATH: checks the options, runs the child (CPU: launches only) and
    writes a CSV as ncu would, one marker and five launches per case."""
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(f"""#!{sys.executable}
import subprocess, sys
args = sys.argv[1:]
for pair in (["--clock-control", "none"], ["--profile-from-start", "off"], ["--cache-control", "all"],
             ["--metrics", "gpu__time_duration.sum"]):
    i = args.index(pair[0])
    assert args[i + 1] == pair[1], pair
i = args.index("--log-file")
child = subprocess.run(args[i + 2:])
rows = []
for case in range(2):
    rows.append(("{timing_accuracy.MARKER}", 1000))
    rows += [("kernel%d" % case, 1000 * (case + 1) * 3 + k) for k in range(5)]
head = '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
body = ['"%d","1","%s","gpu__time_duration.sum","nsecond","%d"' % (n, name, v) for n, (name, v) in enumerate(rows)]
open(args[i + 1], "w").write("\\n".join([head, *body]) + "\\n")
sys.exit(child.returncode)
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    specs = [dict(s, iters=1) for s in timing_accuracy.CASE_SPECS if s["name"] in ("scale_4KiB", "spin_10ms")]
    work = tmp_path / "work"
    work.mkdir()
    cases, tail = timing_accuracy.run_ncu(specs, work)
    assert cases["scale_4KiB"]["median_ms"] == pytest.approx(0.003002), tail
    assert cases["spin_10ms"]["median_ms"] == pytest.approx(0.006002)


def test_speedup_compares_walls_and_per_shape_agreement(tmp_path):
    from measurements import multi_gpu

    for name, wall, t in (("one", 100.0, 0.5), ("two", 52.0, 0.51)):
        run = write_run(tmp_path / name, [result("rms_norm", [shape("0", t)])])
        (run / "run.json").write_text(json.dumps({"schedule": {"makespan_s": wall, "batches": []}}))
    report = multi_gpu.speedup(tmp_path / "one", tmp_path / "two")
    assert report["speedup"] == pytest.approx(100 / 52, abs=1e-3)
    assert report["agreement"]["above"]["median_abs_dev"] == pytest.approx(0.02)


def test_case_specs_span_two_microseconds_to_ten_milliseconds():
    assert len(timing_accuracy.CASE_SPECS) >= 10
    assert timing_accuracy.CASE_SPECS[0]["n"] * 2 <= 4096 and timing_accuracy.SPIN_TARGET_MS == 10.0


# -- baselines report parts -------------------------------------------------------------------


def test_throughput_split_accounts_for_the_whole_wall_time():
    r = result(
        "rms_norm",
        [
            shape(
                "0",
                0.1,
                seconds={
                    "correctness": 3.0,
                    "first_call_extra": 2.0,
                    "reference_and_compare": 0.5,
                    "timing": 1.5,
                    "timed_output_checks": 0.3,
                    "profile": 0.4,
                },
            )
        ],
        overhead=Overhead(worker_start_s=4.0, candidate_load_s=0.2, total_s=10.0),
    )
    split = baselines.throughput_split([r])
    assert split == {
        "start_up": 4.0,
        "candidate_load": 0.2,
        "compile": 2.0,
        "correctness": 1.5,
        "timing": 1.8,
        "profile": 0.4,
        "other": 0.1,
        "total": 10.0,
    }


def test_near_roofline_lists_shapes_above_0_9_with_their_bound(catalog):
    t_sol = catalog.hidden("rms_norm").roofline["shapes"]["0"]["t_sol_ms"]["h200"]
    rows = baselines.near_roofline(
        [result("rms_norm", [shape("0", t_sol / 0.95), shape("1", 1.0), shape("2", t_sol, correct=False)])], catalog
    )
    assert [(r["shape"], r["bound"]) for r in rows] == [("0", "memory")] and rows[0]["score"] == pytest.approx(0.95)


def test_selection_from_an_earlier_run_takes_exactly_its_judged_shapes(tmp_path, catalog):
    not_run = shape("9", correct=False).model_copy(update={"stage": "not_run", "category": "not_run_deadline"})
    earlier = write_run(
        tmp_path / "a", [result("rms_norm", [shape("3"), shape("7"), not_run]), result("l2_norm", [shape("1")])]
    )
    args = argparse.Namespace(shapes_from=earlier, ops=None, skip_judged=[])
    chosen, left = baselines.selection(args, catalog, {}, eval_cost.CostModel(), "eager")
    assert chosen == {"rms_norm": ["3", "7"], "l2_norm": ["1"]} and left == []
    chosen, _ = baselines.selection(
        argparse.Namespace(shapes_from=earlier, ops="l2_norm", skip_judged=[]),
        catalog,
        {},
        eval_cost.CostModel(),
        "eager",
    )
    assert chosen == {"l2_norm": ["1"]}


def test_shapes_take_plain_ids_for_every_operator_or_one_operator_each(catalog):
    def chosen(shapes, ops):
        args = argparse.Namespace(shapes_from=None, select=None, ops=ops, skip_judged=[], shapes=shapes)
        return baselines.selection(args, catalog, {}, eval_cost.CostModel(), "eager")[0]

    assert chosen("1,2", "l2_norm,mrope") == {"l2_norm": ["1", "2"], "mrope": ["1", "2"]}
    assert chosen("l2_norm:3,mrope:0,l2_norm:5", None) == {"l2_norm": ["3", "5"], "mrope": ["0"]}
    with pytest.raises(SystemExit, match="mrope is not among"):
        chosen("mrope:0", "l2_norm")


def test_skip_judged_resumes_a_baseline_without_judging_a_shape_twice(tmp_path, catalog):
    """Shapes an earlier run judged (right or wrong) are left out with that reason; a shape it
    lost is evaluated again, and combine does not call the skipped shapes lost."""
    lost = shape("9", correct=False).model_copy(update={"stage": "not_run", "category": "not_run_deadline"})
    earlier = write_run(tmp_path / "a", [result("l2_norm", [shape("0"), shape("1", correct=False), lost])])
    scored = [s.id for s in catalog.visible("l2_norm").scored_shapes]
    for extra in (
        {"shapes": "all", "select": None},
        {"shapes": None, "select": "spread", "per_op": 50, "budget_s": None},
    ):
        args = argparse.Namespace(shapes_from=None, ops="l2_norm,mrope", skip_judged=[earlier], **extra)
        chosen, left = baselines.selection(
            args, catalog, eval_cost.load_reference_times(), eval_cost.CostModel(), "eager"
        )
        assert sorted(chosen["l2_norm"], key=int) == [sid for sid in scored if sid not in ("0", "1")], extra
        assert len(chosen["mrope"]) == len(catalog.visible("mrope").scored_shapes)
        assert left == [{"op": "l2_norm", "shape": sid, "reason": baselines.JUDGED_EARLIER} for sid in ("0", "1")]
    (earlier / "run.json").write_text(json.dumps({"not_run": left}))
    assert baselines.stopped_or_failed([earlier]) == set()


def _probe_pass(sid: str):
    """A shape that compiled and passed correctness in an untimed compile probe."""
    from atrex_mcp.evaluate.models import NOT_TIMED_BY_REQUEST

    return shape(sid).model_copy(update={"timing_note": NOT_TIMED_BY_REQUEST})


def test_a_compile_probe_gives_verdicts_only_for_the_shapes_it_fails(tmp_path, catalog):
    """An untimed probe's compile timeout is a verdict; its pass is not: --skip-judged runs the
    shape again, and combine neither lets the pass hide a timed result nor counts it correct."""
    from atrex_mcp.problemset.catalog import Catalog

    ids = [s.id for s in Catalog().visible("mrope").scored_shapes]
    timed = write_run(
        tmp_path / "timed", [result("mrope", [shape(ids[0], 0.010)], started_at="2026-01-01T00:00:00+00:00")]
    )
    timeout = shape(ids[2], correct=False).model_copy(update={"stage": "runtime", "category": "timeout"})
    probe = write_run(
        tmp_path / "probe",
        [result("mrope", [_probe_pass(ids[0]), _probe_pass(ids[1]), timeout], started_at="2026-01-02T00:00:00+00:00")],
    )
    args = argparse.Namespace(shapes_from=None, select=None, ops="mrope", skip_judged=[timed, probe], shapes="all")
    chosen, left = baselines.selection(args, catalog, {}, eval_cost.CostModel(), "torch-compile")
    assert ids[0] not in chosen["mrope"] and ids[2] not in chosen["mrope"] and ids[1] in chosen["mrope"]
    assert {e["shape"] for e in left} == {ids[0], ids[2]}
    out = tmp_path / "combined"
    baselines.combine(argparse.Namespace(dirs=[timed, probe], out=out, problems=None, exclude=None, why=None))
    by_id = {s["id"]: s for s in json.loads((out / "mrope.eager.json").read_text())["shapes"]}
    assert by_id[ids[0]]["time_ms"] == 0.010 and by_id[ids[0]]["correct"]
    assert (
        by_id[ids[1]]["stage"] == "not_run"
        and not by_id[ids[1]]["correct"]
        and "untimed compile probe" in by_id[ids[1]]["message"]
    )
    assert by_id[ids[2]]["category"] == "timeout"
    # a verdict set aside when combining (a probe timeout too close to the limit) says why
    with pytest.raises(SystemExit, match="--why"):
        baselines.combine(
            argparse.Namespace(dirs=[timed, probe], out=out, problems=None, exclude=f"mrope:{ids[2]}", why=None)
        )
    baselines.combine(
        argparse.Namespace(
            dirs=[timed, probe],
            out=out,
            problems=None,
            exclude=f"mrope:{ids[2]}",
            why="timed out in a probe within the lanes' slow-down of the limit",
        )
    )
    set_aside = {s["id"]: s for s in json.loads((out / "mrope.eager.json").read_text())["shapes"]}[ids[2]]
    assert set_aside["stage"] == "not_run" and "lanes' slow-down" in set_aside["message"]
    # a probe alone: no timed run of the operator at all
    baselines.combine(argparse.Namespace(dirs=[probe], out=out, problems=None, exclude=None, why=None))
    merged = json.loads((out / "mrope.eager.json").read_text())
    assert not any(s["correct"] for s in merged["shapes"]) and merged["partial"] == "deadline"
    assert len(merged["shapes"]) == len(ids)


def test_a_compile_probe_does_not_calibrate_the_cost_model(tmp_path):
    """A probe run times nothing and its lanes share the host: --calibrate leaves it out."""
    probe = write_run(
        tmp_path / "probe", [result("mrope", [_probe_pass("0")], overhead=Overhead(worker_start_s=99.0, total_s=120.0))]
    )
    (probe / "run.json").write_text(json.dumps({"baseline": "eager", "timing": False}))
    timed = write_run(tmp_path / "timed", [result("mrope", [shape("0", 0.01)])])
    (timed / "run.json").write_text(json.dumps({"baseline": "eager", "timing": True}))
    assert baselines.untimed_run(probe) and not baselines.untimed_run(timed) and not baselines.untimed_run(tmp_path)
    args = argparse.Namespace(seeds=5, calibrate=[probe])
    assert baselines._cost_model(args, Catalog(), {}) == baselines._cost_model(
        argparse.Namespace(seeds=5, calibrate=[]), Catalog(), {}
    )


@pytest.mark.slow
def test_lanes_sharing_a_gpu_are_refused_for_timed_work(tmp_path):
    from measurements import multi_gpu

    with pytest.raises(ValueError, match="untimed"):
        multi_gpu.run_spread([], ["0"], tmp_path, {"baseline": "eager"}, 1.0, None, lanes_per_device=2)
    with pytest.raises(ValueError, match="at least 1"):
        multi_gpu.run_spread([], ["0"], tmp_path, {"baseline": "eager", "timing": False}, 1.0, None, lanes_per_device=0)
    proc = _script(
        str(MEASUREMENTS / "baselines.py"),
        "run",
        "--baseline",
        "eager",
        "--ops",
        "mrope",
        "--shapes",
        "smoke",
        "--lanes-per-gpu",
        "2",
        "--out",
        str(tmp_path / "x"),
    )
    assert proc.returncode != 0 and "--no-timing" in proc.stderr


# -- CPU dry runs of the scripts --------------------------------------------------------------


def _script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_plan_prints_every_operator_and_the_full_issue():
    proc = _script(
        str(MEASUREMENTS / "baselines.py"),
        "plan",
        "--select",
        "representative",
        "--budget-s",
        "120",
        "--split-s",
        "540",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n| ") >= 31 and "full issue on one GPU" in proc.stdout
    assert "eager in sessions of 540 s" in proc.stdout and "selection within 120.0 s" in proc.stdout


@pytest.mark.slow
def test_gpu_measurements_dry_run_on_cpu(tmp_path):
    for script, args in (
        ("launch_floor.py", ["measure", "--out", str(tmp_path / "floor.json")]),
        ("hbm_mix.py", ["--out", str(tmp_path / "hbm.json")]),
        ("reuse_cache_exploit.py", ["--shapes", "0", "--out", str(tmp_path / "reuse.json")]),
        ("handoff_cost.py", ["--out", str(tmp_path / "transfer.json")]),
        ("timing_accuracy.py", ["--cases", "scale_4KiB,gemm_2048,spin_10ms", "--out", str(tmp_path / "acc.json")]),
    ):
        proc = _script(str(MEASUREMENTS / script), *args)
        assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "floor.json").read_text())["note"] == "not timed: no GPU"
    assert json.loads((tmp_path / "acc.json").read_text())["note"] == "not timed: no GPU"
    handoff = json.loads((tmp_path / "transfer.json").read_text())["arena"]
    assert handoff["registered"]["bytes"] == handoff["pageable"]["bytes"] == 4 << 20
    reuse = json.loads((tmp_path / "reuse.json").read_text())
    assert reuse["old_plan"] == "needs a GPU" and [(r["candidate"], r["correct"]) for r in reuse["evaluator"]] == [
        ("exploit", True),
        ("eager", True),
    ]  # the cache's values are right: only its timing is the attack


# -- the GPU scripts' timing paths on a CPU timing backend ---------------------------------------


class _HostEvent:
    """A torch.cuda.Event stand-in stamped with the host clock (CPU tensors run synchronously)."""

    def __init__(self, enable_timing: bool = False):
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end: _HostEvent) -> float:
        return (end.t - self.t) * 1e3


def _cpu_primitives() -> Primitives:
    return Primitives(
        {
            "torch.cuda.Event": _HostEvent,
            "torch.cuda.Event.record": _HostEvent.record,
            "torch.cuda.Event.elapsed_time": _HostEvent.elapsed_time,
            "torch.cuda.synchronize": lambda: None,
            "time.perf_counter": time.perf_counter,
            "torch.cuda._sleep": lambda cycles: None,
        }
    )


def test_launch_floor_cases_go_through_the_timing_loop_on_a_cpu_backend():
    cases = launch_floor._cases("cpu")
    make = cases.pop("_inputs")
    timed = launch_floor.time_cases(_cpu_primitives(), cases, make, calls=20, flush_bytes=4096)
    assert set(timed) == {"events_only", "torch_one_kernel", "triton_empty_kernel"}
    for stats in timed.values():
        assert stats["n"] == 20 and 0 <= stats["min_ms"] <= stats["median_ms"] and stats["sync_gap_median_ms"] >= 0


def test_hbm_mix_kernels_compute_what_they_claim_and_go_through_the_timing_loop():
    """Each stream case computes its result (a fast wrong kernel would measure nothing), counts
    its bytes, and runs through the worker's timing loop; the best case of each mix is named."""
    import torch

    from measurements.hbm_mix import cases, time_cases

    built = cases(4096, "cpu")
    assert {mix for mix, *_ in built.values()} == {"read only", "2:1", "1:1", "write only"}
    x, ab = built["read_triton"][1](), built["read2_write1_triton"][1]()
    assert torch.allclose(built["read_triton"][2](x).sum(), x["x"].float().sum(), rtol=1e-3, atol=1e-2)
    assert torch.allclose(
        built["read2_write1_triton"][2](ab).float(), ab["a"].float() * ab["b"].float(), rtol=1e-2, atol=1e-3
    )
    assert torch.equal(built["copy_triton"][2](x), x["x"])
    assert torch.equal(built["write_triton"][2](built["write_triton"][1]()), torch.ones(4096, dtype=torch.bfloat16))
    assert built["read2_write1_torch_mul"][3:] == (4 * 4096, 2 * 4096)
    report = time_cases(_cpu_primitives(), built, flush_bytes=4096, ceilings={"h200": 4.8e12})
    assert set(report["cases"]) == set(built) and set(report["best_by_mix"]) == {
        "read only",
        "2:1",
        "1:1",
        "write only",
    }
    for case in report["cases"].values():
        assert case["median_ms"] > 0 and case["of_h200"] == pytest.approx(case["tb_per_s"] * 1e12 / 4.8e12)


def test_timing_accuracy_cases_go_through_the_timing_loop_on_a_cpu_backend():
    specs = [s for s in timing_accuracy.CASE_SPECS if s["name"] in ("scale_4KiB", "gemm_2048", "spin_10ms")]
    cases = timing_accuracy.build_cases(specs, "cpu")
    timed = timing_accuracy.evaluator_times(cases, _cpu_primitives(), flush_bytes=4096)
    assert set(timed) == {"scale_4KiB", "gemm_2048", "spin_10ms"}
    assert all(t["calls"] >= 20 and t["median_ms"] > 0 for t in timed.values())
    assert all(t["write_flush_median_ms"] > 0 for t in timed.values())


def test_time_calls_reports_the_host_window_and_sizes_the_spin_to_outlast_it():
    """Every timed call carries its host window (start event → end event); the default spin is at
    least SPIN_MIN_US (the H200 showed shorter spins outrun), and an override is used as given."""
    import torch

    from sandbox.timing import SPIN_MIN_US, time_calls

    sets = [{"x": torch.full((64,), float(k))} for k in range(4)]
    fn = lambda inputs: inputs["x"] * 2  # noqa: E731
    run = time_calls(_cpu_primitives(), fn, {"x": torch.ones(64)}, sets, calls=10, warmup=2, flush_bytes=4096)
    assert len(run.host_us) == len(run.times_ms) == 10 and all(h > 0 for h in run.host_us)
    assert run.spin_us >= SPIN_MIN_US
    assert sorted(run.kept) == [0, 1, 2, 3] and all(torch.equal(run.kept[k], sets[k]["x"] * 2) for k in run.kept)
    forced = time_calls(
        _cpu_primitives(),
        fn,
        {"x": torch.ones(64)},
        sets,
        calls=4,
        warmup=1,
        flush_bytes=4096,
        spin_us=40.0,
        flush_by_writing=True,
    )
    assert forced.spin_us == 40.0 and len(forced.host_us) == 4


def test_combine_takes_each_shapes_latest_judged_result_and_lists_the_rest_as_not_run(tmp_path):
    """Runs from several device calls become one result per operator: a shape judged twice
    keeps the later measurement, a later not-run never hides an earlier judgement, and a
    shape judged in no run is listed once as not run (the result is marked partial): never
    selected, unless a run's run.json says it was lost."""
    import argparse

    from atrex_mcp.problemset.catalog import Catalog

    ids = [s.id for s in Catalog().visible("mrope").scored_shapes]
    early = write_run(
        tmp_path / "a",
        [result("mrope", [shape(ids[0], 0.010), shape(ids[1], 0.020)], started_at="2026-01-01T00:00:00+00:00")],
    )
    stopped = shape(ids[1])
    stopped.correct, stopped.stage, stopped.category = False, "not_run", "not_run_deadline"
    late = write_run(
        tmp_path / "b", [result("mrope", [shape(ids[0], 0.012), stopped], started_at="2026-01-02T00:00:00+00:00")]
    )
    out = tmp_path / "combined"
    baselines.combine(argparse.Namespace(dirs=[early, late], out=out, problems=None, exclude=None, why=None))
    merged = json.loads((out / "mrope.eager.json").read_text())
    by_id = {s["id"]: s for s in merged["shapes"]}
    assert [s["id"] for s in merged["shapes"]] == ids
    assert by_id[ids[0]]["time_ms"] == 0.012 and by_id[ids[1]]["time_ms"] == 0.020
    assert all(by_id[i]["category"] == "not_run_unselected" for i in ids[2:]) and merged["partial"] == "selection"
    # a shape a run meant to judge but lost (its batch failed) is not called unselected
    (late / "run.json").write_text(
        json.dumps(
            {
                "baseline": "eager",
                "not_run": [
                    {"op": "mrope", "shape": ids[2], "reason": "batch error: worker died"},
                    {"op": "mrope", "shape": ids[3], "reason": "budget: predicted 9 s, 1 s left"},
                ],
            }
        )
    )
    # a shape another baseline's run lost says nothing of this baseline's
    other = tmp_path / "c"
    other.mkdir()
    (other / "run.json").write_text(
        json.dumps(
            {
                "baseline": "torch-compile",
                "not_run": [{"op": "mrope", "shape": ids[4], "reason": "batch error: worker died"}],
            }
        )
    )
    baselines.combine(argparse.Namespace(dirs=[early, late, other], out=out, problems=None, exclude=None, why=None))
    merged = json.loads((out / "mrope.eager.json").read_text())
    by_id = {s["id"]: s for s in merged["shapes"]}
    assert by_id[ids[2]]["category"] == "not_run_deadline" and by_id[ids[3]]["category"] == "not_run_unselected"
    assert by_id[ids[4]]["category"] == "not_run_unselected"
    assert merged["partial"] == "deadline"
