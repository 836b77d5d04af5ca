"""The judge's next reference made while a real sandbox worker runs the current seed (CPU, eager
rms_norm candidates at the smallest shape): the overlap happens, the worker's time and its
timeout count from the send whatever the judge does meanwhile, and a failure of the judge's own
work leaves the worker answered and usable."""

from __future__ import annotations

import textwrap
import time

import pytest

from atrex_mcp.evaluate import EvalRequest, evaluator
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.workers import open_session
from atrex_mcp.problemset.catalog import Catalog
from eval_support import exploit_source, make_problem_root, run_eval
from sandbox.launcher import PendingReply
from sandbox.messages import PingRequest, RunRequest

FLAG = "ahead.flag"  # written into the scratch directory by the judge's second reference
RMS = textwrap.dedent("""
    import torch
    from torch import nn


    class Model(nn.Module):
        def __init__(self, *, eps=1e-6):
            super().__init__()
            self.eps = eps

        def forward(self, x, weight):
            xf = x.float()
            return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps) * weight.float()).to(x.dtype)
""")
WAITS_FOR_THE_JUDGE = RMS + textwrap.dedent(f"""
    import os
    import time

    _forward = Model.forward


    def _after_the_judge(self, x, weight):  # the first run returns only once the judge made the next reference
        t0 = time.monotonic()
        while not os.path.exists({FLAG!r}):
            if time.monotonic() - t0 > 8:
                raise RuntimeError("the judge made no reference while this run was in flight")
            time.sleep(0.01)
        return _forward(self, x, weight)


    Model.forward = _after_the_judge
""")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return Catalog(make_problem_root(tmp_path_factory.mktemp("problems")))


def _on_reference(monkeypatch, action):
    """`action(trial, n)` before the judge's n-th reference output (from 1) of each evaluation."""
    reference_output = evaluator.Trial.reference_output
    made: dict[int, int] = {}

    def reference(self, shape, inputs):
        made[id(self)] = made.get(id(self), 0) + 1
        action(self, made[id(self)])
        return reference_output(self, shape, inputs)

    monkeypatch.setattr(evaluator.Trial, "reference_output", reference)
    return made


def test_the_next_reference_is_made_while_the_worker_runs_the_seed_before(catalog, monkeypatch):
    """The candidate's first run waits for a file the judge writes when it makes seed #1's
    reference: only a judge that makes it while that run is in flight lets the shape pass."""
    scratches = []
    open_session_ = evaluator.Trial.open_session
    monkeypatch.setattr(
        evaluator.Trial,
        "open_session",
        lambda self, scratch, *a, **k: scratches.append(scratch) or open_session_(self, scratch, *a, **k),
    )
    _on_reference(monkeypatch, lambda trial, n: n == 2 and (scratches[-1] / FLAG).write_text("made"))
    result = run_eval(catalog, WAITS_FOR_THE_JUDGE, seeds=3)
    shape = result.shapes[0]
    assert shape.correct, shape.message
    assert shape.seconds["correctness"] > 0 and shape.seconds["reference_and_compare"] > 0


def test_a_slow_reference_made_meanwhile_is_not_charged_to_the_worker(catalog, monkeypatch):
    """Seed #1's reference takes longer than the worker's whole budget, while seed #0 runs: the
    worker answered in time, so its reply counts although the judge read it after the deadline,
    and the time charged to the worker is its own, so seed #1 still has budget left."""
    _on_reference(monkeypatch, lambda trial, n: n == 2 and time.sleep(3.5))
    result = run_eval(catalog, RMS, seeds=2, timeout_s=3.0)
    shape = result.shapes[0]
    assert shape.correct, shape.message
    assert shape.seconds["correctness"] < 3.0 and shape.seconds["reference_and_compare"] >= 3.5


def test_a_worker_that_hangs_while_the_judge_works_times_out_as_in_strict_order(catalog, monkeypatch):
    """A hanging candidate is stopped at the deadline counted from the send, in the same
    category and with the same message as without the overlap; the judge's slow reference made
    meanwhile (longer than the budget) overlaps the worker's budget instead of adding to it."""
    made = _on_reference(monkeypatch, lambda trial, n: n == 2 and time.sleep(4.0))
    t0 = time.perf_counter()
    result = run_eval(catalog, exploit_source("hang"), seeds=2, timeout_s=3.0)
    wall = time.perf_counter() - t0
    shape = result.shapes[0]
    assert list(made.values()) == [2]  # seed #1's reference was made while seed #0 hung
    assert (shape.correct, shape.stage, shape.category) == (False, tx.RUNTIME, tx.TIMEOUT)
    request = EvalRequest(op="rms_norm", source="x", timeout_s=3.0, seeds=2)
    assert shape.message == evaluator.Trial(request, catalog, None, None)._correctness_timeout(2, 0)
    assert "stopped in seed #0" in shape.message
    stage = shape.seconds["correctness"] + shape.seconds["reference_and_compare"]
    assert 4.0 <= stage < 3.0 + 4.0 - 1.0, shape.seconds  # the two overlapped
    assert wall < 30


def test_an_exception_in_the_judges_work_meanwhile_leaves_the_worker_answered_and_usable(catalog):
    with open_session(catalog, "rms_norm", RMS, shapes=["0"], seeds=2) as worker:
        session, trial = worker.session, worker.trial
        shape = trial.payload_shape(trial.problem.shape("0"))

        def broken() -> None:
            raise ValueError("the judge's own work failed")

        with pytest.raises(ValueError, match="own work failed"):
            session.call(RunRequest(shape=shape, seed=5, arena_bytes=1 << 20), 60, meanwhile=broken)
        assert session.alive and not session.forged  # its reply was read, not left for the next request
        assert session.last_call_s > 0
        assert session.call(PingRequest(), 30).get("ok")  # the next request gets its own reply
        assert worker.check("0").correct


def test_one_request_at_a_time_and_one_wait_per_request(catalog):
    with open_session(catalog, "rms_norm", RMS, shapes=["0"], seeds=1) as worker:
        process = worker.session.worker
        assert process is not None
        pending = process.send(PingRequest(), 30, watch=True)
        assert isinstance(pending, PendingReply)
        with pytest.raises(RuntimeError, match="still awaiting its reply"):
            process.send(PingRequest(), 30)
        time.sleep(0.5)
        reply = pending.wait()
        assert reply.get("ok") and pending.arrived_at is not None
        assert pending.seconds < 0.5  # the watcher noted the arrival, not the later read
        with pytest.raises(RuntimeError, match="already awaited"):
            pending.wait()
