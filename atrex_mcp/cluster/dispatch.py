"""`bench eval --cluster`: a run's evaluations as shards on the cluster's GPU workers.

Each evaluation the local path would run (an operator's candidate, or a baseline) is cut into
shards of at most `shard_shapes` shapes. Shards go to the workers largest first; each finished
shard is written to RUN_DIR/eval/shards/KEY.json atomically with every attempt it took, and an
evaluation whose shards are all judged is merged by shape id (first complete wins) into the same
file the local path writes (eval/OP.json, eval/baselines/OP.KIND.json).

Resuming: a shard file whose spec (request, problem files) matches the planned shard is taken
as it is and not sent again; only judged shards count, so a shard that failed is sent again by
the next `bench eval`. Within one invocation, a shard whose worker dies is rescheduled by the
scheduler; once it has killed allowed-failures + 1 workers it is recorded as failed with the
workers it took down, never retried again in that invocation.

RUN_DIR/eval/cluster.json is the record of the latest invocation: the scheduler, its
allowed-failures, the workers, and per shard its status, attempts and whether it was retried.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from atrex_mcp.atomic_json import write_json_atomic
from atrex_mcp.cluster.engine import GPU, Connection
from atrex_mcp.cluster.merge import merge_results
from atrex_mcp.cluster.shards import (
    ATTEMPT_TOPIC,
    ShardReply,
    ShardSpec,
    judge_shard,
    killed_workers_error,
    problem_digest,
)
from atrex_mcp.errors import ErrorInfo
from atrex_mcp.evaluate.models import EvalRequest, EvalResult
from atrex_mcp.knowledge import Knowledge
from atrex_mcp.paths import problems_dir
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.runs.store import now_iso

DEFAULT_SHARD_SHAPES = 8
MAX_BYSTANDER_RESUBMITS = (
    2  # sends of a shard failed by deaths it did not start under, beyond the scheduler's own retries
)
RECORD_FILE = "cluster.json"


class Attempt(BaseModel):
    """One run of a shard on one worker."""

    worker: str = Field(description="Dask address of the worker.")
    name: str = Field(default="", description="The worker's name (its device on a local cluster).")
    pid: int = Field(description="The worker process.")
    at: float = Field(description="Unix time the attempt started.")
    outcome: Literal["judged", "worker_lost", "error"] = Field(description="How the attempt ended.")


class ShardFile(BaseModel):
    """A shard's stored outcome (eval/shards/KEY.json)."""

    key: str
    op: str
    kind: str
    shapes: list[str]
    spec_sha256: str = Field(
        description="Digest of the shard's spec: a resumed run reuses the file only when it matches."
    )
    status: Literal["judged", "failed", "error"] = Field(
        description=(
            "judged: the result is in; failed: it killed allowed-failures + 1 workers (or the cluster failed it); "
            "error: the evaluator refused it (its structured error)."
        )
    )
    result: EvalResult | None = None
    error: ErrorInfo | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    seconds: float | None = Field(default=None, description="Wall time of the judging attempt on its worker.")
    finished_at: str


class ShardRecord(BaseModel):
    key: str
    status: Literal["judged", "failed", "error", "reused"]
    attempts: list[Attempt] = Field(default_factory=list)
    retried: bool = Field(default=False, description="It ran on more than one worker (a worker died under it).")
    reason: str = ""


class ClusterRecord(BaseModel):
    """The latest `bench eval --cluster` invocation (eval/cluster.json)."""

    cluster: str
    scheduler: str
    allowed_failures: int
    workers: dict[str, str] = Field(description="Worker address -> name, at the start.")
    shard_shapes: int
    started_at: str
    finished_at: str | None = None
    shards: list[ShardRecord] = Field(default_factory=list)
    unsent: list[str] = Field(
        default_factory=list, description="Shards not sent because the invocation's sending time ran out."
    )

    @property
    def retried(self) -> list[str]:
        return [s.key for s in self.shards if s.retried]


@dataclass
class Job:
    """One evaluation the local path would run: its request and the file its result goes to."""

    op: str
    kind: str
    path: Path
    request: EvalRequest
    knowledge: Knowledge | None = None  # the condition the candidate was written under, stamped on its result


@dataclass
class PlannedEvaluation:
    """One job's evaluation as the cluster runs it: its shards (`keys`), the results that came
    back, and the error that ended it; its result is merged in `shape_order` once done."""

    job: Job
    shape_order: list[str]
    keys: list[str]
    parts: dict[str, EvalResult] = field(default_factory=dict)  # shard key -> result, in completion order
    error: ErrorInfo | None = None

    @property
    def done(self) -> bool:
        return self.error is not None or len(self.parts) == len(self.keys)


OpDone = Callable[[str, ErrorInfo | None], None]
Stage = Callable[[str, str], None]


def shards_dir(eval_dir: Path) -> Path:
    return eval_dir / "shards"


def _spec_sha(spec: ShardSpec) -> str:
    return hashlib.sha256(
        spec.model_dump_json(exclude={"deadline_epoch", "key", "tag", "max_attempts"}).encode()
    ).hexdigest()


def _stored_shard(path: Path, spec_sha: str) -> ShardFile | None:
    try:
        stored = ShardFile.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError):
        return None
    return (
        stored if stored.spec_sha256 == spec_sha and stored.status == "judged" and stored.result is not None else None
    )


def problem_roots(roots: Sequence[Path]) -> list[str] | None:
    """What a shard says about the problem set: None for this installation's default set (each
    worker has its own copy inside its package), else the roots' paths."""
    resolved = [Path(r).resolve() for r in roots]
    return None if resolved == [problems_dir()] else [str(r) for r in resolved]


def plan(
    jobs: Sequence[Job], catalog: Catalog, problems: list[str] | None, shard_shapes: int
) -> list[tuple[PlannedEvaluation, list[ShardSpec]]]:
    """Each job cut into shards of at most `shard_shapes` shapes, in its request's order."""
    planned = []
    digests: dict[str, str] = {}
    for job in jobs:
        ids = job.request.shapes or [s.id for s in catalog.visible(job.op).scored_shapes]
        digest = digests.setdefault(job.op, problem_digest(catalog, job.op))
        specs = [
            ShardSpec(
                key=f"{job.op}.{job.kind}.{i // shard_shapes:03d}",
                kind=job.kind,
                request=job.request.model_copy(update={"shapes": ids[i : i + shard_shapes]}),
                problems=problems,
                problem_digest=digest,
            )
            for i in range(0, len(ids), shard_shapes)
        ]
        # shapes in the local path's order
        planned.append((PlannedEvaluation(job, list(ids), [s.key for s in specs]), specs))
    return planned


def _attempts(connection: Connection, task_key: str, judged: bool) -> list[Attempt]:
    events = [msg for _, msg in connection.client.get_events(ATTEMPT_TOPIC) if msg.get("task") == task_key]
    events.sort(key=lambda m: m["at"])
    attempts = [
        Attempt(worker=m["worker"], name=m.get("name", ""), pid=m["pid"], at=m["at"], outcome="worker_lost")
        for m in events
    ]
    if judged and attempts:
        attempts[-1].outcome = "judged"
    return attempts


def gpu_slots(connection: Connection) -> int:
    """GPU resource units the cluster's workers offer now."""
    return int(sum(w["resources"].get(GPU, 0) for w in connection.workers().values()))


def judge_on_cluster(
    connection: Connection,
    jobs: Sequence[Job],
    eval_dir: Path,
    catalog: Catalog,
    *,
    problems: list[str] | None,
    shard_shapes: int = DEFAULT_SHARD_SHAPES,
    on_op_done: OpDone,
    stage: Stage,
    send_until: float | None = None,
) -> ClusterRecord:
    """Judge `jobs` on the cluster; `on_op_done(op, error)` once each operator's evaluations are
    all written (error: why one could not be). The shard files and the record go under `eval_dir`
    (a bench run's eval/ folder); each result goes to its job's path. With `send_until` (a time.monotonic() value) no
    shard is sent after it; those in flight finish, the rest are listed as unsent for the next
    invocation. Returns the invocation's record."""
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    allowed = connection.allowed_failures()
    record = ClusterRecord(
        cluster=connection.target.address or "local",
        scheduler=connection.scheduler_address,
        allowed_failures=allowed,
        workers={a: w["name"] for a, w in connection.workers().items()},
        shard_shapes=shard_shapes,
        started_at=now_iso(),
    )
    run = _ClusterRun(connection, eval_dir, record, on_op_done=on_op_done, stage=stage, send_until=send_until)
    planned = plan(jobs, catalog, problems, shard_shapes)
    run.reuse_stored(planned)
    for evaluation, _ in planned:
        run.settle(evaluation)
    run.save_record()
    run.send_and_collect(as_completed(), KilledWorker)
    record.unsent = [spec.key for spec, _ in run.waiting]
    record.finished_at = now_iso()
    run.save_record()
    return record


@dataclass
class _ShardOutcome:
    """How one sent shard ended: what its file and its line in the record say."""

    status: Literal["judged", "failed", "error"]
    error: ErrorInfo | None
    reply: ShardReply | None


class _ClusterRun:
    """The state one invocation shares between sending shards and collecting them: which
    evaluation owns each shard, what waits to be sent, what is in flight and every attempt so far."""

    def __init__(
        self,
        connection: Connection,
        eval_dir: Path,
        record: ClusterRecord,
        *,
        on_op_done: OpDone,
        stage: Stage,
        send_until: float | None,
    ) -> None:
        self.connection = connection
        self.record = record
        self.allowed = record.allowed_failures
        self.record_path = eval_dir / RECORD_FILE
        self.folder = shards_dir(eval_dir)
        self.on_op_done = on_op_done
        self.stage = stage
        self.send_until = send_until
        self.by_op: dict[str, list[PlannedEvaluation]] = {}
        self.owner: dict[str, PlannedEvaluation] = {}
        self.finished_ops: set[str] = set()
        self.token = uuid.uuid4().hex[:12]
        self.waiting: deque[tuple[ShardSpec, str]] = deque()
        self.futures: dict[Any, tuple[ShardSpec, str]] = {}
        self.history: dict[str, list[Attempt]] = {}  # shard key -> attempts over all its submissions
        self.submissions: dict[str, int] = {}
        self.running: Any = None

    def save_record(self) -> None:
        """The record is rewritten after every change, so an interrupted invocation still leaves it."""
        write_json_atomic(self.record_path, self.record)

    def reuse_stored(self, planned: list[tuple[PlannedEvaluation, list[ShardSpec]]]) -> None:
        """Take each shard already judged under the same spec from its file; queue the rest,
        largest first so that finishing times stay close."""
        pending: list[tuple[ShardSpec, str]] = []
        for evaluation, specs in planned:
            self.by_op.setdefault(evaluation.job.op, []).append(evaluation)
            for spec in specs:
                self.owner[spec.key] = evaluation
                sha = _spec_sha(spec)
                stored = _stored_shard(self.folder / f"{spec.key}.json", sha)
                if stored is not None:
                    evaluation.parts[spec.key] = stored.result  # type: ignore[assignment]
                    self.record.shards.append(ShardRecord(key=spec.key, status="reused", attempts=stored.attempts))
                else:
                    pending.append((spec, sha))
        pending.sort(key=lambda item: -len(item[0].request.shapes or ()))
        self.waiting = deque(pending)

    def settle(self, evaluation: PlannedEvaluation) -> None:
        """Write a finished evaluation's merged result, and report its operator once all of the
        operator's evaluations are done."""
        if not evaluation.done:
            return
        if evaluation.error is None:
            parts = [evaluation.parts[k] for k in evaluation.parts]
            merged = merge_results(parts, evaluation.shape_order)
            merged.knowledge = evaluation.job.knowledge
            write_json_atomic(evaluation.job.path, merged)
        op = evaluation.job.op
        if op not in self.finished_ops and all(e.done for e in self.by_op[op]):
            self.finished_ops.add(op)
            error = next((e.error for e in self.by_op[op] if e.error is not None), None)
            self.on_op_done(op, error)

    def top_up(self) -> None:
        """Keep one shard per GPU slot in flight, no more: a worker that dies then takes only the
        shard it was running with it, and workers that join later get work at once."""
        if self.send_until is not None and time.monotonic() >= self.send_until:
            return
        slots = max(1, gpu_slots(self.connection))
        while self.waiting and self.running.count() < slots:
            spec, sha = self.waiting.popleft()
            self.submissions[spec.key] = self.submissions.get(spec.key, 0) + 1
            spec = spec.model_copy(update={"tag": f"{self.token}-{spec.key}", "max_attempts": self.allowed + 1})
            future = self.connection.client.submit(
                judge_shard,
                spec,
                key=f"atrex-{self.token}-{spec.key}-{self.submissions[spec.key]}",
                resources={GPU: 1},
                pure=False,
            )
            self.futures[future] = (spec, sha)
            self.running.add(future)

    def send_and_collect(self, running: Any, killed_worker: type[BaseException]) -> None:
        """Send shards and record each as it completes until none is waiting or in flight; a
        shard sent again is not recorded yet. Whatever is still in flight at the end is cancelled."""
        self.running = running
        self.top_up()
        try:
            for future in running:
                spec, sha = self.futures[future]
                outcome = self._outcome(future, spec, sha, killed_worker)
                if outcome is not None:
                    self._record(spec, sha, outcome)
                self.top_up()
        finally:
            for future in self.futures:
                future.cancel()

    def _outcome(
        self, future: Any, spec: ShardSpec, sha: str, killed_worker: type[BaseException]
    ) -> _ShardOutcome | None:
        """How a completed future ended, with its attempts added to the shard's history; None
        when the shard goes back to the front of the queue instead."""
        attempts = self.history.setdefault(spec.key, [])
        try:
            reply: ShardReply = future.result()
        except killed_worker as exc:
            attempts += _attempts(self.connection, future.key, judged=False)
            # The scheduler counts a death against every task assigned to the dying worker, one
            # queued behind the shard that crashed it too: only deaths during attempts this shard
            # started count against it, so a bystander is sent again instead of failed.
            if len(attempts) <= self.allowed and self.submissions[spec.key] <= self.allowed + MAX_BYSTANDER_RESUBMITS:
                self.waiting.appendleft((spec, sha))
                return None
            workers = [f"{a.name or a.worker} (pid {a.pid})" for a in attempts]
            return _ShardOutcome(
                "failed", killed_workers_error(spec.key, workers, self.allowed, type(exc).__name__), None
            )
        except Exception as exc:  # noqa: BLE001 — a shard the cluster could not run fails alone, with the reason
            attempts += _attempts(self.connection, future.key, judged=False)
            error = ErrorInfo(
                stage="internal",
                category="cluster_task_failed",
                message=f"{spec.key}: {type(exc).__name__}: {exc}",
                hint="See the worker's log; `bench eval` again re-sends only unjudged shards.",
            )
            return _ShardOutcome("failed", error, None)
        attempts += _attempts(self.connection, future.key, judged=reply.error is None)
        if reply.error is not None and reply.error.category == "killed_workers":  # refused: too many lost attempts
            return _ShardOutcome("failed", reply.error, reply)
        if reply.error is not None:
            if attempts:
                attempts[-1].outcome = "error"
            return _ShardOutcome("error", reply.error, reply)
        return _ShardOutcome("judged", None, reply)

    def _record(self, spec: ShardSpec, sha: str, outcome: _ShardOutcome) -> None:
        """Write the shard's file and its line in the record, then hand its result or error to
        the evaluation that owns it."""
        attempts = self.history[spec.key]
        reply, error = outcome.reply, outcome.error
        stored = ShardFile(
            key=spec.key,
            op=spec.request.op,
            kind=spec.kind,
            shapes=list(spec.request.shapes or ()),
            spec_sha256=sha,
            status=outcome.status,
            result=reply.result if reply else None,
            error=error,
            attempts=attempts,
            seconds=reply.seconds if reply else None,
            finished_at=now_iso(),
        )
        write_json_atomic(self.folder / f"{spec.key}.json", stored)
        self.record.shards.append(
            ShardRecord(
                key=spec.key,
                status=outcome.status,
                attempts=attempts,
                retried=len(attempts) > 1,
                reason=error.message if error else "",
            )
        )
        self.save_record()
        evaluation = self.owner[spec.key]
        if error is not None:
            evaluation.error = evaluation.error or error
        else:
            evaluation.parts[spec.key] = reply.result  # type: ignore[union-attr,assignment]
        self.stage(spec.request.op, f"{spec.kind}: {len(evaluation.parts)}/{len(evaluation.keys)} shards judged")
        self.settle(evaluation)
