"""Public access to the evaluator's sandboxed candidate workers, for judges other than
`evaluate()`: paired (interleaved) timing of two kernels, and profilers that wrap a worker.

    with open_session(catalog, op, source, shapes=["0"]) as worker:
        worker.check("0")                       # correctness (fresh seeds): ShapeResult
        worker.time("0")                        # the evaluator's timing stage: ShapeResult
        worker.forwards("0", calls=3, nvtx=NVTX_FORWARD)   # N plain forwards for a profiler

    time_interleaved(catalog, op, source_a, source_b, shapes, rounds=10) -> {shape: InterleavedTimes}

Every call is the evaluator's own stage (same seeds policy, L2 flush, integrity checks), so a
time here is what `evaluate` would report.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import device
from atrex_mcp.evaluate.evaluator import LaunchOptions, _Evaluation, forged_reply
from atrex_mcp.evaluate.models import EvalRequest, ShapeResult
from atrex_mcp.evaluate.session import Failure, Session
from sandbox.launcher import Cancelled

NVTX_FORWARD = "atrex_forward"  # the NVTX range each `forwards` call runs in (ncu: --nvtx --nvtx-include atrex_forward/)


class CandidateFailed(Exception):
    """The candidate did not load, or failed a shape; `failure` says how (taxonomy category),
    `which` names the candidate ('A' or 'B') in time_interleaved."""

    def __init__(self, what: str, failure: Failure | ShapeResult, which: str | None = None):
        super().__init__(f"{what}: {failure.category}: {failure.message[:500]}")
        self.what, self.failure, self.which = what, failure, which


class CandidateWorker:
    """One candidate loaded in its own sandbox worker (started by `open_session`)."""

    def __init__(self, evaluation: _Evaluation, session: Session):
        self.evaluation, self.session = evaluation, session
        self._set_bytes: dict[str, int] = {}  # per shape: one input set and its output (sizes the timing sets)

    def _shape(self, shape_id: str):
        return self.evaluation.problem.shape(shape_id)

    def check(self, shape_id: str) -> ShapeResult:
        """The correctness stage on fresh seeds (also compiles the kernels before any timing)."""
        result = ShapeResult(id=shape_id, correct=False)
        failure = self.session.ensure()
        if failure is not None:
            raise CandidateFailed("the worker could not be restarted", failure)
        size = self.evaluation.correctness(self.session, self._shape(shape_id), result)
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
        self.evaluation.timing(self.session, self._shape(shape_id), result, self._set_bytes[shape_id])
        if self.session.forged:
            forged_reply(result)
        return result

    def forwards(self, shape_id: str, calls: int, nvtx: str | None = NVTX_FORWARD) -> dict:
        """`calls` forwards on one fresh input set, each inside an NVTX range named `nvtx`
        (none when None); unchecked — run `check` first. Returns the worker's reply."""
        reply = self.session.call("forwards", {"shape": self.evaluation.payload_shape(self._shape(shape_id)),
                                               "seed": self.evaluation.seed(), "calls": calls, "nvtx": nvtx},
                                  self.evaluation.request.timeout_s)
        if isinstance(reply, Failure):
            raise CandidateFailed(f"forwards on shape {shape_id}", reply)
        return reply


@contextmanager
def open_session(catalog: Catalog, op: str, source: str, *, shapes: list[str], hardware: str = "h200",
                 dsl: str = "triton", seeds: int = 3, timeout_s: float = 120.0, launch: LaunchOptions | None = None,
                 scratch: Path | None = None, cancel: threading.Event | None = None) -> Iterator[CandidateWorker]:
    """A started worker with `source` loaded, stopped on exit. Raises CandidateFailed when the
    candidate does not load; AtrexError('runtime', 'cancelled') when `cancel` is set."""
    request = EvalRequest(op=op, source=source, shapes=shapes, seeds=seeds, hardware=hardware, dsl=dsl,
                          measure_dsl=False, timeout_s=timeout_s)
    evaluation = _Evaluation(request, catalog, None, cancel)
    launch = launch or LaunchOptions()
    with ExitStack() as stack:
        where = scratch or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="atrex-worker-")))
        session = evaluation.open_session(where, launch)
        stack.callback(session.stop)
        try:
            failure = session.start(first=True)
            if failure is not None:
                raise CandidateFailed("the candidate did not load", failure)
            yield CandidateWorker(evaluation, session)
        except Cancelled:
            raise AtrexError("runtime", "cancelled", "Cancelled; the worker was killed.") from None


@dataclass
class InterleavedTimes:
    """Per-round medians of one shape: round k of A and of B were measured back to back."""

    a_ms: list[float]
    b_ms: list[float]


def time_interleaved(catalog: Catalog, op: str, candidate_a: str, candidate_b: str, shapes: list[str], *, rounds: int = 10,
                     hardware: str = "h200", dsl: str = "triton", seeds: int = 1,
                     progress: Callable[[str, float], None] | None = None,
                     cancel: threading.Event | None = None) -> dict[str, InterleavedTimes] | None:
    """Time two candidates on the same GPU in alternating rounds (A B, B A, A B, …), each in
    its own worker; every round is a full timing stage. None without a GPU. Raises
    CandidateFailed (message names 'A' or 'B') when either fails to load, check or time."""
    if not device.has_gpu():
        return None
    report = progress or (lambda message, fraction: None)
    out: dict[str, InterleavedTimes] = {}
    with ExitStack() as stack:
        workers = []
        for name, text in zip("AB", (candidate_a, candidate_b)):
            try:
                workers.append(stack.enter_context(open_session(catalog, op, text, shapes=shapes, hardware=hardware,
                                                                dsl=dsl, seeds=seeds, cancel=cancel)))
            except CandidateFailed as exc:
                raise CandidateFailed(exc.what, exc.failure, which=name) from None
        for i, shape_id in enumerate(shapes):
            for name, worker in zip("AB", workers):
                checked = worker.check(shape_id)
                if not checked.correct:
                    raise CandidateFailed(f"failed on shape {shape_id}", checked, which=name)
            times: tuple[list[float], list[float]] = ([], [])
            for r in range(rounds):
                for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                    timed = workers[k].time(shape_id)
                    if timed.time_ms is None:
                        timed.category = timed.category or "not_timed"
                        timed.message = timed.message or timed.timing_note
                        raise CandidateFailed(f"not timed on shape {shape_id}, round {r + 1}", timed, which="AB"[k])
                    times[k].append(timed.time_ms)
                report(f"interleaved timing: shape {shape_id}, round {r + 1}/{rounds}", (i + (r + 1) / rounds) / len(shapes))
            out[shape_id] = InterleavedTimes(a_ms=times[0], b_ms=times[1])
    return out
