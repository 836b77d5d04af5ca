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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from pydantic import BaseModel, Field, ValidationError

from atrex_mcp.bench.layout import RunLayout, RunStore, write_json_atomic
from atrex_mcp.bench.progress import ProgressBoard
from atrex_mcp.catalog import Catalog
from atrex_mcp.errors import AtrexError, ErrorInfo

SETTINGS_FILE = "settings.json"
BASELINES = ("eager", "torch-compile")


class EvalSettings(BaseModel):
    """How submissions are judged (stored in eval/settings.json; a change needs --force)."""

    shapes: str = Field(default="all", description="all (every scored shape), smoke, or comma-separated shape ids.")
    seeds: int = Field(default=5, ge=1, le=64, description="Fresh random input seeds per shape.")
    timeout_s: float = Field(default=120.0, gt=0, description="Wall-clock limit per shape and stage.")
    baselines: Literal["auto", "yes", "no"] = Field(default="auto", description="Time the eager and torch.compile references (auto: with a GPU).")


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

    def line(self) -> str:
        parts = [f"{len(self.evaluated)} evaluated", f"{len(self.skipped)} already evaluated",
                 f"{len(self.not_submitted)} without a submission", f"{len(self.failed)} failed to evaluate"]
        return ", ".join(parts)


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


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
    ids = [s.strip() for s in spec.split(",") if s.strip()]
    for shape_id in ids:
        problem.shape(shape_id)
    return ids


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
        if previous is not None and previous != wanted:
            raise AtrexError("input", "eval_settings_differ",
                             f"{layout.eval_dir} holds results made with other settings ({previous.model_dump()}).",
                             "Repeat the earlier options, or pass --force to evaluate everything again with the new ones.")
    layout.eval_dir.mkdir(parents=True, exist_ok=True)
    layout.eval_dir.chmod(0o700)
    write_json_atomic(path, wanted)


def evaluate_run(run_dir: Path, settings: EvalSettings, *, force: bool = False, stream: TextIO | None = None,
                 live: bool | None = None) -> EvalSummary:
    """Evaluate every submission of the run in `run_dir` that has no current result."""
    from atrex_mcp.evaluate import EvalRequest, Standby, evaluate

    layout = RunLayout(run_dir)
    store = RunStore(layout)
    config = store.load_config()
    catalog = Catalog([Path(p) for p in config.problems])
    baselines = settings.baselines == "yes" or (settings.baselines == "auto" and _has_gpu())
    wanted = StoredSettings(shapes=settings.shapes, seeds=settings.seeds, timeout_s=settings.timeout_s, hardware=config.hardware,
                            dsl=config.dsl, baselines=baselines)
    _settings(layout, wanted, force)
    summary = EvalSummary()
    board = ProgressBoard(f"bench eval {config.name}", len(config.ops), stream=stream, live=live)
    board.begin()
    with Standby() as standby:  # each operator's worker is spawned while the one before it is evaluated
        for op in config.ops:
            state = store.load_state(op)
            submission = state.submission
            if state.status != "done" or submission is None or submission.outcome != "submitted" or submission.artifact is None:
                summary.not_submitted.append(op)
                board.finish(op, "no submission to evaluate" if state.status == "done" else f"not run yet ({state.status})")
                continue
            source = (layout.root / submission.artifact).read_text()
            sha = hashlib.sha256(source.encode()).hexdigest()
            try:
                shapes = _shape_ids(settings.shapes, catalog, op)
                jobs = [("candidate", result_path(layout, op), sha)]
                if baselines:
                    jobs += [(kind, baseline_path(layout, op, kind), None) for kind in BASELINES]
                ran = False
                for kind, path, expected_sha in jobs:
                    stored_sha, exists = _stored(path)
                    if exists and not force and (expected_sha is None or stored_sha == expected_sha):
                        continue
                    board.stage(op, f"{kind}: starting")
                    request = EvalRequest(op=op, source=source if kind == "candidate" else None,
                                          baseline=None if kind == "candidate" else kind, shapes=shapes, seeds=settings.seeds,
                                          hardware=config.hardware, dsl=config.dsl, timing=True, measure_dsl=kind == "candidate",
                                          timeout_s=settings.timeout_s)
                    result = evaluate(request, catalog, standby=standby,
                                      progress=lambda message, fraction, kind=kind: board.stage(op, f"{kind}: {message} ({fraction:.0%})"))
                    result.knowledge = config.knowledge if kind == "candidate" else None
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(result.model_dump_json(indent=1))
                    ran = True
                error_path(layout, op).unlink(missing_ok=True)
            except AtrexError as exc:
                write_json_atomic(error_path(layout, op), EvalError(op=op, error=exc.info))
                summary.failed.append(op)
                board.finish(op, f"evaluation failed: {exc}")
                continue
            (summary.evaluated if ran else summary.skipped).append(op)
            board.finish(op, _verdict(result_path(layout, op)) if ran else "already evaluated")
    board.close(summary.line())
    return summary


def _verdict(path: Path) -> str:
    from atrex_mcp.evaluate import EvalResult

    result = EvalResult.model_validate_json(path.read_text())
    if not result.compiled:
        return f"did not compile ({result.compile_error.category if result.compile_error else 'unknown'})"
    correct = sum(s.correct for s in result.shapes)
    timed = [s for s in result.shapes if s.time_ms is not None]
    note = "" if timed else f", {result.shapes[0].timing_note}" if result.shapes and result.shapes[0].timing_note else ""
    return f"{correct}/{len(result.shapes)} shapes correct{note}"
