"""The trusted side's memory while judging outputs: one seed's tensors at a time, and running out
of GPU memory there is the harness's failure on that shape only (harness_oom), not the batch's."""

from __future__ import annotations

import weakref

import pytest
import torch

from atrex_mcp.evaluate import evaluator
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.problemset.catalog import Catalog
from eval_support import EXAMPLES, make_problem_root, run_eval

SOURCE = (EXAMPLES / "rms_norm_triton.py").read_text()


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return Catalog(make_problem_root(tmp_path_factory.mktemp("problems")))


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [False, True], ids=["strict", "overlapped"])
def test_each_seed_is_judged_after_the_previous_seeds_tensors_are_freed(catalog, monkeypatch, overlap):
    """In strict order only the judged seed's reference output is alive when it is compared; where
    the next seed's reference is made while the worker runs (a small seed), that one too."""
    if not overlap:
        monkeypatch.setattr(evaluator, "OVERLAP_MAX_BYTES", -1)
    held = 2 if overlap else 1
    inputs_seen: list[weakref.ref] = []
    references_seen: list[weakref.ref] = []
    alive_at_compare: list[int] = []
    make_inputs, reference_output, compare = (
        evaluator.Trial.inputs,
        evaluator.Trial.reference_output,
        evaluator.compare_outputs,
    )

    def inputs(self, shape, seed):
        value = make_inputs(self, shape, seed)
        inputs_seen.append(weakref.ref(value["x"]))
        return value

    def reference(self, shape, inputs):
        value = reference_output(self, shape, inputs)
        references_seen.append(weakref.ref(value))
        return value

    def judged(reference, candidate, op, **kwargs):
        assert all(r() is None for r in inputs_seen), "inputs still alive during the comparison"
        alive = [r() is not None for r in references_seen]
        assert not any(alive[:-held]), "an earlier seed's reference output is still alive"
        alive_at_compare.append(sum(alive))
        return compare(reference, candidate, op, **kwargs)

    monkeypatch.setattr(evaluator.Trial, "inputs", inputs)
    monkeypatch.setattr(evaluator.Trial, "reference_output", reference)
    monkeypatch.setattr(evaluator, "compare_outputs", judged)
    result = run_eval(catalog, SOURCE, seeds=3)
    assert result.shapes[0].correct, result.shapes[0].message
    assert len(references_seen) == 3 and max(alive_at_compare) == held


@pytest.mark.slow
def test_out_of_memory_comparing_one_shape_fails_that_shape_only(catalog, monkeypatch):
    compare = evaluator.compare_outputs

    def short_of_memory(reference, candidate, op, **kwargs):
        if reference.shape == (4, 64):  # shape "0"
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.09 GiB")
        return compare(reference, candidate, op, **kwargs)

    monkeypatch.setattr(evaluator, "compare_outputs", short_of_memory)
    result = run_eval(catalog, SOURCE, shapes=["0", "1"], seeds=2)
    failed, passed = result.shapes
    assert (failed.correct, failed.stage, failed.category) == (False, tx.CORRECTNESS, tx.HARNESS_OOM)
    assert "seed #0" in failed.message and "ran out of GPU memory comparing outputs of 512 bytes" in failed.message
    assert passed.correct, passed.message
