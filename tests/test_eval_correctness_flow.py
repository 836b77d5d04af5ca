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


class _Session:
    """Answers `run` as a worker would: the output `answer(reference)` gives, copied into the arena."""

    def __init__(self, evaluation, answer):
        self.evaluation, self.answer, self.runs = evaluation, answer, []
        self.arena = OutputArena(cuda=False)

    def call(self, request, timeout_s, timeout_category=None):
        cmd, payload = request.command, request.wire()
        assert cmd == "run"
        self.runs.append((payload["seed"], timeout_s))
        shape = self.evaluation.shapes[0]
        inputs = self.evaluation.inputs(shape, payload["seed"])
        out = self.answer(self.evaluation.reference_output(shape, inputs))
        if isinstance(out, Failure):
            return out
        manifest = ArenaWriter(self.arena.fd, cuda=False).write(out, payload["arena_bytes"])
        return {
            "output": manifest,
            "checksums": input_checksums(inputs),
            "call_s": 0.01 * len(self.runs),
            "input_bytes": 1000,
        }


def _correctness(answer, seeds=5):
    evaluation = Trial(
        EvalRequest(op="rms_norm", source="# stand-in", shapes=["0"], seeds=seeds), Catalog(), None, None
    )
    session, result = _Session(evaluation, answer), ShapeResult(id="0", correct=False)
    set_bytes = evaluation.correctness(session, evaluation.shapes[0], result)
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
