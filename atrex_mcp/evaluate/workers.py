"""A candidate loaded in its own sandboxed worker, for judges other than `evaluate()`:
profilers that wrap the worker, and tests that drive its stages one at a time.

    with open_session(catalog, op, source, shapes=["0"]) as worker:
        worker.check("0")                       # correctness (fresh seeds): ShapeResult
        worker.time("0")                        # the evaluator's timing stage: ShapeResult
        worker.forwards("0", calls=3, nvtx=NVTX_FORWARD)   # N plain forwards for a profiler

Paired (interleaved A/B) timing of two kernels is the optimisation loop's
(atrex_mcp.runs.evaluator_judge.EvaluatorJudge.time_pair). Every call is the evaluator's own
stage (same seeds policy, L2 flush, integrity checks), so a time here is what `evaluate` would
report.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate.evaluator import LaunchOptions, Trial, forged_reply
from atrex_mcp.evaluate.models import EvalRequest, ShapeResult
from atrex_mcp.evaluate.session import Failure, Session
from atrex_mcp.problemset.catalog import Catalog
from sandbox.launcher import Cancelled
from sandbox.messages import ForwardsRequest

NVTX_FORWARD = (
    "atrex_forward"  # the NVTX range each `forwards` call runs in (ncu: --nvtx --nvtx-include atrex_forward/)
)


class CandidateFailed(Exception):
    """The candidate did not load, or failed a shape; `failure` says how (taxonomy category)."""

    def __init__(self, what: str, failure: Failure | ShapeResult):
        super().__init__(f"{what}: {failure.category}: {failure.message[:500]}")
        self.what, self.failure = what, failure


class CandidateWorker:
    """One candidate loaded in its own sandbox worker (started by `open_session`)."""

    def __init__(self, trial: Trial, session: Session):
        self.trial, self.session = trial, session
        self._set_bytes: dict[str, int] = {}  # per shape: one input set and its output (sizes the timing sets)

    def _shape(self, shape_id: str):
        return self.trial.problem.shape(shape_id)

    def check(self, shape_id: str) -> ShapeResult:
        """The correctness stage on fresh seeds (also compiles the kernels before any timing)."""
        result = ShapeResult(id=shape_id, correct=False)
        failure = self.session.ensure()
        if failure is not None:
            raise CandidateFailed("the worker could not be restarted", failure)
        size = self.trial.correctness(self.session, self._shape(shape_id), result)
        if size is not None:
            self._set_bytes[shape_id] = size
        if self.session.forged:
            forged_reply(result)
        return result

    def time(self, shape_id: str) -> ShapeResult:
        """The timing stage, after a passed `check` of the same shape: on a GPU with CUDA events;
        on CPU with host-clock events (its times describe the Triton interpreter, not a kernel,
        and serve to exercise the stage and its integrity checks)."""
        if shape_id not in self._set_bytes:
            raise ValueError(f"shape {shape_id} has no passed check in this session; call check() first")
        failure = self.session.ensure()
        if failure is not None:
            raise CandidateFailed("the worker could not be restarted", failure)
        result = ShapeResult(id=shape_id, correct=True)
        self.trial.timing(self.session, self._shape(shape_id), result, self._set_bytes[shape_id])
        if self.session.forged:
            forged_reply(result)
        return result

    def forwards(self, shape_id: str, calls: int, nvtx: str | None = NVTX_FORWARD) -> dict:
        """`calls` forwards on one fresh input set, each inside an NVTX range named `nvtx`
        (none when None); unchecked — run `check` first. Returns the worker's reply."""
        request = ForwardsRequest(
            shape=self.trial.payload_shape(self._shape(shape_id)), seed=self.trial.seed(), calls=calls, nvtx=nvtx
        )
        reply = self.session.call(request, self.trial.request.timeout_s)
        if isinstance(reply, Failure):
            raise CandidateFailed(f"forwards on shape {shape_id}", reply)
        return reply


@contextmanager
def open_session(
    catalog: Catalog,
    op: str,
    source: str,
    *,
    shapes: list[str],
    hardware: str = "h200",
    dsl: str = "triton",
    seeds: int = 3,
    timeout_s: float = 120.0,
    launch: LaunchOptions | None = None,
    scratch: Path | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[CandidateWorker]:
    """A started worker with `source` loaded, stopped on exit. Raises CandidateFailed when the
    candidate does not load; AtrexError('runtime', 'cancelled') when `cancel` is set."""
    request = EvalRequest(
        op=op,
        source=source,
        shapes=shapes,
        seeds=seeds,
        hardware=hardware,
        dsl=dsl,
        measure_dsl=False,
        timeout_s=timeout_s,
    )
    trial = Trial(request, catalog, None, cancel, launch=launch)
    with ExitStack() as stack:
        where = scratch or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="atrex-worker-")))
        session = trial.open_session(where)
        stack.callback(session.stop)
        try:
            failure = trial.load(session)
            if failure is not None:
                raise CandidateFailed("the candidate did not load", failure)
            yield CandidateWorker(trial, session)
        except Cancelled:
            raise AtrexError("runtime", "cancelled", "Cancelled; the worker was killed.") from None
