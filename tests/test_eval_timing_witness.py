"""The judge's witness of a reported time (atrex_mcp.evaluate.timing_witness), on recorded
figures: honest host-bound and GPU-bound kernels pass with the tolerance, forgeries of GPU-bound
kernels do not; the profile's cross-check; what benchmark mode shows of a time faster than
T_SOL; the judge's own reading of a candidate's `Model`. The worker-level attacks run in
tests/test_exploits.py."""

from __future__ import annotations

import pytest

from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.models import ShapeResult
from atrex_mcp.evaluate.session import source_defines_model
from atrex_mcp.evaluate.timing_witness import (TOLERANCE, Calibration, host_allowance_ms, judge, per_call_ms,
                                               profile_agrees, slack_ms, upper_bound_ok)
from atrex_mcp.policy import Policy

# Recorded on the shape of an H200 burst of 16 forwards (a round trip of ~80 µs, making 16 input
# sets ~0.9 ms, digesting 16 outputs ~0.6 ms in the judge's process).
CAL = Calibration(round_trip_s=80e-6, inputs_s=0.9e-3, digests_s=0.6e-3)
OVERHEAD_S = CAL.round_trip_s + CAL.inputs_s + CAL.digests_s


def _burst_wall(per_call_ms: float, calls: int = 16) -> float:
    return OVERHEAD_S + calls * per_call_ms / 1e3


def test_the_burst_is_what_is_left_once_the_judges_calibration_is_taken_off():
    assert per_call_ms(_burst_wall(0.25), 16, CAL) == pytest.approx(0.25)
    assert per_call_ms(OVERHEAD_S / 2, 16, CAL) == 0.0  # a burst faster than its overheads witnesses nothing


def test_an_honest_host_bound_kernel_is_not_flagged():
    """rms_norm shape 5 on the H200: 4.35 µs on the device, ~25 µs to launch, a ~55 µs host window."""
    host = host_allowance_ms([55.0] * 200, cuda=True, request_wall_s=0.3, calls=200)
    verdict = judge(0.00435, _burst_wall(0.025), 16, CAL, host)
    assert not verdict.forged and verdict.floor_ms == 0.0


def test_an_honest_gpu_bound_kernel_is_not_flagged_even_with_its_clocks_halved_in_the_burst():
    verdict = judge(1.0, _burst_wall(2 * 1.0), 16, CAL, host_allowance_ms([30.0], True, 1.0, 200))
    assert not verdict.forged and verdict.floor_ms < 1.0


def test_an_honest_tiny_kernel_whose_burst_left_ten_times_its_host_window_is_not_flagged():
    """rms_norm shape 0 on the H200: 6.7 µs reported, a ~175 µs host window, and a burst that left
    0.25 ms per call (the old allowance floored it at 11.4 µs: a false timing_forged)."""
    verdict = judge(0.0067, _burst_wall(0.2525), 16, CAL, host_allowance_ms([175.0] * 200, True, 0.3, 200))
    assert not verdict.forged


def test_a_gpu_bound_kernel_reporting_a_third_of_its_time_is_flagged():
    verdict = judge(1.0 / 3, _burst_wall(1.0), 16, CAL, host_allowance_ms([30.0], True, 1.0, 200))
    assert verdict.forged and verdict.floor_ms > 1.0 / 3


def test_the_claimed_host_window_is_capped_by_the_judges_wall():
    """A forgery that also claims a huge host window gets no more than the timing request's wall per call."""
    assert host_allowance_ms([5000.0] * 20, cuda=True, request_wall_s=0.02, calls=20) == pytest.approx(1.0)
    assert host_allowance_ms([5000.0] * 20, cuda=False, request_wall_s=0.02, calls=20) == 0.0  # CPU: the call itself


def test_what_a_forgery_can_hide_is_bounded_by_its_claimed_host_window():
    """The floor, solved for the witness: a true per-call time T is caught once the report is below
    (T - host - slack) / TOLERANCE."""
    true_ms, host_ms = 1.0, 0.05
    bound = (true_ms - host_ms - slack_ms(16, CAL)) / TOLERANCE
    assert judge(bound - 1e-6, _burst_wall(true_ms), 16, CAL, host_ms).forged
    assert not judge(bound + 1e-6, _burst_wall(true_ms), 16, CAL, host_ms).forged
    assert slack_ms(16, CAL) < 0.2  # the witness is tight once a call outlasts its host window and this


def test_reported_calls_must_fit_in_the_judges_wall():
    assert upper_bound_ok([1.0] * 100, request_wall_s=0.2)
    assert not upper_bound_ok([3.0] * 100, request_wall_s=0.2)


@pytest.mark.parametrize(("median_ms", "kernel_us", "agrees"), [
    (0.0061, [3.9], True),  # rms_norm on the H200: a warm profiled forward is shorter than the cold median
    (0.040, [25.0, 12.0, 9.0], True),
    (0.0061 / 3, [6.0], True),  # a third of a tiny kernel hides inside the slack: the bound loop has to hold there
    (0.40 / 3, [390.0], False),  # a third of a 0.4 ms kernel does not
])
def test_the_profiled_kernels_cross_check_the_reported_time(median_ms, kernel_us, agrees):
    assert profile_agrees(median_ms, kernel_us) is agrees


def _shape_faster_than_sol(catalog: Catalog) -> ShapeResult:
    return ShapeResult(id="0", correct=True, time_ms=0.001, score=3.2, t_sol_ms=0.0032, integrity=[tx.FASTER_THAN_SOL])


def test_benchmark_mode_shows_the_same_verdict_whichever_side_of_t_sol_the_time_lies():
    catalog = Catalog()
    policy = Policy("benchmark", catalog)
    beyond = policy.verdict(_shape_faster_than_sol(catalog))
    within = policy.verdict(ShapeResult(id="0", correct=True, time_ms=0.001, score=0.4, t_sol_ms=0.0004))
    assert beyond == within and beyond.integrity == []
    assert Policy("optimize", catalog).verdict(_shape_faster_than_sol(catalog)).integrity == [tx.FASTER_THAN_SOL]


def test_a_forgery_the_witness_caught_shows_alike_in_both_modes():
    forged = ShapeResult(id="0", correct=False, stage=tx.PERFORMANCE, category=tx.TIMING_TAMPERED,
                         message="The reported median lies below what the judge's own clock witnessed.",
                         integrity=[tx.TIMING_FORGED])
    catalog = Catalog()
    shown = Policy("benchmark", catalog).verdict(forged)
    assert (shown.category, shown.integrity) == (tx.TIMING_TAMPERED, [tx.TIMING_FORGED])


@pytest.mark.parametrize(("source", "defines"), [
    ("import torch\nclass Model(torch.nn.Module):\n    pass\n", True),
    ("from impl import Fast as Model\n", True),
    ("Model = type('Model', (object,), {})\n", True),
    ("def Model(**init):\n    return None\n", False),
    ("class Other:\n    pass\n", False),
    ("def broken(:\n", True),  # left to the worker, which reports the syntax error
])
def test_the_judge_reads_model_from_the_source_itself(source, defines):
    assert source_defines_model(source) is defines


@pytest.mark.parametrize("claimed", [
    {"stage": "performance", "category": "faster_than_sol", "type": "builtins.RuntimeError", "message": "S > 1"},
    {"stage": "correctness", "category": "numeric_mismatch", "type": "builtins.RuntimeError", "message": "wrong"},
    {"stage": "not_run", "category": "not_run_deadline", "type": "builtins.RuntimeError", "message": "stopped"},
])
def test_a_worker_cannot_name_a_verdict_of_the_judges_stages(claimed):
    """A failure the worker reports stays a failure, and only compile or runtime categories are
    taken from it: it cannot select a T_SOL-dependent or a not-run verdict."""
    from atrex_mcp.evaluate.session import classify

    assert classify(claimed) == (tx.RUNTIME, tx.EXCEPTION)
