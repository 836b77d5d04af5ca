"""A server's tool calls (validate, profile_kernel, a run's checks and paired timings) on a
cluster GPU instead of the server's local queue, so many agents' servers share one pool.

What crosses to the worker is what the local path hands its evaluator: the EvalRequest (or the
profile's and the run judge's arguments: operator, candidate text, shape ids), plus where the
worker finds the problem set and a digest of the operator's problem files. The worker host
reads the hidden files itself (it is a trusted judge host); what comes back is the same result
object the local call returns, and the server's policy redacts it exactly as before.

Each call takes the resource GPU=1, so it has a worker's GPU to itself. Progress comes back as
scheduler events on a topic of the call's own; cancelling the tool call sets a Dask Event the
worker watches, which sets the evaluator's own cancel flag (its sandbox worker is killed).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from atrex_mcp.cluster.engine import GPU, Connection
from atrex_mcp.cluster.shards import announce, current_worker, problem_digest, shard_catalog
from atrex_mcp.errors import AtrexError, ErrorInfo
from atrex_mcp.evaluate.models import EvalRequest, EvalResult
from atrex_mcp.policy import Policy
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.views import Mode

T = TypeVar("T")
Progress = Callable[[str, float], None]
POLL_S = 0.5
CANCEL_GRACE_S = 30.0


class Outcome(BaseModel):
    """A remote call's value, or the AtrexError it raised (which does not pickle as itself)."""

    model_config = {"arbitrary_types_allowed": True}

    value: Any = None
    error: ErrorInfo | None = None


def call_on_worker(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], call_id: str) -> Outcome:
    """Run on a worker: `fn(*args, progress=..., cancel=..., **kwargs)` with progress sent as
    events and cancel following the call's Dask Event."""
    from distributed import Event, get_client

    cancel, finished = threading.Event(), threading.Event()
    requested = Event(f"{call_id}-cancel", client=get_client())  # made here: the watcher thread has no worker context

    def watch() -> None:
        try:
            while not finished.is_set():
                if requested.wait(POLL_S):
                    cancel.set()
                    return
        except OSError:  # the scheduler went away (CommClosedError): after the call ended, nothing to watch
            if not finished.is_set():
                raise

    watcher = threading.Thread(target=watch, name=f"{call_id}-cancel", daemon=True)
    watcher.start()
    try:
        return Outcome(
            value=fn(
                *args,
                progress=lambda message, fraction: announce(
                    f"{call_id}-progress", {"message": message, "fraction": fraction}
                ),
                cancel=cancel,
                **kwargs,
            )
        )
    except AtrexError as exc:
        return Outcome(error=exc.info)
    finally:
        finished.set()


def _catalog(problems: list[str] | None, op: str, digest: str) -> Catalog:
    catalog = shard_catalog(problems)
    if problem_digest(catalog, op) != digest:
        worker = current_worker()
        raise AtrexError(
            "input",
            "worker_problems_differ",
            f"The problem files of {op} on a cluster worker "
            f"{'(' + worker.address + ') ' if worker else ''}differ from the server's.",
            "Install the same problem set on every worker host.",
        )
    return catalog


def evaluate_on_worker(
    request: EvalRequest, problems: list[str] | None, digest: str, *, progress: Progress, cancel: threading.Event
) -> EvalResult:
    from atrex_mcp.evaluate import evaluate

    return evaluate(request, _catalog(problems, request.op, digest), progress=progress, cancel=cancel)


def profile_on_worker(
    op: str,
    source: str,
    shape: str,
    problems: list[str] | None,
    digest: str,
    *,
    hardware: str,
    mode: Mode,
    progress: Progress,
    cancel: threading.Event,
) -> Any:
    """The profile without storing it: the report is stored by the server, in its own state.
    The server's mode travels (a policy holds a catalog, which the worker has of its own), and
    the worker's policy for that mode decides what the profile may compute."""
    from atrex_mcp.profiling.service import profile_kernel

    catalog = _catalog(problems, op, digest)
    return profile_kernel(
        op,
        source,
        shape,
        catalog,
        hardware=hardware,
        store=None,
        policy=Policy(mode, catalog),
        progress=progress,
        cancel=cancel,
    )


def judge_on_worker(
    method: str,
    op: str,
    problems: list[str] | None,
    digest: str,
    args: tuple,
    kwargs: dict[str, Any],
    *,
    progress: Progress,
    cancel: threading.Event,
) -> Any:
    """A run judge's `check` or `time_pair`, by the evaluator judge on this worker."""
    from atrex_mcp.runs.evaluator_judge import EvaluatorJudge

    judge = EvaluatorJudge(_catalog(problems, op, digest))
    return getattr(judge, method)(op, *args, progress=progress, cancel=cancel, **kwargs)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


class ClusterPool:
    """The server's connection to its cluster; `call` blocks its (worker) thread until done."""

    def __init__(self, connection: Connection, catalog: Catalog):
        from atrex_mcp.cluster.dispatch import problem_roots

        self.connection = connection
        self.catalog = catalog
        self.problems = problem_roots(catalog.roots)
        self._digests: dict[str, str] = {}
        self._gpu: bool | None = None

    @property
    def label(self) -> str:
        return self.connection.target.address or "a local cluster"

    def digest(self, op: str) -> str:
        if op not in self._digests:
            self._digests[op] = problem_digest(self.catalog, op)
        return self._digests[op]

    def has_gpu(self) -> bool:
        """Whether the GPU-offering workers have a CUDA device (asked once, of one such worker)."""
        if self._gpu is None:
            workers = [a for a, w in self.connection.workers().items() if w["resources"].get(GPU)]
            answers = self.connection.client.run(_cuda_available, workers=workers[:1]) if workers else {}
            self._gpu = any(answers.values())
        return self._gpu

    def call(self, fn: Callable[..., T], *args: Any, progress: Progress, cancel: threading.Event, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on a worker GPU; AtrexErrors come back as themselves, a call
        that kept killing its workers as a runtime error, cancellation as the evaluator's."""
        from distributed import Event
        from distributed.scheduler import KilledWorker

        client = self.connection.client
        call_id = f"atrex-call-{uuid.uuid4().hex}"
        future = client.submit(call_on_worker, fn, args, kwargs, call_id, key=call_id, resources={GPU: 1}, pure=False)
        seen = 0
        cancel_sent_at: float | None = None

        def relay() -> None:
            nonlocal seen
            events = client.get_events(f"{call_id}-progress")
            for _, message in events[seen:]:
                progress(message["message"], message["fraction"])
            seen = len(events)

        try:
            while True:
                try:
                    outcome: Outcome = future.result(timeout=POLL_S)
                    relay()  # what the worker announced after the last poll
                    break
                except TimeoutError:
                    pass
                relay()
                if cancel.is_set() and cancel_sent_at is None:
                    Event(f"{call_id}-cancel", client=client).set()
                    cancel_sent_at = time.monotonic()
                if cancel_sent_at is not None and time.monotonic() - cancel_sent_at > CANCEL_GRACE_S:
                    future.cancel()
                    raise AtrexError(
                        "runtime", "cancelled", "The call was cancelled; its cluster worker did not stop in time."
                    )
        except KilledWorker:
            raise AtrexError(
                "runtime",
                "killed_workers",
                "The cluster workers running this call died twice while it ran.",
                "The kernel may take its judge host down (memory, a driver fault); try a smaller shape set.",
            ) from None
        finally:
            if cancel_sent_at is not None:
                Event(f"{call_id}-cancel", client=client).clear()
        if outcome.error is not None:
            info = outcome.error
            raise AtrexError(info.stage, info.category, info.message, info.hint)
        return outcome.value

    def evaluate(self, request: EvalRequest, progress: Progress, cancel: threading.Event) -> EvalResult:
        return self.call(
            evaluate_on_worker, request, self.problems, self.digest(request.op), progress=progress, cancel=cancel
        )

    def profile(
        self,
        op: str,
        source: str,
        shape: str,
        *,
        hardware: str,
        policy: Policy,
        progress: Progress,
        cancel: threading.Event,
    ) -> Any:
        return self.call(
            profile_on_worker,
            op,
            source,
            shape,
            self.problems,
            self.digest(op),
            hardware=hardware,
            mode=policy.mode,
            progress=progress,
            cancel=cancel,
        )

    def judge(self) -> ClusterJudge:
        return ClusterJudge(self)


class ClusterJudge:
    """A run judge (runs.measure.Judge) whose checks and paired timings run on a cluster GPU."""

    def __init__(self, pool: ClusterPool):
        self.pool = pool

    def _call(self, method: str, op: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        progress = kwargs.pop("progress", None) or (lambda message, fraction: None)
        cancel = kwargs.pop("cancel", None) or threading.Event()
        return self.pool.call(
            judge_on_worker,
            method,
            op,
            self.pool.problems,
            self.pool.digest(op),
            args,
            kwargs,
            progress=progress,
            cancel=cancel,
        )

    def check(self, op: str, source: str, shapes: list[str], **kwargs: Any) -> Any:
        return self._call("check", op, (source, shapes), kwargs)

    def time_pair(self, op: str, accepted_source: str, candidate_source: str, shapes: list[str], **kwargs: Any) -> Any:
        return self._call("time_pair", op, (accepted_source, candidate_source, shapes), kwargs)
