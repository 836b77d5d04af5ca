"""Multi-GPU scheduling of an evaluation (measurements/multi_gpu.py), tested with CPU workers: the
largest-first queue, batching by operator, idle workers taking the remaining work, the
deadline, merging partial results, and real per-device workers of the local Dask cluster running
the evaluator."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from atrex_mcp.evaluate.models import Overhead
from measurements import multi_gpu
from measurements.eval_cost import Job
from measurements_support import result, shape


def _jobs(spec: dict[str, list[float]]) -> list[Job]:
    return [Job(op, str(i), s) for op, costs in spec.items() for i, s in enumerate(costs)]


def test_queue_hands_out_the_largest_job_first_with_more_of_its_operator_under_the_cap():
    queue = multi_gpu.JobQueue(_jobs({"a": [1.0, 5.0, 2.0], "b": [9.0, 1.0]}), batch_fixed_s=1.0, batch_cap_s=8.0)
    first = queue.take(None)
    assert (first.op, first.shapes) == ("b", ["0"])  # 1 + 9 is over the cap already: alone
    second = queue.take(None)
    assert (second.op, second.shapes, second.predicted_s) == (
        "a",
        ["1", "2"],
        8.0,
    )  # 1 + 5 + 2; the 1.0 job would pass 8
    assert [(b.op, b.shapes) for b in iter(lambda: queue.take(None), None)] == [("a", ["0"]), ("b", ["1"])]


def test_queue_without_a_cap_gives_whole_operators_and_respects_the_time_left():
    whole = multi_gpu.JobQueue(_jobs({"a": [4.0, 3.0], "b": [2.0]}), batch_fixed_s=1.0, batch_cap_s=None)
    assert [(b.op, b.shapes) for b in iter(lambda: whole.take(None), None)] == [("a", ["0", "1"]), ("b", ["0"])]
    queue = multi_gpu.JobQueue(_jobs({"a": [4.0, 3.0], "b": [2.0]}), batch_fixed_s=1.0, batch_cap_s=None)
    assert (queue.take(4.0).op, queue.take(4.5).op) == ("a", "b")  # 1 + 3 fits in 4 s (1 + 4 does not); then 1 + 2
    assert queue.take(1.0) is None
    assert [(j.op, j.shape) for j in queue.remaining()] == [("a", "0")]


def test_batch_cap_is_none_on_one_gpu_and_half_a_fair_share_on_several():
    jobs = _jobs({"a": [10.0, 10.0], "b": [20.0]})
    assert multi_gpu.batch_cap(jobs, 1, 5.0) is None
    assert multi_gpu.batch_cap(jobs, 2, 5.0) == pytest.approx((40.0 + 2 * 5.0) / 4)


class _FakeRunner:
    """Sleeps a scaled share of each batch's predicted cost; records what it ran. `partial`:
    its evaluations stop before their last shape, as at a deadline."""

    def __init__(self, label: str, speed: float, partial: bool = False):
        self.label, self.speed, self.partial = label, speed, partial
        self.batches: list[tuple[str, list[str]]] = []

    def run(self, batch, deadline_epoch):
        self.batches.append((batch.op, batch.shapes))
        time.sleep(batch.predicted_s * 0.01 / self.speed)
        if self.partial:
            return {
                "status": "partial",
                "visible_devices": self.label,
                "result_file": "part.json",
                "not_run": [{"shape": batch.shapes[-1], "reason": "not_run_deadline: stopped in the timing stage"}],
            }
        return {"status": "ok", "visible_devices": self.label}

    def close(self):
        pass


def test_every_job_runs_once_and_an_idle_worker_takes_what_a_slow_one_has_not_reached():
    jobs = _jobs({op: [3.0, 2.0, 1.0] for op in "abcdefgh"})
    fast, slow = _FakeRunner("0", speed=4.0), _FakeRunner("1", speed=1.0)
    schedule = multi_gpu.run_jobs(jobs, [fast, slow], batch_fixed_s=1.0)
    ran = sorted((op, s) for r in (fast, slow) for op, shapes in r.batches for s in shapes)
    assert ran == sorted((j.op, j.shape) for j in jobs)
    assert len(fast.batches) > len(slow.batches)
    assert schedule.not_run == [] and schedule.sequential_s >= schedule.makespan_s * 0.9
    assert {o.worker for o in schedule.outcomes} == {"0", "1"}


def test_jobs_past_the_deadline_and_shapes_a_stopped_batch_did_not_reach_are_listed_not_dropped():
    jobs = _jobs({"a": [0.5], "b": [1000.0]})
    schedule = multi_gpu.run_jobs(jobs, [_FakeRunner("0", 1.0)], batch_fixed_s=0.1, deadline_s=5.0)
    assert [(n["op"], n["reason"].split(":")[0]) for n in schedule.not_run] == [("b", "budget")]
    stopped = multi_gpu.run_jobs(_jobs({"a": [0.5, 0.2]}), [_FakeRunner("0", 1.0, partial=True)], batch_fixed_s=0.1)
    assert stopped.not_run == [{"op": "a", "shape": "1", "reason": "not_run_deadline: stopped in the timing stage"}]
    assert [(o.status, o.shapes, o.result_file) for o in stopped.outcomes] == [("partial", ["0", "1"], "part.json")]


def test_a_worker_whose_process_died_stops_and_the_others_finish():
    class Dead(_FakeRunner):
        def run(self, batch, deadline_epoch):
            self.batches.append((batch.op, batch.shapes))
            return {"status": "error", "fatal": True, "message": "GPU process 1 exited (-9)"}

    dead, alive = Dead("1", 1.0), _FakeRunner("0", speed=0.05)  # alive holds its first batch long enough
    schedule = multi_gpu.run_jobs(_jobs({"a": [2.0], "b": [1.0], "c": [0.5]}), [alive, dead], batch_fixed_s=0.1)
    assert len(dead.batches) == 1
    assert [n["op"] for n in schedule.not_run] == [dead.batches[0][0]]
    assert len(alive.batches) == 2


def test_merge_orders_shapes_recomputes_the_operator_score_and_sums_overheads():
    early = result(
        "rms_norm",
        [shape("3", 1.0, score=0.4), shape("1", 1.0, correct=False)],
        overhead=Overhead(worker_start_s=5.0, total_s=9.0),
        started_at="2026-01-01T00:00:00+00:00",
    )
    late = result(
        "rms_norm",
        [shape("2", 1.0, score=0.2), shape("0", 1.0, score=0.8)],
        overhead=Overhead(worker_start_s=4.0, total_s=7.0),
        started_at="2026-01-01T00:01:00+00:00",
    )
    merged = multi_gpu.merge_results([late, early], ["0", "1", "2", "3"])
    assert [s.id for s in merged.shapes] == ["0", "1", "2", "3"]
    assert merged.operator_score == pytest.approx(0.4)  # median of 0.8, 0.2, 0.4 (shape 1 is wrong)
    assert (merged.overhead.worker_start_s, merged.overhead.total_s) == (9.0, 16.0)
    assert merged.started_at == early.started_at


def test_gpu_devices_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    assert multi_gpu.gpu_devices(None) == ["3", "5", "7"]
    assert multi_gpu.gpu_devices(2) == ["3", "5"]


@pytest.mark.slow
def test_two_cpu_workers_each_pinned_to_their_device_run_the_real_evaluator(tmp_path):
    """One process per device with its own CUDA_VISIBLE_DEVICES, the evaluator in each,
    partial results written and merged (CPU: correctness only)."""
    from atrex_mcp.evaluate.models import EvalResult
    from atrex_mcp.problemset.catalog import Catalog

    jobs = [Job("rms_norm", "smoke", 2.0), Job("silu_and_mul", "smoke", 1.0), Job("l2_norm", "smoke", 1.5)]
    schedule = multi_gpu.run_spread(
        jobs, ["0", "1"], tmp_path / "parts", {"baseline": "eager", "seeds": 1}, batch_fixed_s=5.0, deadline_s=None
    )
    assert schedule.not_run == []
    assert len(schedule.outcomes) == 3 and {o.status for o in schedule.outcomes} == {"ok"}
    adopted = 0
    for outcome in schedule.outcomes:
        assert outcome.visible_devices == outcome.worker  # each process saw only its own device
        part = EvalResult.model_validate_json(Path(outcome.result_file).read_text())
        assert part.op == outcome.op and [s.id for s in part.shapes] == outcome.shapes and part.shapes[0].correct
        assert part.shapes[0].timing_note == "not timed: no GPU"
        adopted += part.overhead.spawned_ahead_s > 0
    # a process's later batches adopt the worker spawned during the batch before (evaluate.standby)
    assert adopted == len(schedule.outcomes) - len({o.worker for o in schedule.outcomes})
    catalog = Catalog()
    merged = multi_gpu.merge_results(
        [
            EvalResult.model_validate_json(Path(o.result_file).read_text())
            for o in schedule.outcomes
            if o.op == "rms_norm"
        ],
        [s.id for s in catalog.visible("rms_norm").shapes],
    )
    assert merged.candidate == "eager" and merged.compiled


@pytest.mark.slow
def test_untimed_lanes_share_a_device_each_in_its_own_process(tmp_path):
    """Compile probes: two lanes on one device, labelled apart, both pinned to that device."""
    jobs = [Job("rms_norm", "smoke", 2.0), Job("silu_and_mul", "smoke", 1.0)]
    schedule = multi_gpu.run_spread(
        jobs,
        ["0"],
        tmp_path / "parts",
        {"baseline": "eager", "seeds": 1, "timing": False},
        batch_fixed_s=5.0,
        deadline_s=None,
        lanes_per_device=2,
    )
    assert schedule.workers == ["0-1", "0-2"] and {o.status for o in schedule.outcomes} == {"ok"}
    assert {o.visible_devices for o in schedule.outcomes} == {"0"}
    assert len({o.result_file for o in schedule.outcomes}) == 2


def test_merging_a_batch_stopped_at_the_deadline_keeps_the_result_partial():
    from atrex_mcp.evaluate import taxonomy as tx
    from atrex_mcp.evaluate.models import ShapeResult

    done = result("rms_norm", [shape("0", 1.0, score=0.4)], started_at="2026-01-01T00:00:00+00:00")
    stopped = result(
        "rms_norm",
        [
            shape("1", 1.0, score=0.2),
            ShapeResult(id="2", correct=False, stage=tx.NOT_RUN, category=tx.NOT_RUN_DEADLINE),
        ],
        started_at="2026-01-01T00:01:00+00:00",
    )
    stopped.partial = "deadline"
    merged = multi_gpu.merge_results([done, stopped], ["0", "1", "2"])
    assert merged.partial == "deadline" and merged.operator_score == pytest.approx(0.3)
    assert merged.operator_score_note.startswith("partial: over the 2 judged shapes only, 1 not run")
    assert multi_gpu.merge_results([done], ["0"]).partial is None


@pytest.mark.slow
def test_a_real_batch_running_at_the_deadline_keeps_its_finished_shape(tmp_path):
    """The per-device process gives its evaluation the time left as deadline_s: the shape that
    stalls is stopped, the one before it is kept, and only the stalled one is listed as not run."""
    from atrex_mcp.evaluate.models import EvalResult
    from eval_support import make_problem_root
    from test_eval_partial import STALLS_ON_SHAPE_1

    problems = make_problem_root(tmp_path / "problems")
    jobs = [Job("rms_norm", "0", 2.0), Job("rms_norm", "1", 1.0)]  # one batch, shape 0 first
    schedule = multi_gpu.run_spread(
        jobs,
        ["0"],
        tmp_path / "parts",
        {"source": STALLS_ON_SHAPE_1, "seeds": 1},
        batch_fixed_s=1.0,
        deadline_s=15.0,
        problems=problems,
    )
    [outcome] = schedule.outcomes
    assert outcome.status == "partial" and outcome.shapes == ["0", "1"]
    assert [(n["shape"], n["reason"].split(":")[0]) for n in schedule.not_run] == [("1", "not_run_deadline")]
    assert "during the correctness stage" in schedule.not_run[0]["reason"]
    part = EvalResult.model_validate_json(Path(outcome.result_file).read_text())
    assert part.partial == "deadline" and part.shapes[0].correct and not part.shapes[1].judged
