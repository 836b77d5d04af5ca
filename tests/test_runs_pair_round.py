"""One short paired-timing round (`timing_round`) against a stand-in worker session: the
request it sends and the checks it makes on the reply; the side-stream rule over a kernel's
rounds (`check_side_streams`) with figures of the size seen on the H200. The GPU itself is
exercised by bench/opt_loop_gpu.py."""

import random
from types import SimpleNamespace

import pytest

from atrex_mcp.catalog import Shape
from atrex_mcp.evaluate.session import Failure
from atrex_mcp.evaluate.timing_checks import side_stream
from atrex_mcp.runs.evaluator_judge import CALLS_PER_ROUND, INPUT_SETS_PER_ROUND, ROUNDS, Round, check_side_streams, timing_round
from atrex_mcp.runs.measure import MeasurementFailed


class _Evaluation:
    request = SimpleNamespace(timeout_s=30.0)

    def __init__(self):
        self.seeds = []

    def seed(self):
        self.seeds.append(len(self.seeds) + 100)
        return self.seeds[-1]

    def payload_shape(self, shape):
        return {"id": shape.id}


class _Session:
    worker_device = {"l2_bytes": 50 << 20}

    def __init__(self, reply):
        self.reply, self.sent = reply, []

    def call(self, cmd, payload, timeout_s):
        self.sent.append((cmd, payload))
        return self.reply


def _reply(times, gaps=0.004, noop=0.004, replaced=()):
    return {"times_ms": times, "synced_ms": [t + gaps for t in times], "noop_gap_ms": [noop] * 5, "replaced": list(replaced)}


def _shape():
    return Shape(id="2", init={}, inputs={})


def test_a_round_is_the_median_of_a_fixed_number_of_calls_on_fresh_inputs():
    evaluation, session = _Evaluation(), _Session(_reply([0.10, 0.30, 0.12, 0.11, 0.50]))
    assert timing_round(evaluation, session, _shape(), "candidate", 24).median_ms == pytest.approx(0.12)
    (cmd, payload), = session.sent
    assert cmd == "time" and payload["min_calls"] == payload["max_calls"] == 24
    assert len(payload["seeds"]) == INPUT_SETS_PER_ROUND and payload["warmup_seed"] not in payload["seeds"]
    assert payload["flush_bytes"] == 2 * (50 << 20)


@pytest.mark.parametrize("reply, says", [
    (Failure("runtime", "cuda_fault", "illegal address"), "cuda_fault"),
    (_reply([0.1] * 5, replaced=["torch.cuda.Event.record"]), "replaced timing primitives"),
])
def test_a_round_refuses_what_the_full_timing_stage_would_refuse(reply, says):
    with pytest.raises(MeasurementFailed, match=says):
        timing_round(_Evaluation(), _Session(reply), _shape(), "candidate", 24)


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
