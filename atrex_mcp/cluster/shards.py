"""What crosses to a worker and what the worker does with it.

A shard is one operator's candidate (or baseline) on some of its shapes. Its spec is the
local path's own job spec, the EvalRequest, plus where the worker finds the problem set and a
digest of the operator's problem files, so a worker host whose copy differs refuses the shard
instead of judging against other reference files. The worker runs `judge_shard`, which calls
the same `evaluate()` the local path calls, with a Standby of its own so that each shard's
sandbox worker is spawned during the two shards before it (on a GPU, two spares of the worker's
GPU wait beside the shard it judges).

Each attempt announces itself (worker address, pid, time) as a scheduler event on
ATTEMPT_TOPIC before it starts judging, so the client can tell what a lost worker was doing
and record every retry.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from atrex_mcp.errors import AtrexError, ErrorInfo
from atrex_mcp.evaluate.models import EvalRequest, EvalResult
from atrex_mcp.problemset.catalog import HIDDEN_FILES, VISIBLE_FILES, Catalog
from atrex_mcp.problemset.derive import derive_missing

ATTEMPT_TOPIC = "atrex-shard-attempt"


class ShardSpec(BaseModel):
    """One shard: the job spec the local path uses, and what the worker needs to find the problem."""

    key: str = Field(description="Unique name of the shard within its run: OP.KIND.INDEX.")
    kind: str = Field(description="candidate, eager or torch-compile.")
    request: EvalRequest = Field(description="The evaluation, exactly as the local path would run it.")
    problems: list[str] | None = Field(
        default=None, description="Problem roots on the worker host; None: the worker's default set."
    )
    problem_digest: str = Field(description="SHA-256 over the operator's problem files on the sending host.")
    deadline_epoch: float | None = Field(
        default=None, description="Unix time at which the evaluation is stopped (partial result)."
    )
    tag: str = Field(
        default="", description="Names the shard's attempts in this invocation (its key and the invocation's token)."
    )
    max_attempts: int | None = Field(
        default=None,
        description=(
            "Attempts the shard may start; one more finds that many lost before it and refuses (killed_workers)."
        ),
    )


class ShardReply(BaseModel):
    """What a worker sends back: the evaluator's result, or its structured error."""

    key: str
    worker: str = Field(description="Dask address of the worker that judged it ('' outside a cluster).")
    pid: int
    visible_devices: str | None = Field(description="CUDA_VISIBLE_DEVICES of the worker process.")
    result: EvalResult | None = None
    error: ErrorInfo | None = None
    seconds: float = 0.0


def problem_digest(catalog: Catalog, op: str) -> str:
    """SHA-256 over the operator's five problem files (names and contents)."""
    derive_missing(catalog, [op])  # a worker host's copy of a snapshot may lack them
    folder = catalog.problem_dir(op)
    digest = hashlib.sha256()
    for name in (*VISIBLE_FILES, *HIDDEN_FILES):
        digest.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return digest.hexdigest()


def shard_catalog(problems: list[str] | None) -> Catalog:
    """The catalog a worker judges against; a root missing on this host is a clear error."""
    if problems is None:
        return Catalog()
    missing = [p for p in problems if not Path(p).is_dir()]
    if missing:
        raise AtrexError(
            "input",
            "worker_lacks_problems",
            f"This worker host has no problem root {', '.join(missing)}.",
            "Install the same problem set at the same path on every worker host (or use the embedded set).",
        )
    return Catalog([Path(p) for p in problems])


_standby: Any = None
_standby_lock = threading.Lock()


def worker_standby() -> Any:
    """One Standby per worker process, closed when the process exits."""
    global _standby
    with _standby_lock:
        if _standby is None:
            from atrex_mcp.evaluate import Standby

            _standby = Standby()
            atexit.register(_standby.close)
        return _standby


def current_worker() -> Any:
    """The Dask worker running this call, or None outside one."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def announce(topic: str, message: dict[str, Any]) -> None:
    worker = current_worker()
    if worker is not None:
        worker.log_event(topic, message)


def killed_workers_error(key: str, started: list[str], allowed_failures: int, why: str) -> ErrorInfo:
    """The error of a shard failed for killing allowed_failures + 1 workers."""
    return ErrorInfo(
        stage="runtime",
        category="killed_workers",
        message=(
            f"{key}: the shard killed {allowed_failures + 1} workers while it ran "
            f"(attempts: {', '.join(started) or 'none recorded'}); "
            f"the run allows {allowed_failures} such failure(s) per shard ({why})"
        ),
        hint="The candidate takes its judge host down (memory, a driver fault); see the workers' logs. "
        "It is not retried again in this invocation.",
    )


def started_attempts(tag: str) -> list[dict[str, Any]]:
    """The attempts of the shard `tag` that announced themselves before this one (a running
    attempt is the only live one: every earlier one lost its worker or its result)."""
    from distributed import get_client

    return [msg for _, msg in get_client().get_events(ATTEMPT_TOPIC) if msg.get("shard") == tag]


def judge_shard(spec: ShardSpec) -> ShardReply:
    """Run on a worker: evaluate the shard's request with the local path's evaluate()."""
    from atrex_mcp.evaluate import evaluate

    worker = current_worker()
    address = worker.address if worker is not None else ""
    reply = ShardReply(
        key=spec.key, worker=address, pid=os.getpid(), visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES")
    )
    if worker is not None and spec.max_attempts is not None:
        lost = started_attempts(spec.tag)
        if len(lost) >= spec.max_attempts:
            attempts = [f"{m.get('name') or m['worker']} (pid {m['pid']})" for m in lost]
            reply.error = killed_workers_error(spec.key, attempts, spec.max_attempts - 1, "not started again")
            return reply
    announce(
        ATTEMPT_TOPIC,
        {
            "key": spec.key,
            "shard": spec.tag,
            "task": worker.get_current_task() if worker else None,
            "worker": address,
            "name": str(worker.name) if worker else "",
            "pid": os.getpid(),
            "at": time.time(),
        },
    )
    started = time.monotonic()
    try:
        catalog = shard_catalog(spec.problems)
        if problem_digest(catalog, spec.request.op) != spec.problem_digest:
            raise AtrexError(
                "input",
                "worker_problems_differ",
                f"The problem files of {spec.request.op} on worker {address or 'here'} differ from the sender's.",
                "Install the same problem set on every worker host.",
            )
        request = spec.request
        if spec.deadline_epoch is not None:
            request = request.model_copy(update={"deadline_s": max(spec.deadline_epoch - time.time(), 1e-3)})
        reply.result = evaluate(request, catalog, standby=worker_standby())
    except AtrexError as exc:
        reply.error = exc.info
    reply.seconds = round(time.monotonic() - started, 3)
    return reply
