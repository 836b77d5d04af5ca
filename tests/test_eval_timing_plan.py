"""How many input sets and timed calls a shape gets, and what the timing stage does with a
reply that reused sets: a set is timed again only where the reuse check can decide
(`fit_calls_to_sets`), a reply that reused sets without that is voided, and when calls on
reused sets ran much faster only first visits make the time. The stage runs here against a
stand-in worker session; measurements/reuse_cache_exploit.py runs the caching exploit on the H200."""

from __future__ import annotations

from typing import ClassVar

import pytest

from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.evaluator import (
    CHECKABLE_SETS,
    MAX_TIMED_CALLS,
    MIN_TIMED_CALLS,
    TIMING_INPUT_BUDGET_BYTES,
    TIMING_MEMORY_SHARE,
    TIMING_STOP_RELATIVE,
    Trial,
    timing_sets,
)
from atrex_mcp.evaluate.models import EvalRequest, ShapeResult
from atrex_mcp.evaluate.session import Failure
from atrex_mcp.evaluate.timing_checks import input_reuse
from atrex_mcp.evaluate.transfer import OutputArena, OutputRejected, manifest_bytes
from atrex_mcp.problemset.catalog import Catalog
from sandbox.timing import (
    LONG_CALL_MS,
    LONG_MIN_CALLS,
    LONG_TIMED_S,
    LONG_WARMUP_CALLS,
    REUSE_MIN_CALLS,
    STOP_CHECK_EVERY,
    call_order,
    fit_calls_to_sets,
    plan_calls,
    reuse_checkable,
    reuse_phase,
)

GB = 10**9


def test_a_set_is_timed_again_only_where_the_reuse_check_can_decide():
    for sets in range(2, 210):
        for planned in range(1, 260):
            calls = fit_calls_to_sets(planned, sets)
            first, phase = reuse_phase(sets, calls)
            assert calls <= sets or input_reuse([1.0] * calls, first, phase).decided, (sets, planned, calls)
            assert calls in (planned, sets) or calls == sets + REUSE_MIN_CALLS, (sets, planned, calls)
            assert reuse_checkable(sets, calls) == (calls > sets and input_reuse([1.0] * calls, first, phase).decided)


@pytest.mark.parametrize(
    ("sets", "planned", "expected"),
    [
        (2, 20, 2),  # before: 20 calls, 19 on set 0, nothing decided
        (8, 20, 8),  # 4 fresh calls in the shared phase: too few to compare
        (9, 20, 20),
        (17, 20, 22),  # 3 reused calls would be too few: 5 are made
        (200, 200, 200),
        (50, 20, 20),
    ],
)
def test_the_fitted_call_counts(sets, planned, expected):
    calls = fit_calls_to_sets(planned, sets)
    assert calls == expected
    assert call_order(sets, calls)[: min(calls, sets)] == list(range(min(calls, sets))) or calls > sets


def test_large_inputs_get_enough_sets_for_the_reuse_check_where_the_gpu_holds_them():
    h200 = 141 * GB
    assert timing_sets(1 << 20, h200) == MAX_TIMED_CALLS  # small shapes: one fresh set per call, as before
    assert timing_sets(100 << 20, h200) == TIMING_INPUT_BUDGET_BYTES // (100 << 20)  # within the old budget: unchanged
    assert timing_sets(1 * GB, h200) == CHECKABLE_SETS  # was 2
    assert timing_sets(5 * GB, h200) == int(TIMING_MEMORY_SHARE * h200) // (5 * GB)  # capped by the GPU's memory share
    assert timing_sets(80 * GB, h200) == 2  # never fewer than 2
    assert timing_sets(1 * GB, None) == 2  # memory unknown: the old budget


def test_a_manifest_says_how_many_bytes_its_output_holds():
    manifest = {
        "structure": "tuple",
        "tensors": [{"dtype": "float32", "shape": [4, 8]}, {"dtype": "int8", "shape": [3]}],
    }
    assert manifest_bytes(manifest) == 4 * 8 * 4 + 3
    with pytest.raises(OutputRejected):
        manifest_bytes({"structure": "tensor", "tensors": [{"dtype": "object", "shape": [1]}]})


class _Session:
    """Answers the timing stage's requests as a worker would, with a chosen `time` reply."""

    worker_device: ClassVar[dict[str, int]] = {"l2_bytes": 50 << 20}
    alive = False  # the failed fetch leaves no worker to release

    def __init__(self, time_reply):
        self.time_reply, self.sent = time_reply, []
        self.arena = OutputArena(cuda=False)

    def call(self, request, timeout_s, timeout_category=None):
        cmd, payload = request.command, request.wire()
        self.sent.append((cmd, payload))
        if cmd == "time":
            return self.time_reply(payload)
        return Failure(tx.RUNTIME, tx.CRASH, "stand-in worker: no outputs to fetch")


def _reply(calls, fresh_ms, reused_ms):
    def reply(payload):
        sets = len(payload["seeds"])
        order = call_order(sets, calls)
        seen, times = set(), []
        for index in order:
            times.append(reused_ms if index in seen else fresh_ms)
            seen.add(index)
        return {
            "times_ms": times,
            "synced_ms": [t + 0.01 for t in times],
            "noop_gap_ms": [0.01] * 50,
            "wall_s": sum(times) / 1e3 + 0.5,
            "calls": calls,
            "warmup": 3,
            "kept": sorted(set(order)),
            "digests": [[k, k] for k in order],
            "spin_us": 300.0,
            "host_us": [20.0] * calls,
            "replaced": [],
        }

    return reply


def _timed(reply, sets):
    evaluation = Trial(EvalRequest(op="rms_norm", baseline="eager", shapes=["0"]), Catalog(), None, None)
    session, result = _Session(reply), ShapeResult(id="0", correct=True)
    evaluation.timing(session, evaluation.shapes[0], result, TIMING_INPUT_BUDGET_BYTES // sets)  # memory unknown on CPU
    (cmd, payload), *_ = session.sent
    assert cmd == "time" and payload["fit_to_sets"] is True and len(payload["seeds"]) == sets
    return result


def test_a_cache_on_reused_sets_is_timed_on_first_visits_only():
    result = _timed(_reply(calls=40, fresh_ms=2.0, reused_ms=0.05), sets=20)
    assert tx.INPUT_REUSE_SPEEDUP in result.integrity
    assert result.timing.median_ms == pytest.approx(2.0) and result.timing.min_ms == pytest.approx(2.0)


def test_an_honest_kernel_is_timed_on_every_call():
    result = _timed(_reply(calls=41, fresh_ms=2.0, reused_ms=1.96), sets=20)  # 21 calls on reused sets
    assert tx.INPUT_REUSE_SPEEDUP not in result.integrity and result.timing.reuse_compared
    assert result.timing.median_ms == pytest.approx(1.96)
    assert {"timing", "timed_output_checks"} <= result.seconds.keys()  # the request, then the checks of its outputs


def test_a_reply_that_reused_sets_the_check_cannot_judge_is_voided():
    result = _timed(
        _reply(calls=20, fresh_ms=2.0, reused_ms=0.05), sets=3
    )  # the old plan: 17 of 20 calls on reused sets
    assert tx.REUSE_UNCHECKED in result.integrity and not result.timing.reuse_compared
    assert not result.correct and (result.stage, result.category) == (tx.PERFORMANCE, tx.TIMING_TAMPERED)
    assert result.time_ms is None and result.timing_note == "time voided by an integrity failure"


def test_kept_sets_that_name_no_timed_set_are_never_fetched():
    """The worker's list of kept outputs is its word: entries that are not indices of the timed
    sets are dropped before any is chosen, instead of crashing the judge."""

    def reply(payload):
        return {**_reply(calls=20, fresh_ms=2.0, reused_ms=2.0)(payload), "kept": ["x", None, -1, 10**6, 2.0]}

    evaluation = Trial(EvalRequest(op="rms_norm", baseline="eager", shapes=["0"]), Catalog(), None, None)
    session, result = _Session(reply), ShapeResult(id="0", correct=True)
    evaluation.timing(session, evaluation.shapes[0], result, TIMING_INPUT_BUDGET_BYTES // 20)
    assert [cmd for cmd, _ in session.sent] == ["time"]  # nothing to fetch
    assert result.timing is not None


class _Clock:
    """Host events on a clock that only the timed call moves (by its input set's `ms`)."""

    def __init__(self) -> None:
        self.now = 0.0

    def primitives(self):
        from sandbox.timing import Primitives

        clock = self

        class Event:
            def __init__(self, enable_timing: bool = False):
                self.t = 0.0

        def record(event) -> None:
            event.t = clock.now

        return Primitives(
            {
                "torch.cuda.Event": Event,
                "torch.cuda.Event.record": record,
                "torch.cuda.Event.elapsed_time": lambda start, end: end.t - start.t,
                "torch.cuda.synchronize": lambda: None,
                "time.perf_counter": lambda: clock.now / 1e3,
                "torch.cuda._sleep": lambda cycles: None,
            }
        )

    def call(self, inputs):
        import torch

        self.now += inputs["ms"]
        return torch.full((4,), inputs["ms"])


def _stopped(times_ms: list[float], calls: int, stop: float | None, first: int = 20, every: int = 10):
    import torch

    from sandbox.timing import time_calls

    clock = _Clock()
    sets = [{"ms": t, "x": torch.zeros(1)} for t in times_ms]
    return time_calls(
        clock.primitives(),
        clock.call,
        {"ms": 1.0, "x": torch.zeros(1)},
        sets,
        calls,
        2,
        4096,
        stop_relative=stop,
        stop_after=first,
        stop_every=every,
    )


def _planned(estimate_ms: float, times_ms: list[float]):
    """The worker's path: the plan from the estimate, then the loop stopping where the plan says."""
    from sandbox.timing import plan_calls

    plan = plan_calls(estimate_ms, minimum=MIN_TIMED_CALLS, maximum=MAX_TIMED_CALLS)
    return plan, _stopped(times_ms, plan.calls, TIMING_STOP_RELATIVE, plan.first_check, plan.check_every)


def test_the_timed_calls_stop_once_the_medians_interval_is_tight_and_not_before_the_minimum():
    steady = _stopped([1.0] * 200, 200, 0.01)
    assert len(steady.times_ms) == len(steady.digests) == len(steady.host_us) == 20  # the first look, at 20 calls
    assert sorted(steady.kept) == list(range(20))
    spread = [1.0 + (k % 7) * 0.3 for k in range(120)]  # the median's interval stays wide
    assert len(_stopped(spread, 120, 0.01).times_ms) == 120
    mostly = [1.0 + (0.3 if k % 10 == 0 else 0.0) for k in range(200)]  # tight once enough calls outvote the outliers
    assert 20 <= len(_stopped(mostly, 200, 0.01).times_ms) < 200
    assert len(_stopped([1.0] * 200, 200, None).times_ms) == 200  # no stop asked for: every planned call


def test_a_run_that_reuses_input_sets_keeps_every_planned_call():
    run = _stopped([1.0] * 10, 40, 0.01)  # 40 calls over 10 sets: the reuse check needs them all
    assert len(run.times_ms) == 40


def test_the_medians_interval_is_read_from_order_statistics():
    from sandbox.timing import ci_tight, median_ci

    assert median_ci([float(k) for k in range(1, 21)]) == (5.0, 16.0)  # ranks 10 ∓ 1.96·√20/2
    assert median_ci([3.0]) == (3.0, 3.0)
    assert ci_tight([1.0] * 20, 0.0) and not ci_tight([float(k) for k in range(1, 21)], 0.5)


def test_a_long_call_stops_after_five_tight_calls_and_looks_every_five():
    """attention_forward shape 8 on the H200: 1,340 ms a call; 20 of them took 27 s to learn what 5 pinned."""
    plan, run = _planned(1340.0, [1340.0 + 0.1 * (k % 3) for k in range(20)])
    assert (plan.calls, plan.first_check, plan.check_every) == (MIN_TIMED_CALLS, LONG_MIN_CALLS, LONG_MIN_CALLS)
    assert len(run.times_ms) == len(run.digests) == 5 and sorted(run.kept) == list(range(5))
    one_slow = [1340.0 + (300.0 if k == 2 else 0.0) for k in range(20)]  # 5 and 10 calls: the interval is min..max
    assert len(_planned(1340.0, one_slow)[1].times_ms) == 15
    _, short = _planned(136.0, [136.0] * 20)  # 20 calls would take 2.7 s: long too
    assert len(short.times_ms) == LONG_MIN_CALLS


def test_a_noisy_long_call_runs_its_planned_calls():
    """A long call as noisy as chunk_gated_delta_rule_state on the H200 (IQR 10-15 % of its ~90 ms)."""
    plan, run = _planned(136.0, [136.0 * (1 + 0.15 * (k % 4)) for k in range(20)])
    assert plan.first_check == LONG_MIN_CALLS and len(run.times_ms) == plan.calls == MIN_TIMED_CALLS


@pytest.mark.parametrize("estimate_ms", [0.01, 5.0, 57.0])
def test_a_call_whose_minimum_sample_fits_in_two_seconds_keeps_its_first_look_at_twenty(estimate_ms):
    plan, run = _planned(estimate_ms, [estimate_ms] * MAX_TIMED_CALLS)
    assert (plan.first_check, plan.check_every) == (MIN_TIMED_CALLS, STOP_CHECK_EVERY)
    assert len(run.times_ms) == MIN_TIMED_CALLS  # 57 ms: all 20 planned; shorter: stopped at the first look
    assert plan_calls(LONG_TIMED_S * 1e3 / MIN_TIMED_CALLS).first_check == MIN_TIMED_CALLS  # exactly 2 s: not long


def test_a_long_call_warms_up_once_after_its_two_estimate_calls():
    assert [plan_calls(ms).warmup for ms in (1340.0, 136.0, LONG_CALL_MS)] == [LONG_WARMUP_CALLS] * 3
    assert [plan_calls(ms).warmup for ms in (49.0, 5.0, 0.01)] == [3, 4, 50]  # max(3, 20 ms of calls), at most 50
    assert [plan_calls(ms).calls for ms in (1340.0, 5.0, 0.01)] == [20, 50, 200]  # the planned calls are as before


def test_a_long_call_over_fewer_sets_than_planned_calls_visits_each_set_once_and_may_stop():
    """attention_forward shape 8 on the H200 held 10 input sets: 20 planned calls would reuse them,
    which keeps every planned call (the reuse check needs them); a long call is fitted to the sets."""
    from sandbox.timing import plan_calls

    plan = plan_calls(1340.0, minimum=MIN_TIMED_CALLS, maximum=MAX_TIMED_CALLS)
    calls = fit_calls_to_sets(plan.calls, 10, plan.long)
    assert plan.long and calls == 10
    run = _stopped([1340.0 + 0.1 * (k % 3) for k in range(10)], calls, TIMING_STOP_RELATIVE, plan.first_check, 5)
    assert len(run.times_ms) == LONG_MIN_CALLS
    assert fit_calls_to_sets(20, 4, long=True) == 4  # fewer sets than the stop's first look: one call per set
    assert fit_calls_to_sets(20, 30, long=True) == 20
    assert not plan_calls(5.0).long and fit_calls_to_sets(20, 10) == 20  # a short call still reuses sets to decide
