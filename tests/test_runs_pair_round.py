"""One short paired-timing round (`timing_round`) against a stand-in worker session: the
request it sends and the checks it makes on the reply; the side-stream rule over a kernel's
rounds (`check_side_streams`) with figures of the size seen on the H200. The GPU itself is
exercised by measurements/opt_loop_gpu.py."""

import random
import time
from types import SimpleNamespace
from typing import ClassVar

import pytest

from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.session import Failure
from atrex_mcp.evaluate.timing_checks import side_stream
from atrex_mcp.problemset.catalog import Shape
from atrex_mcp.runs.evaluator_judge import (
    CALLS_PER_ROUND,
    ROUNDS,
    EvaluatorJudge,
    Round,
    check_side_streams,
    timing_round,
)
from atrex_mcp.runs.measure import MeasurementFailed


class _Trial:
    request = SimpleNamespace(timeout_s=30.0)
    device_info = SimpleNamespace(memory_bytes=141 * 10**9)

    def __init__(self):
        self.seeds = []

    def seed(self):
        self.seeds.append(len(self.seeds) + 100)
        return self.seeds[-1]

    def payload_shape(self, shape):
        return {"id": shape.id}


class _Session:
    """Answers after as long as the reply's calls claim to have taken (the judge times the request)."""

    worker_device: ClassVar[dict[str, int]] = {"l2_bytes": 50 << 20}

    def __init__(self, reply, forged=False, claimed_s=None):
        self.reply, self.sent, self.forged, self.claimed_s = reply, [], forged, claimed_s

    def call(self, request, timeout_s):
        cmd, payload = request.command, request.wire()
        self.sent.append((cmd, payload))
        claimed = sum(self.reply["times_ms"]) / 1e3 if isinstance(self.reply, dict) else 0.0
        time.sleep(claimed if self.claimed_s is None else self.claimed_s)
        return self.reply


def _reply(times, gaps=0.004, noop=0.004, replaced=()):
    return {
        "times_ms": times,
        "synced_ms": [t + gaps for t in times],
        "noop_gap_ms": [noop] * 5,
        "replaced": list(replaced),
    }


def _shape():
    return Shape(id="2", init={}, inputs={})


def test_a_round_is_the_median_of_a_fixed_number_of_calls_each_on_its_own_fresh_inputs():
    evaluation, session = _Trial(), _Session(_reply([0.10, 0.30, 0.12, 0.11, 0.50]))
    assert timing_round(evaluation, session, _shape(), "candidate", 24, 1 << 20).median_ms == pytest.approx(0.12)
    ((cmd, payload),) = session.sent
    assert cmd == "time" and payload["min_calls"] == payload["max_calls"] == 24
    assert len(payload["seeds"]) == 24 and payload["warmup_seed"] not in payload["seeds"]  # no set is timed twice
    assert payload["flush_bytes"] == 2 * (50 << 20)


def test_a_round_of_a_large_shape_makes_one_call_per_set_the_gpu_holds():
    session = _Session(_reply([5.0, 5.1]))
    timing_round(
        _Trial(), session, _shape(), "candidate", 24, 20 * 10**9
    )  # 20 GB sets: the 2 the evaluator keeps at least
    ((_, payload),) = session.sent
    assert payload["min_calls"] == payload["max_calls"] == len(payload["seeds"]) == 2


@pytest.mark.parametrize(
    "reply, says",
    [
        (Failure("runtime", "cuda_fault", "illegal address"), "cuda_fault"),
        (_reply([0.1] * 5, replaced=["torch.cuda.Event.record"]), "replaced timing primitives"),
    ],
)
def test_a_round_refuses_what_the_full_timing_stage_would_refuse(reply, says):
    with pytest.raises(MeasurementFailed, match=says):
        timing_round(_Trial(), _Session(reply), _shape(), "candidate", 24, 1 << 20)


def test_a_round_from_a_worker_that_forged_a_reply_frame_is_refused():
    with pytest.raises(MeasurementFailed, match=tx.REPLY_FORGED):
        timing_round(_Trial(), _Session(_reply([0.1] * 5), forged=True), _shape(), "candidate", 24, 1 << 20)


def test_a_round_whose_calls_outlast_the_judges_wall_is_refused():
    session = _Session(_reply([40.0] * 5), claimed_s=0.0)  # 200 ms of calls answered at once
    with pytest.raises(MeasurementFailed, match="outlast the judge's wall"):
        timing_round(_Trial(), session, _shape(), "candidate", 24, 1 << 20)


def _rounds(rng: random.Random, hidden_ms: float = 0.0, shifted: int | None = None) -> list[Round]:
    """ROUNDS rounds of a ~15 µs kernel: host wake-up gaps of 6–14 µs after the synchronisation
    (no-op calibration alike), the calls' gaps plus `hidden_ms` of side-stream work, and round
    `shifted` with every call's gap 25 µs longer than its calibration (as on the H200)."""
    rounds = []
    for k in range(ROUNDS):
        times = [0.015 + 0.002 * rng.random() for _ in range(CALLS_PER_ROUND)]
        extra = hidden_ms + (0.025 if k == shifted else 0.0)
        synced = [t + 0.006 + 0.008 * rng.random() + extra for t in times]
        noop = [0.006 + 0.008 * rng.random() for _ in range(50)]
        rounds.append(Round(sorted(times)[len(times) // 2], times, synced, noop))
    return rounds


def test_one_slow_round_of_an_honest_short_kernel_does_not_fail_the_pair():
    rng = random.Random(8)
    rounds = _rounds(rng, shifted=3)
    alone = side_stream(rounds[3].times_ms, rounds[3].synced_ms, rounds[3].noop_gap_ms)
    assert alone.detected and 0.020 < alone.excess_ms < 0.030  # what a per-round decision did on the H200
    check_side_streams("candidate", "2", rounds)
    for seed in range(20):
        check_side_streams("candidate", "2", _rounds(random.Random(seed)))


def test_work_left_on_another_stream_fails_the_pair():
    with pytest.raises(MeasurementFailed, match="another stream on shape 2"):
        check_side_streams("candidate", "2", _rounds(random.Random(1), hidden_ms=0.05))


class _GateEvaluation:
    """Passes correctness; its timing stage says what the evaluator says of an output cache."""

    def correctness(self, session, shape, result):
        return 1 << 20

    def timing(self, session, shape, result, set_bytes):
        result.time_ms = 1.0
        result.integrity.append(tx.INPUT_REUSE_SPEEDUP)
        result.timing_note = "timed on the 10 calls on fresh input sets: calls on reused sets ran 0.01 ms against 1 ms"


def test_a_candidate_the_gate_found_faster_on_reused_inputs_gets_no_rounds():
    sessions = [_Session(_reply([0.1] * 5)), _Session(_reply([0.1] * 5))]
    with pytest.raises(MeasurementFailed, match="faster on inputs it has seen"):
        EvaluatorJudge(catalog=None).pair_rounds(
            [_GateEvaluation(), _GateEvaluation()], sessions, _shape(), lambda r: None
        )
    assert all(not s.sent for s in sessions)  # not one round was timed
