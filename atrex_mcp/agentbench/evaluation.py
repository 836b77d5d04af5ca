"""`bench eval`: the trusted evaluation of every submission of a run.

Each collected submission (the trusted copy in ops/<op>/submission/) goes through the
evaluator's full gate on fresh seeds; results land in RUN_DIR/eval/<op>.json as the evaluator
wrote them (EvalResult). On a GPU the eager and torch.compile references are timed too
(eval/baselines/), for the "vs eager" and "vs torch.compile" columns. Without a GPU nothing
is timed: correctness only, and every time-derived figure stays empty.

Operators evaluated before with the same settings and the same submission are skipped, so an
interrupted evaluation continues where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel, Field, ValidationError

from atrex_mcp.agentbench.layout import RunLayout, RunStore
from atrex_mcp.agentbench.progress import ProgressBoard
from atrex_mcp.atomic_json import write_json_atomic
from atrex_mcp.cluster.dispatch import Job
from atrex_mcp.errors import AtrexError, ErrorInfo
from atrex_mcp.evaluate import footprint
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.problemset.derive import derive_missing

SETTINGS_FILE = "settings.json"
BASELINES = ("eager", "torch-compile")


class EvalSettings(BaseModel):
    """How submissions are judged (stored in eval/settings.json; a change needs --force)."""

    shapes: str = Field(default="all", description="all (every scored shape), smoke, or comma-separated shape ids.")
    seeds: int = Field(default=5, ge=1, le=64, description="Fresh random input seeds per shape.")
    timeout_s: float = Field(default=120.0, gt=0, description="Wall-clock limit per shape and stage.")
    baselines: Literal["auto", "yes", "no"] = Field(
        default="auto", description="Time the eager and torch.compile references (auto: with a GPU)."
    )


class StoredSettings(BaseModel):
    shapes: str
    seeds: int
    timeout_s: float
    hardware: str
    dsl: str
    baselines: bool


class EvalError(BaseModel):
    """Why an operator could not be evaluated (eval/<op>.error.json)."""

    op: str
    error: ErrorInfo


@dataclass
class EvalSummary:
    evaluated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    not_submitted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # a stage rejected the submission on some shape
    retried: list[str] = field(default_factory=list)  # cluster shards that ran again after their worker died
    unsent: list[str] = field(default_factory=list)  # cluster shards left for the next call (its sending time ran out)

    def line(self) -> str:
        parts = [
            f"{len(self.evaluated)} evaluated",
            f"{len(self.skipped)} already evaluated",
            f"{len(self.not_submitted)} without a submission",
            f"{len(self.failed)} failed to evaluate",
            f"{len(self.rejected)} with a failing shape",
        ]
        if self.retried:
            parts.append(f"{len(self.retried)} shard(s) re-run after a lost worker")
        if self.unsent:
            parts.append(f"{len(self.unsent)} shard(s) not sent yet (run again to continue)")
        return ", ".join(parts)


def _has_gpu(cluster: str | None) -> bool:
    """Whether the judging hosts have a GPU: this one, or with a cluster, its workers (whose
    GPU resource says they time on one)."""
    if cluster is not None:
        return not _cpu_only(cluster)
    import torch

    return torch.cuda.is_available()


def _cpu_only(cluster: str) -> bool:
    """A local cluster on a host without a GPU judges on CPU; a remote cluster's workers are
    taken to have the GPUs their resource names (say --baselines no for CPU workers)."""
    from atrex_mcp.cluster.engine import parse_target

    if not parse_target(cluster).local:
        return False
    import torch

    return not torch.cuda.is_available()


def result_path(layout: RunLayout, op: str) -> Path:
    return layout.eval_dir / f"{op}.json"


def error_path(layout: RunLayout, op: str) -> Path:
    return layout.eval_dir / f"{op}.error.json"


def baseline_path(layout: RunLayout, op: str, kind: str) -> Path:
    return layout.baselines_dir / f"{op}.{kind}.json"


def _shape_ids(spec: str, catalog: Catalog, op: str) -> list[str] | None:
    if spec == "all":
        return None
    problem = catalog.visible(op)
    if spec == "smoke":
        return [problem.smoke_shape.id]
    ids = list(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    for shape_id in ids:
        problem.shape(shape_id)
    return ids


def _sized(spec: str, catalog: Catalog, op: str) -> dict[str, int | None]:
    """Input bytes of the shapes `spec` selects ({} when it names a shape the operator lacks:
    that operator's evaluation reports it)."""
    try:
        ids = _shape_ids(spec, catalog, op)
    except AtrexError:
        return {}
    problem = catalog.visible(op)
    return footprint.sizes(catalog, op, list(problem.scored_shapes) if ids is None else [problem.shape(i) for i in ids])


def _results_exist(layout: RunLayout) -> bool:
    """Any result beside settings.json: an evaluation that stopped before its first result holds none."""
    found = [p for p in layout.eval_dir.rglob("*.json") if p.name != SETTINGS_FILE] if layout.eval_dir.is_dir() else []
    return bool(found)


def _stored(path: Path) -> tuple[str | None, bool]:
    """(candidate sha256, readable) of an existing result file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, False
    return (data.get("candidate_sha256") if isinstance(data, dict) else None), True


def _settings(layout: RunLayout, wanted: StoredSettings, force: bool) -> None:
    path = layout.eval_dir / SETTINGS_FILE
    if path.is_file() and not force:
        try:
            previous = StoredSettings.model_validate_json(path.read_text())
        except (ValidationError, ValueError):
            previous = None
        if previous is not None and previous != wanted and _results_exist(layout):
            raise AtrexError(
                "input",
                "eval_settings_differ",
                f"{layout.eval_dir} holds results made with other settings ({previous.model_dump()}).",
                "Repeat the earlier options, or pass --force to evaluate everything again with the new ones.",
            )
    layout.eval_dir.mkdir(parents=True, exist_ok=True)
    layout.eval_dir.chmod(0o700)
    write_json_atomic(path, wanted)


def evaluate_run(
    run_dir: Path,
    settings: EvalSettings,
    *,
    force: bool = False,
    stream: TextIO | None = None,
    live: bool | None = None,
    cluster: str | None = None,
    shard_shapes: int | None = None,
    send_until: float | None = None,
    warm_profiler: bool = True,
) -> EvalSummary:
    """Evaluate every submission of the run in `run_dir` that has no current result: here, one
    evaluation after another, or with `cluster` (a Dask scheduler address or local[:N]) as
    shards on the cluster's GPU workers (atrex_mcp.cluster.dispatch), into the same files; with
    `send_until` (time.monotonic()), no shard is sent after it (the next call continues).
    `warm_profiler`: here, each worker spawned ahead sets up the profiler while it waits
    (evaluate.standby)."""
    layout = RunLayout(run_dir)
    store = RunStore(layout)
    config = store.load_config()
    catalog = Catalog([Path(p) for p in config.problems])
    derive_missing(catalog, config.ops)
    baselines = settings.baselines == "yes" or (settings.baselines == "auto" and _has_gpu(cluster))
    wanted = StoredSettings(
        shapes=settings.shapes,
        seeds=settings.seeds,
        timeout_s=settings.timeout_s,
        hardware=config.hardware,
        dsl=config.dsl,
        baselines=baselines,
    )
    _settings(layout, wanted, force)
    summary = EvalSummary()
    where = footprint.room()
    sized = {op: _sized(settings.shapes, catalog, op) for op in _pending(layout, store, config.ops)}
    runs_per_op = 1 + len(BASELINES) * baselines
    estimate = sum(footprint.estimate_s(s, settings.seeds, where.kind, True) * runs_per_op for s in sized.values())
    board = ProgressBoard(f"bench eval {config.name}", len(config.ops), stream=stream, live=live, estimate_s=estimate)
    board.begin()

    def done(op: str, error: ErrorInfo | None) -> None:
        if error is not None:
            write_json_atomic(error_path(layout, op), EvalError(op=op, error=error))
            summary.failed.append(op)
            board.finish(op, f"evaluation failed: {error.category}: {error.message}")
            return
        error_path(layout, op).unlink(missing_ok=True)
        summary.evaluated.append(op)
        if _rejected(result_path(layout, op)):
            summary.rejected.append(op)
        board.finish(op, _verdict(result_path(layout, op)))

    jobs: list[Job] = []
    for op in config.ops:
        state = store.load_state(op)
        submission = state.submission
        if (
            state.status != "done"
            or submission is None
            or submission.outcome != "submitted"
            or submission.artifact is None
        ):
            summary.not_submitted.append(op)
            board.finish(op, "no submission to evaluate" if state.status == "done" else f"not run yet ({state.status})")
            continue
        try:
            source = (layout.root / submission.artifact).read_text()
            if cluster is None:  # a cluster's workers have their own devices; this host's memory says nothing of them
                footprint.check_fit(op, sized.get(op) or {}, where)
            planned = _op_jobs(layout, catalog, config, settings, op, source, baselines, force)
        except AtrexError as exc:
            done(op, exc.info)
            continue
        if not planned:
            error_path(layout, op).unlink(missing_ok=True)
            summary.skipped.append(op)
            if _rejected(result_path(layout, op)):
                summary.rejected.append(op)
            board.finish(op, "already evaluated")
        jobs += planned
    try:
        if cluster is None:
            _judge_here(jobs, catalog, done, board, warm_profiler=warm_profiler)
        else:
            from atrex_mcp.cluster.dispatch import DEFAULT_SHARD_SHAPES, judge_on_cluster, problem_roots
            from atrex_mcp.cluster.engine import connect

            with connect(cluster) as connection:
                record = judge_on_cluster(
                    connection,
                    jobs,
                    layout.eval_dir,
                    catalog,
                    problems=problem_roots(catalog.roots),
                    shard_shapes=shard_shapes or DEFAULT_SHARD_SHAPES,
                    on_op_done=done,
                    stage=board.stage,
                    send_until=send_until,
                )
            summary.retried, summary.unsent = record.retried, record.unsent
    finally:
        board.close(summary.line())
    return summary


def _pending(layout: RunLayout, store: RunStore, ops: list[str]) -> list[str]:
    """Operators with a submission and no result yet (what the estimate covers)."""
    out = []
    for op in ops:
        state = store.load_state(op)
        submitted = state.status == "done" and state.submission is not None and state.submission.outcome == "submitted"
        if submitted and not result_path(layout, op).is_file():
            out.append(op)
    return out


def _rejected(path: Path) -> bool:
    from atrex_mcp.evaluate import EvalResult

    result = EvalResult.model_validate_json(path.read_text())
    return result.compile_error is not None or any(s.failed for s in result.shapes)


def _op_jobs(
    layout: RunLayout,
    catalog: Catalog,
    config: Any,
    settings: EvalSettings,
    op: str,
    source: str,
    baselines: bool,
    force: bool,
) -> list[Job]:
    """The evaluations of one operator that have no current result (all of them with force)."""
    from atrex_mcp.evaluate import EvalRequest

    sha = hashlib.sha256(source.encode()).hexdigest()
    shapes = _shape_ids(settings.shapes, catalog, op)
    targets: list[tuple[str, Path, str | None]] = [("candidate", result_path(layout, op), sha)]
    if baselines:
        targets += [(kind, baseline_path(layout, op, kind), None) for kind in BASELINES]
    jobs = []
    for kind, path, expected_sha in targets:
        stored_sha, exists = _stored(path)
        if exists and not force and (expected_sha is None or stored_sha == expected_sha):
            continue
        candidate = kind == "candidate"
        request = EvalRequest(
            op=op,
            source=source if candidate else None,
            baseline=None if candidate else kind,
            shapes=shapes,
            seeds=settings.seeds,
            hardware=config.hardware,
            dsl=config.dsl,
            timing=True,
            measure_dsl=candidate,
            timeout_s=settings.timeout_s,
        )
        jobs.append(
            Job(op=op, kind=kind, path=path, request=request, knowledge=config.knowledge if candidate else None)
        )
    return jobs


def _judge_here(
    jobs: list[Job],
    catalog: Catalog,
    done: Callable[[str, ErrorInfo | None], None],
    board: ProgressBoard,
    warm_profiler: bool = True,
) -> None:
    """The local path: one evaluation after another, each operator's worker spawned while the
    two evaluations before it run (`warm_profiler`: and its profiler set up there, evaluate.standby)."""
    from atrex_mcp.evaluate import Standby, evaluate

    by_op: dict[str, list[Job]] = {}
    for job in jobs:
        by_op.setdefault(job.op, []).append(job)
    with Standby(warm_profiler=warm_profiler) as standby:
        for op, op_jobs in by_op.items():
            try:
                for job in op_jobs:
                    board.stage(op, f"{job.kind}: starting")
                    result = evaluate(
                        job.request,
                        catalog,
                        standby=standby,
                        progress=lambda message, fraction, kind=job.kind, op=op: board.stage(
                            op, f"{kind}: {message} ({fraction:.0%})"
                        ),
                    )
                    result.knowledge = job.knowledge
                    write_json_atomic(job.path, result)
            except AtrexError as exc:
                done(op, exc.info)
                continue
            done(op, None)


def _verdict(path: Path) -> str:
    from atrex_mcp.evaluate import EvalResult

    result = EvalResult.model_validate_json(path.read_text())
    if result.partial is not None:
        judged = [s for s in result.shapes if s.judged]
        correct, not_run = sum(s.correct for s in judged), len(result.shapes) - len(judged)
        return f"stopped ({result.partial}): {correct}/{len(judged)} shapes correct, {not_run} not run"
    if not result.compiled:
        return f"did not compile ({result.compile_error.category if result.compile_error else 'unknown'})"
    correct = sum(s.correct for s in result.shapes)
    timed = [s for s in result.shapes if s.time_ms is not None]
    note = (
        "" if timed else f", {result.shapes[0].timing_note}" if result.shapes and result.shapes[0].timing_note else ""
    )
    return f"{correct}/{len(result.shapes)} shapes correct{note}"
