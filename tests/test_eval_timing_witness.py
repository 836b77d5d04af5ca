"""The judge's witness of a reported time (atrex_mcp.evaluate.timing_witness), on recorded
figures: honest host-bound and GPU-bound kernels pass with the tolerance, forgeries of GPU-bound
kernels do not; the profile's cross-check; what benchmark mode shows of a time faster than
T_SOL; the judge's own reading of a candidate's `Model`. The worker-level attacks run in
tests/test_exploits.py."""

from __future__ import annotations

import pytest

from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.models import ShapeResult
from atrex_mcp.evaluate.session import source_defines_model
from atrex_mcp.evaluate.timing_witness import (
    GRAPH,
    GRAPH_BUDGET_BYTES,
    GRAPH_MAX_CALLS,
    GRAPH_TARGET_S,
    TOLERANCE,
    UNCAPTURABLE,
    WITNESS_BURST_S,
    WITNESS_CALLS,
    Calibration,
    GraphCalibration,
    Witness,
    burst_calls,
    graph_budget_bytes,
    graph_calls,
    graph_conclusive,
    graph_dominated,
    graph_slack_ms,
    host_allowance_ms,
    judge,
    judge_graph,
    per_call_ms,
    profile_agrees,
    scored_time_ms,
    slack_ms,
    upper_bound_ok,
    witness_calls,
)
from atrex_mcp.policy import Policy
from atrex_mcp.problemset.catalog import Catalog

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


@pytest.mark.parametrize(
    ("median_ms", "kernel_us", "agrees"),
    [
        (0.0061, [3.9], True),  # rms_norm on the H200: a warm profiled forward is shorter than the cold median
        (0.040, [25.0, 12.0, 9.0], True),
        (0.0061 / 3, [6.0], True),  # a third of a tiny kernel hides inside the slack: the bound loop has to hold there
        (0.40 / 3, [390.0], False),  # a third of a 0.4 ms kernel does not
    ],
)
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
    forged = ShapeResult(
        id="0",
        correct=False,
        stage=tx.PERFORMANCE,
        category=tx.TIMING_TAMPERED,
        message="The reported median lies below what the judge's own clock witnessed.",
        integrity=[tx.TIMING_FORGED],
    )
    catalog = Catalog()
    shown = Policy("benchmark", catalog).verdict(forged)
    assert (shown.category, shown.integrity) == (tx.TIMING_TAMPERED, [tx.TIMING_FORGED])


@pytest.mark.parametrize(
    ("source", "defines"),
    [
        ("import torch\nclass Model(torch.nn.Module):\n    pass\n", True),
        ("from impl import Fast as Model\n", True),
        ("Model = type('Model', (object,), {})\n", True),
        ("def Model(**init):\n    return None\n", False),
        ("class Other:\n    pass\n", False),
        ("def broken(:\n", True),  # left to the worker, which reports the syntax error
    ],
)
def test_the_judge_reads_model_from_the_source_itself(source, defines):
    assert source_defines_model(source) is defines


@pytest.mark.parametrize(
    "claimed",
    [
        {"stage": "performance", "category": "faster_than_sol", "type": "builtins.RuntimeError", "message": "S > 1"},
        {"stage": "correctness", "category": "numeric_mismatch", "type": "builtins.RuntimeError", "message": "wrong"},
        {"stage": "not_run", "category": "not_run_deadline", "type": "builtins.RuntimeError", "message": "stopped"},
    ],
)
def test_a_worker_cannot_name_a_verdict_of_the_judges_stages(claimed):
    """A failure the worker reports stays a failure, and only compile or runtime categories are
    taken from it: it cannot select a T_SOL-dependent or a not-run verdict."""
    from atrex_mcp.evaluate.session import classify

    assert classify(claimed) == (tx.RUNTIME, tx.EXCEPTION)


# -- the graph burst (timing_witness.judge_graph, graph_calls, unwitnessed) -------------------------
# A replay of a graph of K forwards is device time: no launch, no host window to subtract.
# A ~60 µs round trip, as recorded on the H200; the batched fingerprints (a share of two launches and
# a few reads of the output per call) assumed at ~1.5 µs per call. The input refresh (one launch per
# float input, whatever K is) is assumed at ~30 µs, ±10 µs.


def _graph_cal(calls: int) -> GraphCalibration:
    return GraphCalibration(round_trip_s=60e-6, fingerprints_s=calls * 1.5e-6, refresh_s=30e-6, refresh_spread_s=10e-6)


def _graph_wall(device_ms: float, calls: int) -> float:
    cal = _graph_cal(calls)
    return cal.round_trip_s + cal.refresh_s + cal.fingerprints_s + calls * device_ms / 1e3


def test_the_graph_burst_is_long_enough_to_time_and_fits_its_memory_budget():
    assert graph_calls(0.00435, set_bytes=1_660_000) * 0.00435 >= GRAPH_TARGET_S * 1e3  # rms_norm shape 5: ~920 calls
    assert graph_calls(0.0067, set_bytes=10_240_000) == 598  # shape 0: 4 ms of it, within the budget
    assert graph_calls(0.1, set_bytes=2 << 30) == 8  # fp8_blockscale_fused_moe's 2 GiB sets: the budget decides
    assert graph_calls(5.0, set_bytes=1000) == WITNESS_CALLS  # never fewer calls than the plain burst of that median
    assert graph_calls(1e-9, set_bytes=1) == GRAPH_MAX_CALLS  # a forged tiny median only lengthens the burst
    assert graph_calls(1.0, set_bytes=GRAPH_BUDGET_BYTES) == 2
    assert graph_budget_bytes(141 << 30) == GRAPH_BUDGET_BYTES  # an H200: the fixed budget
    assert graph_budget_bytes(24 << 30) == 3 << 30  # a smaller GPU: an eighth of its memory
    assert graph_budget_bytes(None) == GRAPH_BUDGET_BYTES


@pytest.mark.parametrize(
    ("median_ms", "plain", "graph"),
    [
        (1340.0, 2, 2),  # attention_forward shape 8 (eager, H200): 3 × 16 calls took 44 s
        (136.0, 4, 4),
        (57.0, 9, 9),
        (5.0, 10, WITNESS_CALLS),  # a short call: as many as the timing stage's sets (10 here), 16 in the graph
        (0.0067, 10, 598),  # rms_norm shape 0: the graph's K fills GRAPH_TARGET_S
    ],
)
def test_a_burst_of_a_long_call_holds_half_a_second_of_calls_not_sixteen(median_ms, plain, graph):
    assert witness_calls(median_ms, sets=10) == plain and graph_calls(median_ms, set_bytes=10_240_000) == graph
    assert burst_calls(median_ms) * median_ms >= WITNESS_BURST_S * 1e3 or burst_calls(median_ms) == WITNESS_CALLS


@pytest.mark.parametrize("forged_ms", [1e-9, 0.0, -5.0, float("nan")])
def test_a_forged_tiny_or_unreadable_median_gets_the_full_bursts(forged_ms):
    assert witness_calls(forged_ms, sets=40) == WITNESS_CALLS
    assert graph_calls(forged_ms, set_bytes=1) == GRAPH_MAX_CALLS
    assert witness_calls(float("inf"), sets=40) == graph_calls(float("inf"), set_bytes=1) == 2  # scored at inf


def test_two_calls_of_a_long_kernel_keep_the_floor_within_a_tenth_of_a_percent():
    """1,340 ms at 2 calls: the plain floor allows (JITTER_S + the calibration's error) / 2 a call, the
    graph floor (GRAPH_JITTER_S + its calibration errors) / 2; an honest kernel is not flagged, a third is."""
    assert slack_ms(2, Calibration(0.0, 0.0, 0.0)) == pytest.approx(0.5)  # 0.04 % of 1,340 ms
    assert graph_slack_ms(2, GraphCalibration(0.0, 0.0)) == pytest.approx(0.1)  # 0.008 %
    host = host_allowance_ms([55.0] * 5, cuda=True, request_wall_s=8.0, calls=5)
    assert not judge(1340.0, _burst_wall(1340.0, 2), 2, CAL, host).forged
    assert judge(1340.0 / 3, _burst_wall(1340.0, 2), 2, CAL, host).forged
    assert not judge_graph(1340.0, _graph_wall(1340.0, 2), 2, _graph_cal(2)).forged
    assert judge_graph(1340.0 / 3, _graph_wall(1340.0, 2), 2, _graph_cal(2)).forged


@pytest.mark.parametrize(
    ("device_ms", "median_ms"),
    [
        (0.00435, 0.00435),  # rms_norm shape 5, host-bound in the timing loop, device-bound in a graph
        (0.0067, 0.0067),  # shape 0
        (0.0040, 0.00435),  # a warm replay a little faster than the cold timed median
        (2 * 0.0067, 0.0067),  # the replay at half the clock of the timed loop
        (1.0, 1.0),
    ],
)
def test_an_honest_kernel_passes_the_graph_witness(device_ms, median_ms):
    calls = graph_calls(median_ms, set_bytes=1_000_000)
    verdict = judge_graph(median_ms, _graph_wall(device_ms, calls), calls, _graph_cal(calls))
    assert not verdict.forged and verdict.graph
    assert verdict.per_call_ms == pytest.approx(device_ms)


@pytest.mark.parametrize("shape_ms", [0.0067, 0.00435, 1.0])
@pytest.mark.parametrize("divisor", [3, 10])
def test_the_handler_table_forgery_is_caught_on_host_bound_shapes_too(shape_ms, divisor):
    """The attack the plain burst missed (rms_norm shapes 0 and 5, a third and a tenth reported)."""
    calls = graph_calls(shape_ms / divisor, set_bytes=1_000_000)
    verdict = judge_graph(shape_ms / divisor, _graph_wall(shape_ms, calls), calls, _graph_cal(calls))
    assert verdict.forged and verdict.floor_ms > shape_ms / divisor
    host = host_allowance_ms([25.0] * 200, True, 0.3, 200)
    assert not judge(shape_ms / divisor, _burst_wall(max(shape_ms, 0.025)), 16, CAL, host).forged or shape_ms == 1.0


def test_the_replays_refresh_is_taken_off_the_wall_and_its_spread_joins_the_slack():
    """rms_norm shape 0 on the H200: K = 209 calls of 6.7 µs, the refresh of 209 sets of x (~1 GB)
    about as long as the forwards; the witness is the forwards' time, a forged third stays caught."""
    calls, refresh = 209, 1.2e-3
    cal = GraphCalibration(round_trip_s=60e-6, fingerprints_s=calls * 1.5e-6, refresh_s=refresh, refresh_spread_s=40e-6)
    wall = cal.round_trip_s + refresh + cal.fingerprints_s + calls * 0.0067 / 1e3
    honest = judge_graph(0.0067, wall, calls, cal)
    assert honest.per_call_ms == pytest.approx(0.0067) and not honest.forged
    assert judge_graph(0.0067 / 3, wall, calls, cal).forged
    assert graph_slack_ms(calls, cal) - graph_slack_ms(
        calls, GraphCalibration(60e-6, calls * 1.5e-6, refresh, 0.0)
    ) == pytest.approx(40e-6 / calls * 1e3)


def test_what_a_forger_can_claim_is_its_graph_device_time_over_the_tolerance():
    calls, device_ms = 500, 0.0067
    cal = _graph_cal(calls)
    bound = (device_ms - graph_slack_ms(calls, cal)) / TOLERANCE
    assert judge_graph(bound - 1e-7, _graph_wall(device_ms, calls), calls, cal).forged
    assert not judge_graph(bound + 1e-7, _graph_wall(device_ms, calls), calls, cal).forged
    assert bound > 0.4 * device_ms  # the slack is small against K·t ≥ 2 ms


def test_where_no_graph_replay_witnesses_the_judges_wall_per_call_is_the_least_time():
    """rms_norm shape 5 with a host synchronisation (plain floor 0, the judge's wall 0.09 ms a call):
    a forged 0.0014 ms is scored at 0.09 ms, so hiding from the graph gains nothing; a device-bound
    median above the judge's wall keeps its own value."""
    assert scored_time_ms(0.0014, 0.0903) == 0.0903
    assert scored_time_ms(1.2, 1.0) == 1.2
    assert scored_time_ms(0.0014, None) == 0.0014


# -- the evaluator's use of the graph witness (Trial.witness, graph_witness.run and the plain bursts stubbed) --


class _Session:
    alive = True

    def __init__(self):
        self.calls = []

    def call(self, request, timeout_s):
        wire = request.wire()
        self.calls.append((wire.pop("cmd"), wire))
        return {"ok": True}


def _decide(monkeypatch, outcome, median_ms, plain, run=None):
    """The evaluator's witness on a GPU with graph_witness.run answering `outcome` (or being
    `run`) and the plain bursts answering `plain`: (the verdict that judged, the result, whether
    the plain bursts ran)."""
    from types import SimpleNamespace

    from atrex_mcp.evaluate import evaluator, graph_witness
    from atrex_mcp.evaluate.models import TimingStats

    monkeypatch.setattr(graph_witness, "run", run or (lambda *args: outcome))
    judged, plain_ran = [], []
    flag = evaluator._flag_forged
    monkeypatch.setattr(
        evaluator,
        "_flag_forged",
        lambda result, median, verdict: (judged.append(verdict), flag(result, median, verdict)),
    )
    result = ShapeResult(
        id="0",
        correct=True,
        timing=TimingStats(
            median_ms=median_ms,
            q1_ms=median_ms,
            q3_ms=median_ms,
            iqr_ms=0.0,
            min_ms=median_ms,
            calls=200,
            warmup_calls=1,
            input_sets=200,
            flush_bytes=0,
            covers_side_streams=False,
            sync_gap_ms=0.0,
            wall_s=0.1,
        ),
    )
    session = _Session()
    trial = SimpleNamespace(
        request=SimpleNamespace(timeout_s=10.0), cuda=True, graph_fallback=evaluator.Trial.graph_fallback
    )
    trial.graph_burst = lambda *args: evaluator.Trial.graph_burst(trial, *args)
    trial.plain_witness = lambda *args: (plain_ran.append(True), plain)[1]
    evaluator.Trial.witness(trial, session, None, result, 16, median_ms, 0.0, 1 << 20)
    assert (
        "keep",
        {"sets": [], "burst_done": True},
    ) in session.calls  # the graph and its outputs are dropped in every case
    return (judged[0] if judged else None), result, bool(plain_ran)


def _plain(median_ms: float, floor_ms: float, per_call_ms: float | None = None) -> Witness:
    """The plain burst's verdict; its wall per call is at least a launch (~25 µs on the H200)."""
    per_call = max(2 * floor_ms, 0.025) if per_call_ms is None else per_call_ms
    return Witness(calls=16, wall_s=0.01, per_call_ms=per_call, floor_ms=floor_ms, forged=median_ms < floor_ms)


def test_a_captured_graph_sets_the_floor_where_it_is_tighter(monkeypatch):
    graph = judge_graph(0.00067, _graph_wall(0.0067, 300), 300, _graph_cal(300))
    verdict, result, plain_ran = _decide(monkeypatch, graph, 0.00067, _plain(0.00067, 0.0))
    assert verdict is graph and verdict.forged and not plain_ran
    assert result.timing.witness == GRAPH and result.timing.graph_calls == 300
    assert result.timing.witness_floor_ms == result.timing.graph_floor_ms == graph.floor_ms


def test_a_graph_replay_dominated_by_its_input_refresh_is_inconclusive(monkeypatch):
    """The H200 case: an honest MoE decode kernel (0.035 ms, reading 8 of 128 experts) whose input
    sets hold every expert's weights, K = 2. The refresh of 2 × 1.2 GB, timed by the judge in its
    own process, was off by more than the forward: the graph floor (0.094 ms) failed the honest
    median. What was taken off per call exceeds the plain burst's whole wall per call, so the
    graph does not judge; the plain burst does, as for a kernel without a graph."""
    cal = GraphCalibration(round_trip_s=60e-6, fingerprints_s=2e-6, refresh_s=2.4e-3, refresh_spread_s=0.05e-3)
    graph = judge_graph(0.035, cal.round_trip_s + cal.refresh_s + cal.fingerprints_s + 2 * 0.314e-3, 2, cal)
    assert graph.forged  # what the H200 run showed
    plain = _plain(0.035, 0.01, per_call_ms=0.12)
    assert not graph_conclusive(graph, plain)
    verdict, result, plain_ran = _decide(monkeypatch, graph, 0.035, plain)
    assert plain_ran and verdict is plain and not verdict.forged and result.correct
    assert result.timing.witness == GRAPH and "inconclusive" in result.timing.witness_note
    assert result.timing.clock_ms == max(plain.per_call_ms, graph.floor_ms)  # the least time now
    assert result.timing.graph_subtracted_ms == pytest.approx(graph.subtracted_ms)  # recorded for the next tuning
    assert result.timing.graph_slack_ms == pytest.approx(graph_slack_ms(2, cal))
    # rms_norm shape 0 as measured: a small refresh against the plain burst's wall, the graph judges
    small = judge_graph(0.00218, _graph_wall(0.0083, 209), 209, _graph_cal(209))
    assert graph_conclusive(small, _plain(0.00218, 0.0, per_call_ms=0.157)) and small.forged


def test_a_replay_that_witnessed_plenty_judges_though_the_plain_burst_left_nothing(monkeypatch):
    """rms_norm shape 5 (honest 4.3 µs) on the H200 with a handler reporting a tenth: the judge's
    calibration of the plain burst exceeded its wall (0 ms a call left), while the replay left
    4.0 µs a call after 3.1 µs were taken off. The replay judges, and the forgery fails."""
    cal = GraphCalibration(round_trip_s=60e-6, fingerprints_s=0.3e-3, refresh_s=2.908e-3, refresh_spread_s=0.05e-3)
    graph = judge_graph(0.00042, cal.round_trip_s + cal.refresh_s + cal.fingerprints_s + 1024 * 4.035e-6, 1024, cal)
    plain = _plain(0.00042, 0.0, per_call_ms=0.0)
    assert graph_conclusive(graph, plain) and graph.forged
    verdict, result, plain_ran = _decide(monkeypatch, graph, 0.00042, plain)
    assert verdict is graph and verdict.forged and result.timing.clock_ms is None and not plain_ran


def test_an_inconclusive_replays_floor_bounds_the_least_time_where_the_plain_burst_left_nothing(monkeypatch):
    cal = GraphCalibration(round_trip_s=60e-6, fingerprints_s=2e-6, refresh_s=2.4e-3, refresh_spread_s=0.05e-3)
    graph = judge_graph(0.0035, cal.round_trip_s + cal.refresh_s + cal.fingerprints_s + 2 * 0.314e-3, 2, cal)
    plain = _plain(0.0035, 0.0, per_call_ms=0.0)
    assert not graph_conclusive(graph, plain)
    verdict, result, plain_ran = _decide(monkeypatch, graph, 0.0035, plain)
    assert plain_ran and verdict is plain and result.timing.clock_ms == graph.floor_ms > 0.09
    assert scored_time_ms(0.0035, result.timing.clock_ms) == graph.floor_ms


def test_a_replay_its_refresh_does_not_dominate_judges_alone_without_the_plain_bursts(monkeypatch):
    """The plain bursts cost a shape ~0.1 s on the H200 and add nothing where the replay judges:
    its floor is device time the worker cannot shrink, so they run only where it cannot."""
    graph = judge_graph(1.0, _graph_wall(0.5, 16), 16, _graph_cal(16))
    verdict, result, plain_ran = _decide(monkeypatch, graph, 1.0, _plain(1.0, 0.45))
    assert verdict is graph and not verdict.forged and not plain_ran
    assert result.timing.witness == GRAPH and result.timing.witness_floor_ms == graph.floor_ms
    assert result.timing.witness_ms is None and result.timing.clock_ms is None and result.correct


def test_a_dominated_replay_still_conclusive_against_the_plain_burst_keeps_the_tighter_floor(monkeypatch):
    """Taken off more than twice what the replay left, but less than the plain burst's wall per
    call: the replay still judges, beside the plain burst, and the larger floor decides."""
    cal = GraphCalibration(round_trip_s=60e-6, fingerprints_s=2e-6, refresh_s=0.2e-3, refresh_spread_s=0.0)
    graph = judge_graph(0.02, cal.round_trip_s + cal.refresh_s + cal.fingerprints_s + 16 * 0.004e-3, 16, cal)
    plain = _plain(0.02, 0.009, per_call_ms=0.05)
    assert graph_dominated(graph) and graph_conclusive(graph, plain)
    verdict, result, plain_ran = _decide(monkeypatch, graph, 0.02, plain)
    assert plain_ran and verdict is plain and result.timing.witness_floor_ms == 0.009
    assert result.timing.witness == GRAPH and result.timing.clock_ms is None


def test_an_uncapturable_kernel_is_judged_by_the_plain_burst_and_its_clock_sets_the_least_time(monkeypatch):
    plain = _plain(0.00435, 0.0, per_call_ms=0.09)
    verdict, result, plain_ran = _decide(
        monkeypatch, "RuntimeError: operation not permitted when stream is capturing", 0.00435, plain
    )
    assert plain_ran and verdict is plain and result.correct and result.stage is None
    assert result.timing.witness == UNCAPTURABLE and "capturing" in result.timing.witness_note
    assert result.timing.clock_ms == 0.09


def test_an_uncapturable_device_bound_kernel_keeps_its_time(monkeypatch):
    plain = _plain(1.0, 0.45)
    verdict, result, plain_ran = _decide(monkeypatch, "RuntimeError: capture failed", 1.0, plain)
    assert plain_ran and verdict is plain and result.correct and result.stage is None
    assert result.timing.witness == UNCAPTURABLE
    assert scored_time_ms(1.0, result.timing.clock_ms) == 1.0


def test_a_graph_burst_the_judge_has_no_memory_for_leaves_the_plain_burst_and_its_clock(monkeypatch):
    """per_token_group_quant_fp8 shape 9 on the H200 (3.1 M tokens × 2048): two input sets in the
    worker's burst and the judge's copies of them exceed 141 GB. No verdict on the candidate: the
    plain burst judges and its wall per call is the least time, as for an uncapturable forward."""
    import torch

    def short_of_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 25.16 GiB")

    plain = _plain(5.87, 5.5, per_call_ms=5.9)
    verdict, result, plain_ran = _decide(monkeypatch, None, 5.87, plain, run=short_of_memory)
    assert plain_ran and verdict is plain and result.correct and result.stage is None
    assert result.timing.witness == UNCAPTURABLE and "did not fit in GPU memory" in result.timing.witness_note
    assert scored_time_ms(5.87, result.timing.clock_ms) == 5.9


def test_a_failing_capture_request_fails_the_shape(monkeypatch):
    from atrex_mcp.evaluate.session import Failure

    verdict, result, plain_ran = _decide(
        monkeypatch, Failure(tx.RUNTIME, tx.OOM, "out of memory"), 1.0, _plain(1.0, 0.45)
    )
    assert verdict is None and not plain_ran and (result.stage, result.category) == (tx.RUNTIME, tx.OOM)


# -- S in the aggregates: a time below T_SOL counts as T_SOL ------------------------------------------


def test_a_shape_faster_than_sol_raises_no_aggregate_above_one():
    from atrex_mcp.evaluate import scoring

    assert scoring.operator_score([(True, 3.25), (True, 0.5), (True, 0.4)]) == (0.5, "")
    assert scoring.operator_score([(True, 3.25), (True, 0.32)])[0] == pytest.approx((1.0 + 0.32) / 2)
    assert scoring.operator_score([(True, 3.25)])[0] == 1.0
    s_agg, _ = scoring.aggregate({"a": scoring.operator_score([(True, 9.0)])[0], "b": 1.0}, {"a": 1.0, "b": 1.0})
    assert s_agg == 1.0


def test_the_raw_score_stays_in_the_servers_result_and_the_agent_sees_the_same_either_side_of_t_sol():
    from atrex_mcp.evaluate import scoring
    from atrex_mcp.evaluate.models import DeviceInfo, EvalResult, Isolation

    catalog = Catalog()
    beyond, within = (
        _shape_faster_than_sol(catalog),
        ShapeResult(id="0", correct=True, time_ms=0.001, score=0.4, t_sol_ms=0.0004),
    )
    assert beyond.score == 3.2  # raw, with faster_than_sol, on the server side
    views = []
    for shape in (beyond, within):
        result = EvalResult(
            op="rms_norm",
            candidate="candidate",
            candidate_sha256="0" * 64,
            dsl="triton",
            hardware="h200",
            compiled=True,
            shapes=[shape],
            device=DeviceInfo(kind="cuda", name="H200"),
            isolation=Isolation(),
            started_at="2026-01-01T00:00:00+00:00",
        )
        result.operator_score, _ = scoring.shapes_operator_score(result.shapes)
        assert result.operator_score <= 1.0
        view = Policy("benchmark", catalog).validate_view(result).model_dump()
        views.append(view)
    assert views[0] == views[1] and views[0]["operator_score"] is None


def test_the_graph_fingerprint_is_the_byte_sum_of_each_output_tensor_and_cpu_has_no_graph():
    import torch

    from sandbox.graph_burst import capture, fingerprint

    a = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    b = torch.arange(6, dtype=torch.int32).reshape(2, 3).t()  # not contiguous: its values, in logical order
    c = torch.tensor([1, 2, 3], dtype=torch.uint8)  # bytes that fill no 32-bit word
    expected = [int(a.view(torch.int32).sum()), int(b.sum()), 6]
    assert fingerprint((a, b, c)).tolist() == expected and fingerprint({"y": a}).tolist() == expected[:1]
    assert fingerprint(a).tolist() != fingerprint(a + 1).tolist()
    assert capture(lambda **kw: a, [{}], "cpu", sync=None) == "no CUDA graphs on this device"


def _outputs(calls):
    """`calls` outputs of three tensors: bf16 words, non-contiguous float32, bytes that fill no word."""
    import torch

    gen = torch.Generator().manual_seed(calls)
    return [
        {
            "y": torch.randn(5, 8, generator=gen).to(torch.bfloat16),
            "t": torch.randn(6, 4, generator=gen).t(),
            "b": torch.randint(0, 256, (7,), generator=gen, dtype=torch.uint8),
        }
        for _ in range(calls)
    ]


@pytest.mark.parametrize("chunk_bytes", [1, 100, 1 << 20])  # every tensor alone; chunks of a few; all in one
def test_the_batched_fingerprints_are_what_the_judge_recomputes_on_each_output(chunk_bytes):
    """What the graph writes after its K forwards (fingerprints_into, in stacked chunks) is, row
    by row, what the judge computes on the one output it fetches (fingerprint)."""
    from sandbox.graph_burst import empty_prints, fingerprint, fingerprints_into

    outputs = _outputs(11)
    prints = empty_prints(11, 3, "cpu")
    fingerprints_into(outputs, prints, chunk_bytes=chunk_bytes)
    assert [row.tolist() for row in prints] == [fingerprint(out).tolist() for out in outputs]
    assert len({tuple(row.tolist()) for row in prints}) == 11


def test_a_chunk_breaks_where_a_call_returns_another_shape_or_dtype():
    """A candidate whose outputs differ between calls still gets each one's own fingerprint."""
    import torch

    from sandbox.graph_burst import empty_prints, fingerprint, fingerprints_into

    base = torch.arange(24, dtype=torch.float32)
    bytes_at_1 = torch.arange(9, dtype=torch.uint8)[1:]  # a word-sized view whose words are not aligned
    outputs = [base + 1, base[1:13] * 2, (base + 3).to(torch.float16), base + 4, base[3:].reshape(3, 7), bytes_at_1]
    prints = empty_prints(6, 1, "cpu")
    fingerprints_into(outputs, prints)
    assert prints[:, 0].tolist() == [int(fingerprint(out)[0]) for out in outputs]


def test_the_calibration_fingerprints_distinct_copies_of_the_output_as_the_worker_does():
    """The judge's calibration reads `calls` outputs the size of the fetched one, distinct up to
    its byte cap (then cycled, never twice in one chunk), through the worker's own fingerprints_into."""
    import torch

    from atrex_mcp.evaluate.graph_witness import calibration_outputs
    from sandbox.graph_burst import empty_prints, fingerprint, fingerprints_into

    output = _outputs(1)[0]
    size = sum(t.numel() * t.element_size() for t in output.values())
    outputs = calibration_outputs(output, 40, copy_bytes=10 * size)
    assert len(outputs) == 40 and len({id(out[0]) for out in outputs}) == 10
    assert [id(out[0]) for out in outputs[:10]] == [id(out[0]) for out in outputs[10:20]]
    assert all(torch.equal(a, b) for out in outputs for a, b in zip(out, output.values()))
    prints = empty_prints(40, 3, "cpu")
    fingerprints_into(outputs, prints, chunk_bytes=3 * size)
    assert all(row.tolist() == fingerprint(output).tolist() for row in prints)


def test_the_refresh_calibration_is_warm_and_its_spread_is_the_upper_quartile_over_the_median(monkeypatch):
    """The first refresh (first use of the kernel) is not timed; the spread is the upper quartile
    less the median, how far a slow refresh in the worker could push the witness up, which one
    hiccup (the 4.0 below) does not widen."""
    import torch

    from atrex_mcp.evaluate import graph_witness
    from sandbox.graph_burst import StackedInputs

    walls = iter([0.0, 1.0, 0.0, 1.5, 0.0, 1.2, 0.0, 4.0, 0.0, 1.1, 0.0, 1.3, 0.0, 1.0])
    refreshes = []
    monkeypatch.setattr(StackedInputs, "refresh", lambda self, seed: refreshes.append(seed))
    monkeypatch.setattr(graph_witness.time, "perf_counter", lambda: next(walls))
    median, spread = graph_witness.refresh_s({"x": torch.ones(4), "i": torch.arange(3)}, calls=8)
    assert len(refreshes) == graph_witness.REFRESH_CALIBRATIONS + 1  # one untimed first
    assert median == pytest.approx(1.2) and spread == pytest.approx(1.5 - 1.2)


# -- graph_witness.run's protocol, with a scripted worker (the GPU run is measurements/forged_timing_gpu.py) --


def _make_inputs(seed):
    """A tiny operator's input set: a float input the refresh perturbs, an index it keeps."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(8, generator=gen), "idx": torch.randint(0, 8, (3,), generator=gen)}


def _op(x, idx):
    return x[idx] * 2.0 + x.sum()


class _GraphWorker:
    """Answers the graph burst's requests as the worker does (sandbox.graph_burst's StackedInputs,
    eager forwards standing in for the replay of a graph, then the batched fingerprints). `lie`
    makes its fingerprints wrong; `precompute` is the forger that computes the K outputs in the
    capture request and answers the replays with them (an empty graph), ignoring the refresh seed."""

    alive = True
    trusted_round_trip_s = None

    def __init__(self, captured=True, lie=False, precompute=False):
        self.captured, self.lie, self.precompute, self.calls = captured, lie, precompute, []
        self.inputs, self.outputs, self.replay_seeds = None, [], []

    def _run(self):
        from sandbox.graph_burst import empty_prints, fingerprints_into

        self.outputs = [_op(**inputs) for inputs in self.inputs.sets]
        prints = empty_prints(len(self.outputs), 1, "cpu")
        fingerprints_into(self.outputs, prints, chunk_bytes=64)  # as the graph does: after all K, in chunks
        return [[v + self.lie for v in row] for row in prints.tolist()]

    def call(self, request, timeout_s):
        from sandbox.graph_burst import StackedInputs

        payload = request.wire()
        cmd = payload.pop("cmd")
        self.calls.append(cmd)
        if cmd == "graph_capture":
            if not self.captured:
                return {"captured": False, "reason": "RuntimeError: capturing"}
            self.inputs = StackedInputs.stack(_make_inputs, payload["seeds"])
            self.digests = self._run() if self.precompute else None
            return {"captured": True}
        if cmd == "graph_replay":
            self.replay_seeds.append(payload["seed"])
            if self.precompute:
                return {"digests": self.digests}
            self.inputs.refresh(payload["seed"])
            return {"digests": self._run()}
        return {}


class _Trial:
    """The evaluation's side of the protocol: its inputs, and fetch_checked comparing the worker's
    kept output with the reference on the inputs it is given."""

    def __init__(self, worker):
        from types import SimpleNamespace

        self.request, self.mismatch, self.fetched, self.worker = SimpleNamespace(timeout_s=10.0), [], [], worker
        self.device_info = SimpleNamespace(memory_bytes=None)

    def payload_shape(self, shape):
        return {}

    def inputs(self, shape, seed):
        return _make_inputs(seed)

    def fetch_checked(self, session, shape, result, seed, index, burst, what, inputs=None, graph=False):
        import torch

        assert graph is True and burst is False and type(seed) is int and inputs is not None
        self.fetched.append(index)
        candidate = self.worker.outputs[index]
        if not torch.equal(candidate, _op(**inputs)):
            self._timed_mismatch(result, f"Output of {what} is wrong", [])
            return None
        return candidate

    def _timed_mismatch(self, result, message, details):
        self.mismatch.append(message)


@pytest.mark.interpreter
def test_the_graph_burst_replays_and_checks_the_fastest_replays_commitment(monkeypatch):
    from atrex_mcp.evaluate import graph_witness

    monkeypatch.setattr(graph_witness, "fingerprints_s", lambda output, calls: 0.0)
    worker = _GraphWorker()
    trial = _Trial(worker)
    verdict = graph_witness.run(trial, worker, None, None, median_ms=0.00435, set_bytes=800_000)
    assert isinstance(verdict, Witness) and verdict.graph and verdict.calls == graph_calls(0.00435, 800_000)
    assert worker.calls[0] == "graph_capture" and worker.calls.count("graph_replay") == 3 and "ping" in worker.calls
    assert 1 <= len(trial.fetched) <= 3 and not trial.mismatch  # one output per replay that was the fastest so far
    assert len(set(worker.replay_seeds)) == 3  # a fresh refresh seed for every replay
    replays = [i for i, cmd in enumerate(worker.calls) if cmd == "graph_replay"]
    assert all(worker.calls[i - 1] == "warm" for i in replays)  # the worker's warm-up, untimed, right before each


@pytest.mark.interpreter
def test_a_forger_that_computes_the_outputs_at_capture_fails_the_refreshed_check(monkeypatch):
    from atrex_mcp.evaluate import graph_witness

    monkeypatch.setattr(graph_witness, "fingerprints_s", lambda output, calls: 0.0)
    worker = _GraphWorker(precompute=True)
    trial = _Trial(worker)
    assert graph_witness.run(trial, worker, None, None, median_ms=1.0, set_bytes=1000) is None
    assert trial.mismatch and "wrong" in trial.mismatch[0]  # its commitment holds, its outputs miss the refresh


@pytest.mark.interpreter
def test_a_replay_whose_fingerprints_do_not_match_its_outputs_fails_the_shape(monkeypatch):
    from atrex_mcp.evaluate import graph_witness

    monkeypatch.setattr(graph_witness, "fingerprints_s", lambda output, calls: 0.0)
    worker = _GraphWorker(lie=True)
    trial = _Trial(worker)
    assert graph_witness.run(trial, worker, None, None, median_ms=1.0, set_bytes=1000) is None
    assert trial.mismatch and "fingerprint" in trial.mismatch[0]


def test_an_uncapturable_forward_comes_back_as_its_reason():
    from atrex_mcp.evaluate import graph_witness

    worker = _GraphWorker(captured=False)
    verdict = graph_witness.run(_Trial(worker), worker, None, None, median_ms=1.0, set_bytes=1000)
    assert verdict == "RuntimeError: capturing"
    assert "graph_replay" not in worker.calls


# -- the replay's input refresh (sandbox.graph_burst.StackedInputs, refreshed_set) ------------------


def _stacked(seeds, seed_of_refresh=None):
    from sandbox.graph_burst import StackedInputs

    stacked = StackedInputs.stack(_make_inputs, seeds)
    if seed_of_refresh is not None:
        stacked.refresh(seed_of_refresh)
    return stacked


@pytest.mark.interpreter
def test_the_refresh_is_one_buffer_per_float_input_and_moves_every_set_but_no_index():
    import torch

    from sandbox.graph_burst import REFRESH_HIGH, REFRESH_LOW

    seeds = [3, 4, 5, 6]
    stacked = _stacked(seeds)
    assert len(stacked.live) == 1 and stacked.live[0].numel() == 4 * 8  # x of all K sets in one buffer
    buffer = stacked.live[0].untyped_storage().data_ptr()
    assert all(s["x"].untyped_storage().data_ptr() == buffer for s in stacked.sets)
    before = [{k: v.clone() for k, v in s.items()} for s in stacked.sets]
    stacked.refresh(99)
    for k, (old, new) in enumerate(zip(before, stacked.sets)):
        assert torch.equal(old["x"], _make_inputs(seeds[k])["x"])  # the capture's sets are the seeds' sets
        assert (new["x"] != old["x"]).all(), f"set {k}: every element of a float input moves"
        ratio = new["x"] / old["x"]
        assert ((ratio >= REFRESH_LOW) & (ratio <= REFRESH_HIGH)).all()  # signs kept, magnitudes near
        assert torch.equal(new["idx"], old["idx"])  # integer inputs keep their captured values


@pytest.mark.interpreter
def test_the_refresh_is_determined_by_its_seed_and_starts_from_the_pristine_sets():
    import torch

    a, b = _stacked([3, 4], 7), _stacked([3, 4], 7)
    assert all(torch.equal(x["x"], y["x"]) for x, y in zip(a.sets, b.sets))
    c = _stacked([3, 4], 8)
    assert not torch.equal(a.sets[0]["x"], c.sets[0]["x"])
    a.refresh(8)  # a second replay: from the pristine values, not from the first refresh's
    assert all(torch.equal(x["x"], y["x"]) for x, y in zip(a.sets, c.sets))


@pytest.mark.interpreter
def test_the_judge_rebuilds_any_set_of_the_refresh_bitwise():
    import torch

    from sandbox.graph_burst import refreshed_set

    seeds = [3, 4, 5]
    stacked = _stacked(seeds, 1234)
    for k, seed in enumerate(seeds):
        judged = refreshed_set(_make_inputs(seed), k, len(seeds), 1234)
        assert torch.equal(judged["x"], stacked.sets[k]["x"]) and torch.equal(judged["idx"], stacked.sets[k]["idx"])


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_the_judge_rebuilds_every_set_bitwise_in_every_refreshable_dtype(dtype):
    """Sets of 1,500 elements, so most start mid-way through the kernel's blocks, one of them
    transposed: each set the judge rebuilds on its own is the worker's, bit for bit, and only
    its float inputs moved."""
    import torch

    from sandbox.graph_burst import StackedInputs, refreshable, refreshed_set

    device = "cuda" if torch.cuda.is_available() else "cpu"  # the refresh is a Triton kernel

    def make(seed):
        gen = torch.Generator().manual_seed(seed)
        return {
            "a": torch.randn(30, 50, generator=gen).to(device, getattr(torch, dtype)),
            "b": torch.randn(25, 60, generator=gen).to(device, getattr(torch, dtype)).t(),
            "i": torch.randint(0, 9, (4,), generator=gen).to(device),
        }

    seeds = [11, 12, 13, 14, 15, 16, 17]
    stacked = StackedInputs.stack(make, seeds)
    assert all(refreshable(stacked.sets[0][name]) for name in "ab")
    stacked.refresh(2**31 - 2)
    for k in (0, 2, 3, 6):
        judged = refreshed_set(make(seeds[k]), k, len(seeds), 2**31 - 2)
        for name, worker_value in stacked.sets[k].items():
            assert torch.equal(judged[name], worker_value), (k, name)
            assert judged[name].stride() == worker_value.stride()
        assert not torch.equal(judged["a"], make(seeds[k])["a"]) and torch.equal(judged["i"], make(seeds[k])["i"])


@pytest.mark.interpreter
def test_the_judge_rebuilds_one_set_of_a_burst_too_large_to_hold():
    """Only the chosen set's index range is refreshed: set 2^20 − 1 of a (hypothetical) burst of
    2^20 sets of 5,000 elements starts past 2^32, and no K-set buffer is made to rebuild it."""
    import torch

    from sandbox.graph_burst import REFRESH_HIGH, REFRESH_LOW, refreshed_set
    from sandbox.refresh_kernel import refresh_into

    calls, x = 1 << 20, torch.linspace(-2, 2, 5_000, device="cuda" if torch.cuda.is_available() else "cpu")
    judged = refreshed_set({"x": x}, calls - 1, calls, 9)["x"]
    expected = torch.empty_like(x)
    refresh_into(x, expected, 9, (calls - 1) * x.numel(), REFRESH_LOW, REFRESH_HIGH)
    assert torch.equal(judged, expected) and not torch.equal(judged, refreshed_set({"x": x}, 0, calls, 9)["x"])
    with pytest.raises(ValueError, match="not one of the burst's"):
        refreshed_set({"x": x}, calls, calls, 9)


@pytest.mark.interpreter
def test_the_refresh_keeps_strides_and_skips_fp8_and_integers():
    import torch

    from sandbox.graph_burst import StackedInputs, refreshable, refreshed_set

    def make(seed):
        gen = torch.Generator().manual_seed(seed)
        return {
            "w": torch.randn(4, 6, generator=gen, dtype=torch.bfloat16).t(),  # transposed: dense, not contiguous
            "q": torch.randn(5, generator=gen).to(torch.float8_e4m3fn),
            "n": 3,
        }

    stacked = StackedInputs.stack(make, [1, 2])
    assert [t.numel() for t in stacked.live] == [48]
    assert stacked.sets[1]["w"].stride() == make(2)["w"].stride() and torch.equal(stacked.sets[1]["w"], make(2)["w"])
    stacked.refresh(5)
    assert torch.equal(refreshed_set(make(2), 1, 2, 5)["w"], stacked.sets[1]["w"])
    assert torch.equal(stacked.sets[1]["q"].view(torch.uint8), make(2)["q"].view(torch.uint8))
    assert stacked.sets[1]["n"] == 3
    assert not refreshable(torch.zeros(4, 4)[:, :2]) and not refreshable(torch.zeros(3, dtype=torch.int32))


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "op, precomputable",
    [("rms_norm", False), ("l2_norm", False), ("layer_norm", False), ("moe_align_block_size", True)],
)
def test_a_refreshed_set_changes_the_reference_output_unless_the_op_reads_only_integers(op, precomputable):
    """What the precompute forger returns (the output of the set as captured) against the judge's
    reference on the refreshed set: caught beyond the tolerance, scale-invariant norms included;
    an operator of integer inputs only stays precomputable (docs/threat-model.md)."""
    import torch

    from atrex_mcp.evaluate.compare import compare_outputs
    from sandbox.graph_burst import StackedInputs, refreshed_set

    catalog = Catalog()
    shape = catalog.visible(op).smoke_shape
    make = catalog.load_make_inputs(op)
    model = catalog.load_reference(op)(**shape.init).eval()
    captured = make(seed=1, device="cpu", **shape.inputs)
    refreshed = refreshed_set(make(seed=1, device="cpu", **shape.inputs), 0, 2, 77)
    stacked = StackedInputs.stack(lambda seed: make(seed=seed, device="cpu", **shape.inputs), [1, 2])
    stacked.refresh(77)  # what the worker's replay reads: the judge's rebuild, bit for bit
    assert all(torch.equal(v, stacked.sets[0][k]) for k, v in refreshed.items() if isinstance(v, torch.Tensor))
    with torch.no_grad():
        verdict = compare_outputs(model(**refreshed), model(**captured), op)
    assert verdict.ok is precomputable
