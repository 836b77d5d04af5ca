"""The correctness stage seed by seed, against a stand-in worker session that hands its outputs
over through a real output arena: the judge makes each seed's reference first, sizes the arena
for it, and judges that seed before asking for the next, so the first wrong seed ends the stage;
the worker's calls share one time limit."""

from __future__ import annotations

import pytest
import torch

from atrex_mcp.evaluate import evaluator
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.evaluator import Trial
from atrex_mcp.evaluate.models import EvalRequest, ShapeResult
from atrex_mcp.evaluate.session import Failure
from atrex_mcp.evaluate.transfer import OutputArena
from atrex_mcp.problemset.catalog import Catalog
from sandbox.handoff import ArenaWriter
from sandbox.timing import input_checksums

_WORKER_OUTPUT = Trial.reference_output


class _Session:
    """Answers `run` as a worker would: the output `answer(reference)` gives, copied into the arena."""

    def __init__(self, evaluation, answer):
        self.evaluation, self.answer, self.runs = evaluation, answer, []
        self.arena = OutputArena(cuda=False)
        self.last_call_s = 0.0
        self.overlapped: list[bool] = []  # per run: whether the judge made a reference meanwhile

    def call(self, request, timeout_s, timeout_category=None, meanwhile=None):
        cmd, payload = request.command, request.wire()
        assert cmd == "run"
        self.runs.append((payload["seed"], timeout_s))
        self.last_call_s = 0.01
        self.overlapped.append(meanwhile is not None)
        if meanwhile is not None:  # the judge's own work while this "worker" runs
            meanwhile()
        shape = self.evaluation.shapes[0]
        inputs = self.evaluation.inputs(shape, payload["seed"])
        out = self.answer(_WORKER_OUTPUT(self.evaluation, shape, inputs))  # not the judge's (tests count those)
        if isinstance(out, Failure):
            return out
        manifest = ArenaWriter(self.arena.fd, cuda=False).write(out, payload["arena_bytes"])
        return {
            "output": manifest,
            "checksums": input_checksums(inputs),
            "call_s": 0.01 * len(self.runs),
            "input_bytes": 1000,
        }


def _correctness(answer, seeds=5, sessions=None):
    evaluation = Trial(
        EvalRequest(op="rms_norm", source="# stand-in", shapes=["0"], seeds=seeds), Catalog(), None, None
    )
    session, result = _Session(evaluation, answer), ShapeResult(id="0", correct=False)
    if sessions is not None:
        sessions.append(session)
    try:
        set_bytes = evaluation.correctness(session, evaluation.shapes[0], result)
    finally:
        session.arena.close()
    return result, set_bytes, session.runs


@pytest.mark.slow
def test_every_seed_is_judged_when_the_outputs_are_right():
    result, set_bytes, runs = _correctness(lambda reference: reference.clone())
    assert result.correct and len(runs) == 5 and [seed for seed, _ in runs] == result.seeds
    assert set_bytes > 1000 and result.seconds["first_call_extra"] == 0.0  # call_s rises: no JIT outlier
    assert {"correctness", "reference_and_compare"} <= result.seconds.keys()


def test_the_first_wrong_seed_ends_the_stage():
    result, set_bytes, runs = _correctness(lambda reference: torch.zeros_like(reference))
    assert set_bytes is None and len(runs) == 1
    assert (result.stage, result.category) == (tx.CORRECTNESS, tx.NUMERIC_MISMATCH) and result.message.startswith(
        "seed #0"
    )


def test_an_output_that_cannot_fit_is_judged_by_its_manifest():
    result, _, runs = _correctness(
        lambda reference: reference.float()
    )  # float32 where bf16 is expected: twice the bytes
    assert len(runs) == 1 and (result.stage, result.category) == (tx.RUNTIME, tx.WRONG_DTYPE), result.message


@pytest.mark.slow
def test_the_worker_calls_share_one_time_limit():
    outcomes = iter([None, None, Failure(tx.RUNTIME, tx.TIMEOUT, "No answer")])
    result, _, runs = _correctness(lambda reference: next(outcomes) or reference.clone())
    limit = EvalRequest(op="rms_norm", source="x").timeout_s
    assert [t for _, t in runs][0] == limit and all(t < limit for _, t in runs[1:])  # each call gets what is left
    assert (result.stage, result.category) == (tx.RUNTIME, tx.TIMEOUT)
    assert "stopped in seed #2" in result.message and f"{limit:.0f} s" in result.message


@pytest.mark.slow
def test_a_reference_output_in_a_fragmented_cache_is_moved_and_still_judged(monkeypatch):
    """Where the released cache still pins memory, the held reference output goes through host
    memory into fresh memory before the worker runs; the verdicts are the same."""
    moves = []
    copy = evaluator._copy_structure
    monkeypatch.setattr(evaluator, "_cache_pins_memory", lambda: True)
    monkeypatch.setattr(
        evaluator, "_copy_structure", lambda value, device=None: moves.append(device) or copy(value, device)
    )
    result, _, runs = _correctness(lambda reference: reference.clone())
    assert result.correct and len(runs) == 5 and moves == ["cpu", "cpu"] * 5  # out to the host and back, per seed
    result, _, runs = _correctness(lambda reference: torch.zeros_like(reference))
    assert len(runs) == 1 and result.category == tx.NUMERIC_MISMATCH


def test_the_cache_pins_memory_only_beyond_the_slack(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 1 << 30)
    for reserved, pinned in (
        ((1 << 30) + evaluator.PINNED_SLACK_BYTES, False),
        ((2 << 30) + evaluator.PINNED_SLACK_BYTES, True),
    ):
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda reserved=reserved: reserved)
        assert evaluator._cache_pins_memory() is pinned


# -- the next seed's reference made while the worker runs (Trial.correctness, Trial._overlaps) ----------------


@pytest.fixture()
def fixed_seeds(monkeypatch):
    """The same seeds in every stage of a test, so a strict and an overlapped stage judge the same data."""

    def reset():
        numbers = iter(range(1000, 2000))
        monkeypatch.setattr(evaluator, "_seed", lambda: next(numbers))

    reset()
    return reset


def _strict(monkeypatch):
    monkeypatch.setattr(evaluator, "OVERLAP_MAX_BYTES", -1)  # no seed is that small: the strict order


def _counting_references(monkeypatch, fail=None):
    """Counts the judge's reference outputs; `fail(n)` may raise on the n-th (from 1)."""
    made = []
    reference_output = Trial.reference_output

    def counted(self, shape, inputs):
        made.append(1)
        if fail is not None:
            fail(len(made))
        return reference_output(self, shape, inputs)

    monkeypatch.setattr(Trial, "reference_output", counted)
    return made


def _wrong_from_the_second_run():
    runs = []
    return lambda reference: runs.append(1) or (reference.clone() if len(runs) == 1 else torch.zeros_like(reference))


def test_each_next_reference_is_made_while_the_worker_runs_and_the_verdict_is_the_same(monkeypatch, fixed_seeds):
    sessions: list = []
    made = _counting_references(monkeypatch)
    result, set_bytes, runs = _correctness(lambda reference: reference.clone(), sessions=sessions)
    assert result.correct and len(runs) == 5 and len(made) == 5
    assert sessions[0].overlapped == [True, True, True, True, False]  # the last seed has no next one
    fixed_seeds()
    _strict(monkeypatch)
    strict, strict_bytes, _ = _correctness(lambda reference: reference.clone(), sessions=sessions)
    assert sessions[1].overlapped == [False] * 5
    assert (strict.correct, strict.seeds, strict_bytes) == (True, result.seeds, set_bytes)


def test_a_wrong_seed_ends_the_stage_with_the_same_failure_and_the_reference_made_ahead_is_dropped(
    monkeypatch, fixed_seeds
):
    made = _counting_references(monkeypatch)
    overlapped, _, runs = _correctness(_wrong_from_the_second_run())
    assert len(runs) == 2 and len(made) == 3  # seed #2's reference was made while seed #1 ran, then not needed
    fixed_seeds()
    _strict(monkeypatch)
    made.clear()
    strict, _, strict_runs = _correctness(_wrong_from_the_second_run())
    assert len(strict_runs) == 2 and len(made) == 2
    assert overlapped.message.startswith("seed #1: ")
    fields = ("correct", "stage", "category", "message", "mismatch", "seeds", "integrity")
    assert [getattr(overlapped, f) for f in fields] == [getattr(strict, f) for f in fields]


def test_a_reference_that_fails_while_the_worker_runs_is_made_again_in_order(monkeypatch, fixed_seeds):
    """Out of memory making seed #1's reference ahead: made again at its turn, and no more made
    ahead in this stage; the verdict is the one the strict order gives."""

    def once(n):
        if n == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    sessions: list = []
    made = _counting_references(monkeypatch, once)
    result, _, runs = _correctness(lambda reference: reference.clone(), sessions=sessions)
    assert result.correct and len(runs) == 5 and len(made) == 6
    assert sessions[0].overlapped == [True, False, False, False, False]


def test_a_reference_that_raises_raises_after_the_same_seeds_as_in_strict_order(monkeypatch, fixed_seeds):
    """An exception of the reference itself (not memory) on seed #1 propagates as in the strict
    order: after seed #0 is judged, from seed #1's own turn; the worker ran seed #0 only."""

    def broken(n):
        if n >= 2:
            raise ValueError("the reference cannot take these inputs")

    made = _counting_references(monkeypatch, broken)
    for strict in (False, True):
        if strict:
            fixed_seeds()
            _strict(monkeypatch)
            made.clear()
        sessions: list = []
        with pytest.raises(ValueError, match="cannot take these inputs"):
            _correctness(lambda reference: reference.clone(), sessions=sessions)
        assert len(sessions[0].runs) == 1


def test_a_seed_too_large_for_the_device_keeps_the_strict_order(monkeypatch):
    """The share of the device's memory bounds what is made ahead, beside OVERLAP_MAX_BYTES."""
    sessions: list = []
    evaluation = Trial(EvalRequest(op="rms_norm", source="# stand-in", shapes=["0"], seeds=2), Catalog(), None, None)
    shape = evaluation.shapes[0]
    made = evaluation.seed_reference(shape, 7)
    tokens, hidden = shape.inputs["token_count"], shape.inputs["hidden_size"]
    assert made.footprint_bytes == (2 * tokens * hidden + hidden) * 2  # x, the output and weight, in bf16
    assert evaluation._overlaps(made.footprint_bytes)
    evaluation.device_info.memory_bytes = int(made.footprint_bytes / evaluator.OVERLAP_MEMORY_SHARE) - 1
    assert not evaluation._overlaps(made.footprint_bytes)
    monkeypatch.setattr(evaluator, "OVERLAP_MAX_BYTES", made.footprint_bytes - 1)
    _correctness(lambda reference: reference.clone(), sessions=sessions)
    assert sessions[0].overlapped == [False] * 5
