"""Runs with the real evaluator on CPU (sandbox worker, Triton interpreter, smoke shape):
correctness is judged for real; nothing can be timed, so nothing is accepted — and the
verdict says so instead of inventing a speed-up."""

import pytest
import torch

from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.runs.evaluator_judge import EvaluatorJudge
from atrex_mcp.runs.iterations import RunService
from atrex_mcp.runs.store import RunStore
from tests.runs_fixtures import KERNEL, OP, plan

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="CPU behaviour; the GPU loop is measurements/opt_loop_gpu.py"
)


@pytest.mark.slow
def test_cpu_run_with_the_real_evaluator(tmp_path):
    service = RunService(RunStore(tmp_path / "state"), Catalog(), EvaluatorJudge(Catalog(), seeds=2))
    run = service.start_run(OP, ["smoke"])
    base = service.submit_baseline(run.run_id, KERNEL)
    assert base.status == "accepted" and base.checks[0].correct and base.times.time_ms == {"smoke": None}

    prof = service.store.save_profile(
        op=OP, shape="smoke", source_sha256=base.source_sha256, tool="torch.profiler", report={}
    )
    rsqrt = "1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)"
    assert rsqrt in KERNEL
    untimed = service.record_iteration(
        run.run_id, plan(prof), KERNEL.replace(rsqrt, "tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)")
    )
    assert untimed.status == "rejected" and "no GPU" in untimed.reason and untimed.checks[0].correct

    wrong = service.record_iteration(run.run_id, plan(prof), KERNEL.replace("x * inv_rms * w", "x * inv_rms"))
    assert wrong.status == "failed" and wrong.checks[0].category == "numeric_mismatch"
    assert service.run_state(run.run_id).accepted.number == 0
