"""The public worker API (atrex_mcp.evaluate.workers) on CPU: a session checks a shape and
runs plain forwards; a wrapper command wraps the worker's interpreter; load failures and
unchecked timing are refused plainly. The interleaved A/B timing is the optimisation loop's
(EvaluatorJudge.time_pair), which needs a GPU."""

from __future__ import annotations

import pytest
import torch

from atrex_mcp.evaluate import CandidateFailed, LaunchOptions, open_session
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.runs.evaluator_judge import EvaluatorJudge
from eval_support import EXAMPLES, make_problem_root

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")

# Imports only where the wrapper put its variable into the worker's environment.
WRAPPED = "import os\nassert os.environ.get('ATREX_WRAPPED') == '1', 'not wrapped'\n"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return Catalog([make_problem_root(tmp_path_factory.mktemp("problems"))])


def test_session_checks_and_runs_forwards_under_a_wrapper(catalog):
    source = WRAPPED + (EXAMPLES / "rms_norm_triton.py").read_text()
    with open_session(
        catalog, "rms_norm", source, shapes=["0"], seeds=1, launch=LaunchOptions(wrapper=["env", "ATREX_WRAPPED=1"])
    ) as worker:
        assert worker.check("0").correct
        reply = worker.forwards("0", calls=2)
        assert reply["calls"] == 2 and reply["replaced"] == []


@pytest.mark.slow
def test_unwrapped_load_failure_and_unchecked_timing(catalog):
    with (
        pytest.raises(CandidateFailed) as caught,
        open_session(catalog, "rms_norm", WRAPPED + "class Model: pass\n", shapes=["0"]),
    ):
        pass
    assert caught.value.failure.category == "import_error"
    with (
        open_session(catalog, "rms_norm", (EXAMPLES / "rms_norm_triton.py").read_text(), shapes=["0"]) as worker,
        pytest.raises(ValueError, match="check"),
    ):
        worker.time("0")


def test_interleaved_timing_needs_a_gpu(catalog):
    assert EvaluatorJudge(catalog).time_pair("rms_norm", "", "", ["0"], hardware="h200") is None
