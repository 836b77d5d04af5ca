"""One short paired-timing round (`round_median_ms`) against a stand-in worker session: the
request it sends and the checks it makes on the reply. The GPU itself is exercised by
bench/opt_loop_gpu.py."""

from types import SimpleNamespace

import pytest

from atrex_mcp.catalog import Shape
from atrex_mcp.evaluate.session import Failure
from atrex_mcp.runs.evaluator_judge import INPUT_SETS_PER_ROUND, round_median_ms
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
    assert round_median_ms(evaluation, session, _shape(), "candidate", 24) == pytest.approx(0.12)
    (cmd, payload), = session.sent
    assert cmd == "time" and payload["min_calls"] == payload["max_calls"] == 24
    assert len(payload["seeds"]) == INPUT_SETS_PER_ROUND and payload["warmup_seed"] not in payload["seeds"]
    assert payload["flush_bytes"] == 2 * (50 << 20)


@pytest.mark.parametrize("reply, says", [
    (Failure("runtime", "cuda_fault", "illegal address"), "cuda_fault"),
    (_reply([0.1] * 5, replaced=["torch.cuda.Event.record"]), "replaced timing primitives"),
    (_reply([0.1] * 5, gaps=0.2), "another stream"),
])
def test_a_round_refuses_what_the_full_timing_stage_would_refuse(reply, says):
    with pytest.raises(MeasurementFailed, match=says):
        round_median_ms(_Evaluation(), _Session(reply), _shape(), "candidate", 24)
