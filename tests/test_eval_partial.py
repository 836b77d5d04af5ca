"""An evaluation stopped early (its deadline passed, or the caller cancelled) keeps every shape
it finished and names each shape it did not judge, with the stage it was caught in; a
complete evaluation carries no partial mark. CPU: the Triton interpreter in the sandbox."""

from __future__ import annotations

import json
import threading
import time

import pytest

from atrex_mcp.agentbench.evaluation import _verdict
from atrex_mcp.cli import main as cli_main
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import EvalRequest, evaluate
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.session import classify
from atrex_mcp.evaluate.stop import EvaluationCancelled
from atrex_mcp.problemset.catalog import Catalog
from eval_support import make_problem_root
from server_fixtures import live_children
from test_eval_gate import HEADER, REFERENCE_MATH

SHAPES = ["0", "1", "smoke"]  # shape 1 is the only one with hidden_size 128
# Right on every shape, but shape 1's forward sleeps far past any deadline a test sets.
STALLS_ON_SHAPE_1 = (
    "import time\n"
    + HEADER
    + REFERENCE_MATH.replace(
        "    def forward(self, x, weight):\n",
        "    def forward(self, x, weight):\n        if x.shape[-1] == 128:\n            time.sleep(600)\n",
    )
)
LOAD_STALLS = "import time\ntime.sleep(600)\n" + HEADER + REFERENCE_MATH
DEADLINE_S = 8.0  # loading and shape 0 take ~2 s on an idle CPU machine


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return Catalog(make_problem_root(tmp_path_factory.mktemp("problems")))


def _assert_finished_then_not_run(result, category: str) -> None:
    first, stopped, untouched = result.shapes
    assert [s.id for s in result.shapes] == SHAPES
    assert first.correct and first.judged and first.category is None and len(first.seeds) == 1
    assert first.seconds["correctness"] > 0
    for shape in (stopped, untouched):
        assert (shape.stage, shape.category, shape.correct, shape.score) == (tx.NOT_RUN, category, False, None)
        assert not shape.judged
    assert "during the correctness stage" in stopped.message and "worker was killed" in stopped.message
    assert "before this shape started" in untouched.message
    assert result.compiled and result.operator_score_note.startswith(
        "partial: over the 1 judged shapes only, 2 not run"
    )


@pytest.mark.slow
def test_a_deadline_mid_evaluation_keeps_the_finished_shape_and_names_the_rest(catalog):
    before = live_children()
    t0 = time.monotonic()
    result = evaluate(
        EvalRequest(op="rms_norm", source=STALLS_ON_SHAPE_1, shapes=SHAPES, seeds=1, deadline_s=DEADLINE_S), catalog
    )
    assert DEADLINE_S <= time.monotonic() - t0 < DEADLINE_S + 15
    assert result.partial == "deadline"
    _assert_finished_then_not_run(result, tx.NOT_RUN_DEADLINE)
    assert f"deadline ({DEADLINE_S:g} s) passed" in result.shapes[1].message
    assert live_children() <= before  # the stalled worker is gone


@pytest.mark.slow
def test_a_cancel_after_the_first_shape_raises_with_the_partial_result_attached(catalog):
    cancel = threading.Event()

    def progress(message: str, fraction: float) -> None:
        if message == "shape 1":
            cancel.set()

    with pytest.raises(EvaluationCancelled) as info:
        evaluate(
            EvalRequest(op="rms_norm", source=STALLS_ON_SHAPE_1, shapes=SHAPES, seeds=1, timeout_s=60),
            catalog,
            progress=progress,
            cancel=cancel,
        )
    assert isinstance(info.value, AtrexError) and info.value.info.category == "cancelled"
    assert "after 1 of 3 shapes" in info.value.info.message
    result = info.value.result
    assert result.partial == "cancelled"
    _assert_finished_then_not_run(result, tx.NOT_RUN_CANCELLED)


def test_a_deadline_during_the_candidate_load_judges_nothing_and_claims_no_score(catalog, tmp_path):
    result = evaluate(
        EvalRequest(op="rms_norm", source=LOAD_STALLS, shapes=["0", "1"], seeds=1, deadline_s=2.0), catalog
    )
    assert result.partial == "deadline" and not result.compiled and result.compile_error is None
    assert {s.category for s in result.shapes} == {tx.NOT_RUN_DEADLINE}
    assert all(
        "during the candidate's load" in s.message and "no shape had started" in s.message for s in result.shapes
    )
    assert result.operator_score is None and "no shape was judged" in result.operator_score_note
    # bench eval's progress line names the stop, not a compile failure the candidate never had
    path = tmp_path / "rms_norm.json"
    path.write_text(result.model_dump_json())
    assert _verdict(path) == "stopped (deadline): 0/0 shapes correct, 2 not run"


@pytest.mark.slow
def test_a_complete_evaluation_under_a_deadline_is_not_partial(catalog):
    result = evaluate(
        EvalRequest(op="rms_norm", source=HEADER + REFERENCE_MATH, shapes=["0", "smoke"], seeds=1, deadline_s=300),
        catalog,
    )
    assert result.partial is None and all(s.correct and s.judged for s in result.shapes)
    assert not result.operator_score_note.startswith("partial")


def test_not_run_is_a_stage_of_its_own_that_a_worker_cannot_claim():
    assert tx.stage_of(tx.NOT_RUN_DEADLINE) == tx.stage_of(tx.NOT_RUN_CANCELLED) == tx.NOT_RUN
    assert tx.NOT_RUN not in tx.STAGES
    assert classify({"stage": tx.NOT_RUN, "category": tx.NOT_RUN_DEADLINE, "type": "builtins.RuntimeError"}) == (
        tx.RUNTIME,
        tx.EXCEPTION,
    )


def test_a_worker_cannot_claim_a_verdict_of_the_trusted_side():
    """harness_oom would blame the harness, numeric_mismatch and timing_tampered are the trusted
    side's findings: from a worker they are read as the exception they are."""
    for stage, category in (
        (tx.CORRECTNESS, tx.HARNESS_OOM),
        (tx.CORRECTNESS, tx.NUMERIC_MISMATCH),
        (tx.PERFORMANCE, tx.TIMING_TAMPERED),
    ):
        assert classify({"stage": stage, "category": category, "type": "builtins.RuntimeError"}) == (
            tx.RUNTIME,
            tx.EXCEPTION,
        )
    assert classify({"stage": tx.COMPILE, "category": tx.SYNTAX_ERROR}) == (tx.COMPILE, tx.SYNTAX_ERROR)


def test_cli_deadline_flag_gives_a_partial_result(catalog, tmp_path, capsys):
    candidate = tmp_path / "slow_load.py"
    candidate.write_text(LOAD_STALLS)
    code = cli_main(
        [
            "eval",
            str(candidate),
            "--op",
            "rms_norm",
            "--shapes",
            "0",
            "--seeds",
            "1",
            "--deadline-s",
            "2",
            "--problems",
            str(catalog.roots[0]),
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["partial"] == "deadline" and data["shapes"][0]["category"] == tx.NOT_RUN_DEADLINE
