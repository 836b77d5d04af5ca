#!/usr/bin/env python3
"""What limits each operator's S on the H200, measured?

    python3 measurements/operator_limits.py RUN_DIR [MORE_INPUTS…] [--floor FLOOR.json] [--out PREFIX]

For every shape a candidate set was timed on, this places the time against the shape's roofline
(W and Q from the problem's hidden roofline.json, the peaks of the `h200` and `h200-measured`
profiles) and against the measured launch floor (measurements/launch_floor.py), and names what
limits it. Per operator it sets S beside the S a kernel at the launch floor could reach, and ranks
operators by what is left on the table: weight × (S ceiling − S).

Inputs, in the order given (a later input replaces an earlier one's operators):
  * a `bench run` directory (run.json and eval/<op>.json, what `bench eval` writes), or a
    directory of evaluation results (its eval/ folder, or any folder of EvalResult JSON);
    --candidate eager / torch-compile reads the timed references instead (eval/baselines/, or a
    measurements/baselines.py folder);
  * one EvalResult JSON (`atrex-mcp eval --json` output);
  * a `bench report` report.json: S per operator only, no per-shape limits;
  * a measurements/wiki_kernels_gpu.py JSON (per kernel, time and correctness per shape).

Per shape (every figure is of the shape's median time T):
  S_j        T_SOL / T on `h200` (the benchmark's scoring profile), unclipped.
  S ceiling  min(1, T_SOL / T_floor): what a correct kernel timed at one launch would score.
  TFLOP/s, TB/s  the roofline's counted work W and bytes Q over T — useful work, not hardware
             counters: a kernel that reads a tensor twice moves more than Q.
  fractions  of the `h200` datasheet peaks and of the `h200-measured` peaks (cuBLAS matmul rates,
             the best measured HBM stream; where the measured profile has no peak for a dtype path
             the datasheet's is used).
  limit      the first that holds:
    compute  ≥ COMPUTE_SHARE (50 %) of the dtype's measured tensor peak (784 TFLOP/s bf16,
             1345 fp8): the tensor cores are busy; what is left is the last tiling/pipelining gain.
    memory   ≥ MEMORY_SHARE (60 %) of the measured HBM rate (4.63 TB/s): the stream is near what
             any kernel moved on this H200 (hbm_mix reached 92–98 % of it with plain copies).
             (When both hold, the larger share of its threshold names the class.)
    launch   T ≤ LAUNCH_FACTOR (2) × T_floor: one or a few launches' fixed cost is the time; the
             S ceiling binds and only fewer launches (fusion) move it.
    host     the timing loop found the host outran its spin on most calls (host_bound): host work
             (Python, many small launches) is the time, whatever the kernels do; fewer launches per
             call (fusion, CUDA graphs) move it.
    kernel   none of these: latency, occupancy, tiling, grid shape or extra launches —
             headroom inside the kernel.
  Shapes that failed a stage are `failed`, correct shapes without a time `untimed`; neither counts
  in the class shares (S_i, as the evaluator computes it, is over correct shapes only).

Per operator: S (the evaluator's rule: median of min(S_j, 1) over correct shapes, 0 when none),
S ceiling (median of the per-shape ceilings over every scored shape), weight, weight × headroom,
shapes per class, median fractions and T/T_floor, the worst shapes (furthest below their ceiling),
and a one-line statement. An operator absent from every input counts S = 0.

Outputs PREFIX.md and PREFIX.json (default measurements/results/operator_limits/<date>_<gpu>),
with the date of the newest source, the GPU, the sources and the floor used.

This script reads the problems' hidden files: it is a developer's measurement record and lives
outside atrex_mcp/, which nothing on the server side imports.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from atrex_mcp.errors import AtrexError  # noqa: E402
from atrex_mcp.evaluate.models import EvalResult  # noqa: E402
from atrex_mcp.evaluate.scoring import aggregate_shape_score, operator_score  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog, HiddenProblem  # noqa: E402
from atrex_mcp.problemset.hardware import load_profile  # noqa: E402
from atrex_mcp.problemset.roofline import shape_roofline  # noqa: E402

SCORING_PROFILE = "h200"
MEASURED_PROFILE = "h200-measured"
LAUNCH_FACTOR = 2.0
MEMORY_SHARE = 0.60
COMPUTE_SHARE = 0.50
WORST_SHAPES = 3
TOP = 5
FLOOR_DIR = ROOT / "measurements" / "results" / "launch_floor"
RESULTS_DIR = ROOT / "measurements" / "results" / "operator_limits"

Limit = Literal["launch", "host", "memory", "compute", "kernel", "failed", "untimed", "no_roofline"]
TIMED_CLASSES: tuple[Limit, ...] = ("kernel", "launch", "host", "memory", "compute")


@dataclass(frozen=True)
class Thresholds:
    """Where a shape's limit class changes (see the module docstring)."""

    launch_factor: float = LAUNCH_FACTOR
    memory_share: float = MEMORY_SHARE
    compute_share: float = COMPUTE_SHARE


# -- inputs -------------------------------------------------------------------------------------


@dataclass
class MeasuredShape:
    """One shape as an input recorded it."""

    id: str
    correct: bool
    time_ms: float | None
    failure: str = ""  # stage/category of a shape a stage rejected (correct or not)
    launches: int | None = None  # kernel launches of one profiled forward
    host_bound: bool | None = None


@dataclass
class MeasuredOperator:
    """One operator as an input recorded it: per-shape results, or only its S."""

    op: str
    source: str
    shapes: list[MeasuredShape] | None = None
    reported_s: float | None = None
    note: str = ""


@dataclass
class Source:
    path: str
    kind: str
    date: str | None = None
    gpu: str | None = None
    operators: dict[str, MeasuredOperator] = field(default_factory=dict)
    catalog_roots: list[str] = field(default_factory=list)


def _input_error(path: Path, message: str, hint: str) -> AtrexError:
    return AtrexError("input", "bad_limits_input", f"{path}: {message}", hint)


def _from_eval_result(result: EvalResult, source: str) -> MeasuredOperator:
    shapes = [
        MeasuredShape(
            id=s.id,
            correct=s.correct,
            time_ms=s.time_ms,
            failure=f"{s.stage}/{s.category}" if s.stage or not s.correct else "",
            launches=sum(k.count for k in s.kernels) if s.kernels else None,
            host_bound=s.timing.host_bound if s.timing else None,
        )
        for s in result.shapes
        if s.judged
    ]
    note = (
        "" if result.compiled else f"did not compile ({result.compile_error.category if result.compile_error else '?'})"
    )
    return MeasuredOperator(result.op, source, shapes, result.operator_score, note)


def _results_source(path: Path, results: list[EvalResult], kind: str, candidate: str = "candidate") -> Source:
    candidates = [r for r in results if r.candidate == candidate]
    if not candidates:
        found = sorted({r.candidate for r in results})
        raise _input_error(
            path,
            f"holds no {candidate!r} evaluation (found: {', '.join(found) or 'none'}).",
            "Run `atrex-mcp bench eval RUN_DIR` first, pass the run directory itself, or pick --candidate.",
        )
    src = Source(str(path), kind, max(r.started_at for r in candidates)[:10], candidates[0].device.name or None)
    for r in candidates:
        src.operators[r.op] = _from_eval_result(r, str(path))
    return src


def _from_run_dir(path: Path, candidate: str) -> Source:
    from atrex_mcp.agentbench.evaluation import EvalError
    from atrex_mcp.agentbench.layout import RunLayout, RunStore
    from atrex_mcp.evaluate.table import load_results

    layout = RunLayout(path)
    config = RunStore(layout).load_config()
    if not layout.eval_dir.is_dir():
        raise _input_error(path, "has no eval/ folder.", f"Run `atrex-mcp bench eval {path}` first.")
    results = load_results(layout.baselines_dir if candidate != "candidate" else layout.eval_dir)
    src = _results_source(path, [r for r in results if r.op in config.ops], "bench run", candidate)
    src.catalog_roots = list(config.problems)
    for error_file in layout.eval_dir.glob("*.error.json") if candidate == "candidate" else []:
        try:
            failed = EvalError.model_validate_json(error_file.read_text())
        except (ValidationError, ValueError):
            continue
        if failed.op not in src.operators:
            src.operators[failed.op] = MeasuredOperator(
                failed.op, str(path), [], 0.0, f"evaluation failed: {failed.error.category}"
            )
    return src


def _from_report(path: Path, data: dict[str, Any], run: str | None) -> Source:
    runs = data.get("runs") or []
    if run is not None:
        runs = [r for r in runs if r.get("row", {}).get("run") == run]
    if len(runs) != 1:
        names = ", ".join(str(r.get("row", {}).get("run")) for r in data.get("runs") or [])
        raise _input_error(path, f"holds {len(runs)} matching runs ({names or 'none'}).", "Pick one with --run NAME.")
    block = runs[0]
    gpu = (block.get("device") or "").removeprefix("cuda: ") or None
    src = Source(str(path), "bench report", str(data.get("generated_at", ""))[:10] or None, gpu)
    for line in block.get("operators", []):
        if line.get("evaluated"):
            note = "S only: a report has no per-shape results (pass the run directory for limits)"
            src.operators[line["op"]] = MeasuredOperator(line["op"], str(path), None, line.get("score"), note)
    return src


def _from_wiki_kernels(path: Path, data: dict[str, Any]) -> Source:
    meta = data.get("meta", {})
    src = Source(str(path), "wiki_kernels_gpu.py", meta.get("date"), meta.get("gpu"))
    for entry in data.get("kernels", {}).values():
        shapes = [
            MeasuredShape(
                id=str(s["id"]),
                correct=bool(s.get("correct")),
                time_ms=s.get("time_ms"),
                failure=f"{s.get('stage')}/{s.get('category')}" if s.get("stage") or not s.get("correct") else "",
            )
            for s in entry.get("shapes", [])
        ]
        note = "" if entry.get("compiled", True) else "did not compile"
        src.operators[entry["operator"]] = MeasuredOperator(
            entry["operator"], str(path), shapes, entry.get("operator_score"), note
        )
    return src


def load_source(path: Path, run: str | None = None, candidate: str = "candidate") -> Source:
    """Whatever `path` is (run directory, results folder, report.json, wiki-kernels JSON, one
    EvalResult), as per-operator measurements; an AtrexError naming the fix when it is none."""
    from atrex_mcp.evaluate.table import load_results

    if path.is_dir():
        if (path / "run.json").is_file():
            return _from_run_dir(path, candidate)
        return _results_source(path, load_results(path), "evaluation results", candidate)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise _input_error(
            path, "does not exist.", "Pass a bench run directory, a report.json or a JSON result."
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _input_error(path, f"is not readable JSON ({type(exc).__name__}).", "Pass the file unchanged.") from None
    try:
        if isinstance(data, dict) and "runs" in data and "generated_at" in data:
            return _from_report(path, data, run)
        if isinstance(data, dict) and "kernels" in data and "meta" in data:
            return _from_wiki_kernels(path, data)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise _input_error(
            path, f"is damaged ({type(exc).__name__}: {exc}).", "Pass the file its script wrote, unchanged."
        ) from None
    try:
        return _results_source(path, [EvalResult.model_validate(data)], "evaluation result", candidate)
    except ValidationError:
        raise _input_error(
            path,
            "is neither a bench run, a report.json, a wiki_kernels_gpu.py JSON nor an evaluation result.",
            "Pass RUN_DIR (after `bench eval`), RUN_DIR/report/report.json or a measurements result JSON.",
        ) from None


def load_floor(path: Path | None) -> tuple[float, str]:
    """(T_floor in ms, the file it came from): `path`, or the newest `launch_floor.py measure` output."""
    candidates = [path] if path else sorted(FLOOR_DIR.glob("*.json"), reverse=True)
    for candidate in candidates:
        try:
            data = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        floor = data.get("floor_ms") if isinstance(data, dict) else None
        measured_here = path is not None or "cases" in data  # not a `score` summary that copied the floor
        if isinstance(floor, int | float) and floor > 0 and measured_here:
            shown = candidate.resolve()
            return float(floor), str(shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown)
    raise AtrexError(
        "input",
        "no_launch_floor",
        f"No launch floor measured in {path or FLOOR_DIR}.",
        "Measure one on the GPU: python3 measurements/launch_floor.py measure --out FLOOR.json, then pass --floor.",
    )


# -- analysis -----------------------------------------------------------------------------------


class ShapeLimit(BaseModel):
    """One shape: its time against the roofline and the launch floor, and what limits it."""

    model_config = ConfigDict(validate_assignment=True)

    id: str = Field(description="Shape id.")
    limit: Limit = Field(description="What limits the shape (module docstring): launch, memory, compute, kernel…")
    bound: str | None = Field(default=None, description="The roofline's binding term on h200 (memory or compute).")
    dtypes: list[str] = Field(default_factory=list, description="Dtype paths the shape's work is counted under.")
    correct: bool = Field(description="The evaluator's correctness verdict (S_i is over correct shapes).")
    failure: str = Field(default="", description="stage/category of a failed shape.")
    time_ms: float | None = Field(default=None, description="Median time T.")
    t_sol_ms: float | None = Field(default=None, description="T_SOL on h200.")
    t_sol_measured_ms: float | None = Field(default=None, description="T_SOL on h200-measured.")
    s: float | None = Field(default=None, description="S_j = T_SOL / T on h200, unclipped.")
    s_ceiling: float | None = Field(
        default=None, description="min(1, T_SOL / T_floor): S of a kernel timed at one launch."
    )
    s_ceiling_measured: float | None = Field(
        default=None,
        description="min(1, T_SOL / max(T_SOL on h200-measured, T_floor)): S of a kernel at the measured peaks.",
    )
    tflops: float | None = Field(default=None, description="Counted work W / T, TFLOP/s.")
    tbps: float | None = Field(default=None, description="Counted bytes Q / T, TB/s.")
    hbm_fraction: float | None = Field(default=None, description="Q / T over the h200 datasheet HBM bandwidth.")
    hbm_fraction_measured: float | None = Field(default=None, description="Q / T over the measured HBM rate.")
    peak_fraction: float | None = Field(default=None, description="(Σ W_d / P_d) / T on the h200 datasheet peaks.")
    peak_fraction_measured: float | None = Field(default=None, description="The same on the measured peaks.")
    t_over_floor: float | None = Field(default=None, description="T / T_floor.")
    launches: int | None = Field(default=None, description="Kernel launches in one profiled forward.")
    host_bound: bool | None = Field(default=None, description="The timing loop's host_bound flag.")


class OperatorLimits(BaseModel):
    """One operator: S against its ceiling, its weight, and its shapes' limits."""

    op: str = Field(description="Operator (problem) name.")
    weight: float = Field(description="Normalised importance weight (sum 1 over the catalog).")
    source: str | None = Field(description="Input this operator's figures came from; null: none.")
    scored_shapes: int = Field(description="Scored shapes of the operator in the catalog.")
    measured_shapes: int | None = Field(description="Shapes the input judged; null: no per-shape data.")
    correct_shapes: int | None = Field(description="Of those, correct.")
    s: float = Field(description="S_i (0 when absent or no shape correct).")
    s_reported: float | None = Field(description="S_i as the input itself stated it, when it did.")
    s_ceiling: float = Field(description="Median over scored shapes of min(1, T_SOL / T_floor).")
    s_ceiling_measured: float = Field(
        description="Median over scored shapes of the ceiling at the measured peaks (cuBLAS rates, best HBM stream)."
    )
    headroom: float = Field(description="max(0, S ceiling − S).")
    weighted_headroom: float = Field(description="weight × headroom: the S_agg left on this operator.")
    classes: dict[str, int] = Field(description="Shapes per limit class.")
    median_hbm_fraction_measured: float | None = Field(description="Over correct timed shapes.")
    median_peak_fraction_measured: float | None = Field(description="Over correct timed shapes.")
    median_tbps: float | None = Field(default=None, description="Counted bytes / T, TB/s, over correct timed shapes.")
    median_tflops: float | None = Field(default=None, description="Counted work / T, TFLOP/s, over them.")
    median_t_over_floor: float | None = Field(default=None, description="T / T_floor over them.")
    median_launches: float | None = Field(default=None, description="Launches per profiled forward over them.")
    worst: list[str] = Field(description="Ids of the shapes furthest below their ceiling.")
    statement: str = Field(description="One measured line: what limits the operator.")
    note: str = Field(default="", description="Coverage, failures, or why figures are missing.")
    shapes: list[ShapeLimit] = Field(default_factory=list, description="The measured shapes, in catalog order.")


class LimitsReport(BaseModel):
    """The whole answer, as written to PREFIX.json."""

    question: str = Field(
        default="What limits each operator's S on the H200, measured?", description="This record's question."
    )
    date: str = Field(description="Date of the newest source (the measurement), YYYY-MM-DD.")
    written_at: str = Field(description="When this analysis ran, UTC.")
    gpu: str | None = Field(description="GPU the sources were measured on.")
    sources: list[str] = Field(description="Inputs, in the order applied.")
    floor_ms: float = Field(description="T_floor: one launch through the evaluator's timing loop.")
    floor_source: str = Field(description="The launch-floor JSON T_floor was read from.")
    profiles: dict[str, dict[str, Any]] = Field(description="Peaks used: HBM bytes/s and FLOP/s per dtype path.")
    thresholds: dict[str, float] = Field(description="launch_factor, memory_share, compute_share as applied.")
    s_agg: float = Field(description="Σ w_i S_i over every catalog operator (absent = 0).")
    s_agg_ceiling: float = Field(description="Σ w_i × S ceiling_i.")
    s_agg_ceiling_measured: float = Field(description="Σ w_i × S ceiling_i at the measured peaks.")
    top: list[str] = Field(description="Operators ranked first by weighted headroom.")
    operators: list[OperatorLimits] = Field(description="Every catalog operator, ranked by weighted headroom.")


def classify(
    hbm_measured: float, peak_measured: float, t_over_floor: float, host_bound: bool | None, th: Thresholds
) -> Limit:
    """The limit class of a correct, timed shape (thresholds in the module docstring)."""
    memory, compute = hbm_measured / th.memory_share, peak_measured / th.compute_share
    if max(memory, compute) >= 1.0:
        return "compute" if compute > memory else "memory"
    if t_over_floor <= th.launch_factor:
        return "launch"
    return "host" if host_bound else "kernel"


@dataclass(frozen=True)
class Roof:
    """One shape's roofline terms in seconds, on the datasheet and on the measured peaks."""

    bound: str
    dtypes: list[str]
    flops: int
    bytes: int
    compute_s: float
    memory_s: float
    compute_measured_s: float
    memory_measured_s: float

    @property
    def t_sol_ms(self) -> float:
        return 1e3 * max(self.compute_s, self.memory_s)

    @property
    def t_sol_measured_ms(self) -> float:
        return 1e3 * max(self.compute_measured_s, self.memory_measured_s)


def roof(hidden: HiddenProblem, shape_id: str) -> Roof | None:
    """W and Q of the shape (atrex_mcp.problemset.roofline, the one source) on both profiles; None
    without a roofline entry. A dtype path the measured profile lacks takes the datasheet peak."""
    datasheet, measured = load_profile(SCORING_PROFILE), load_profile(MEASURED_PROFILE)
    try:
        point = shape_roofline(hidden, shape_id, datasheet)
    except AtrexError:
        return None
    work = {p: w for p, w in point.flops.items() if w}
    return Roof(
        bound=point.bound,
        dtypes=sorted(work),
        flops=sum(work.values()),
        bytes=point.total_bytes,
        compute_s=point.compute_ms / 1e3,
        memory_s=point.memory_ms / 1e3,
        compute_measured_s=sum(w / (measured.peaks[p].value or datasheet.peak(p)) for p, w in work.items()),
        memory_measured_s=point.total_bytes / measured.hbm_bandwidth.value,  # type: ignore[operator]
    )


def shape_limit(
    shape_id: str, r: Roof | None, shape: MeasuredShape | None, floor_ms: float, th: Thresholds
) -> ShapeLimit:
    """The figures of one scored shape (`shape` None: not measured, its ceilings only)."""
    out = ShapeLimit(id=shape_id, limit="untimed", correct=bool(shape and shape.correct))
    if shape is not None:
        out.failure, out.time_ms, out.launches, out.host_bound = (
            shape.failure,
            shape.time_ms,
            shape.launches,
            shape.host_bound,
        )
        if shape.failure or not shape.correct:
            out.limit = "failed"
    if r is None:
        out.limit = out.limit if out.limit == "failed" else "no_roofline"
        return out
    out.bound, out.dtypes, out.t_sol_ms, out.t_sol_measured_ms = r.bound, r.dtypes, r.t_sol_ms, r.t_sol_measured_ms
    out.s_ceiling = min(1.0, r.t_sol_ms / floor_ms)
    out.s_ceiling_measured = min(1.0, r.t_sol_ms / max(r.t_sol_measured_ms, floor_ms))
    t = out.time_ms
    if shape is None or out.limit == "failed" or t is None or t <= 0:
        return out
    t_s = t / 1e3
    out.s = r.t_sol_ms / t
    out.tflops, out.tbps = r.flops / t_s / 1e12, r.bytes / t_s / 1e12
    out.hbm_fraction, out.hbm_fraction_measured = r.memory_s / t_s, r.memory_measured_s / t_s
    out.peak_fraction, out.peak_fraction_measured = r.compute_s / t_s, r.compute_measured_s / t_s
    out.t_over_floor = t / floor_ms
    out.limit = classify(out.hbm_fraction_measured, out.peak_fraction_measured, out.t_over_floor, shape.host_bound, th)
    return out


def _median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _pct_range(values: Sequence[float]) -> str:
    lo, hi = 100 * min(values), 100 * max(values)
    return f"{lo:.0f} %" if f"{lo:.0f}" == f"{hi:.0f}" else f"{lo:.0f}–{hi:.0f} %"


def _times(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def _x_range(values: Sequence[float]) -> str:
    lo, hi = _times(min(values)), _times(max(values))
    return f"{lo}×" if lo == hi else f"{lo}–{hi}×"


def _class_phrase(limit: Limit, shapes: list[ShapeLimit]) -> str:
    """How the shapes of one class sit, in measured figures."""
    if limit == "launch":
        return f"launch-bound at {_x_range([s.t_over_floor or 0 for s in shapes])} T_floor"
    if limit == "host":
        launches = sorted(s.launches for s in shapes if s.launches is not None)
        span = (
            "" if not launches else str(launches[0]) if launches[0] == launches[-1] else f"{launches[0]}–{launches[-1]}"
        )
        counted = f", {span} launches per forward" if span else ""
        floors = _x_range([s.t_over_floor or 0 for s in shapes])
        return f"host-bound (host launch work is the time: {floors} T_floor{counted})"
    if limit == "memory":
        return f"at {_pct_range([s.hbm_fraction_measured or 0 for s in shapes])} of the measured HBM rate"
    if limit == "compute":
        dtypes = "/".join(sorted({d for s in shapes for d in s.dtypes}))
        fractions = [s.peak_fraction_measured or 0 for s in shapes]
        return f"compute-bound at {_pct_range(fractions)} of the measured {dtypes} peak"
    parts = []
    mem = [s for s in shapes if s.bound == "memory"]
    comp = [s for s in shapes if s.bound == "compute"]
    if mem:
        fractions = [s.hbm_fraction_measured or 0 for s in mem]
        parts.append(f"{len(mem)} memory-regime at {_pct_range(fractions)} of the measured HBM rate")
    if comp:
        dtypes = "/".join(sorted({d for s in comp for d in s.dtypes}))
        fractions = [s.peak_fraction_measured or 0 for s in comp]
        parts.append(f"{len(comp)} compute-regime at {_pct_range(fractions)} of the measured {dtypes} peak")
    return "kernel-bound (" + "; ".join(parts) + ")"


def _gap(s: ShapeLimit) -> float:
    """How far a timed shape is below its ceiling (clipped S, as it enters S_i)."""
    return (s.s_ceiling or 0.0) - aggregate_shape_score(s.s or 0.0)


def _worst(shapes: list[ShapeLimit]) -> list[ShapeLimit]:
    """The timed shapes furthest below their ceiling."""
    timed = [s for s in shapes if s.s is not None and s.s_ceiling is not None]
    return sorted(timed, key=lambda s: (-_gap(s), s.s))[:WORST_SHAPES]


def _shape_brief(s: ShapeLimit) -> str:
    resource = (
        f"{100 * (s.hbm_fraction_measured or 0):.0f} % HBM"
        if s.bound == "memory"
        else f"{100 * (s.peak_fraction_measured or 0):.0f} % peak"
    )
    return f"shape {s.id} (S {s.s:.3f} of {s.s_ceiling:.2f}, {s.time_ms * 1e3:.1f} µs, {resource})"  # type: ignore[operator]


def statement(o: OperatorLimits) -> str:
    """One line: the operator's standing and what limits its shapes, in measured figures."""
    head = f"{o.op} (w {o.weight:.3f}, S {o.s:.3f} of ceiling {o.s_ceiling:.3f}, w×headroom {o.weighted_headroom:.4f})"
    if o.source is None:
        return f"{head}: no result in the inputs (counts 0)."
    if o.measured_shapes is None:
        return f"{head}: no per-shape results in the input, limits not measured."
    timed = [s for s in o.shapes if s.limit in TIMED_CLASSES]
    n = o.measured_shapes
    parts = []
    for limit in sorted(TIMED_CLASSES, key=lambda c: -o.classes.get(c, 0)):
        members = [s for s in timed if s.limit == limit]
        if members:
            parts.append(f"{len(members)} of {n} {_class_phrase(limit, members)}")
    for limit in ("failed", "untimed"):
        if o.classes.get(limit):
            parts.append(f"{o.classes[limit]} {limit}")
    worst = _worst(o.shapes)
    if worst:
        parts.append("worst " + _shape_brief(worst[0]))
    coverage = f" [{n} of {o.scored_shapes} shapes measured]" if n < o.scored_shapes else ""
    return f"{head}: " + "; ".join(parts or ["nothing timed"]) + f".{coverage}"


def operator_limits(
    catalog: Catalog, op: str, measured: MeasuredOperator | None, floor_ms: float, th: Thresholds
) -> OperatorLimits:
    hidden = catalog.hidden(op)
    scored = [s.id for s in catalog.visible(op).scored_shapes]
    by_id = {s.id: s for s in (measured.shapes or [])} if measured else {}
    unknown = sorted(set(by_id) - set(scored))
    roofs = {sid: roof(hidden, sid) for sid in scored}
    shapes = [shape_limit(sid, roofs[sid], by_id[sid], floor_ms, th) for sid in scored if sid in by_id]
    unmeasured = [shape_limit(sid, roofs[sid], None, floor_ms, th) for sid in scored]
    s_ceiling = _median(x.s_ceiling for x in unmeasured) or 0.0
    notes = [measured.note] if measured and measured.note else []
    if unknown:
        notes.append(f"shapes {', '.join(unknown)} are not scored shapes of the catalog: left out")
    if measured is None:
        s: float = 0.0
    elif measured.shapes is None:
        s = measured.reported_s or 0.0
    else:
        computed, why = operator_score((x.correct, x.s) for x in shapes)
        s = computed if computed is not None else 0.0
        if why:
            notes.append(why)
        if measured.reported_s is not None and abs(measured.reported_s - s) > 1e-6:
            notes.append(f"the input states S {measured.reported_s:.4f} (another profile, or over other shapes)")
    good = [x for x in shapes if x.limit in TIMED_CLASSES]
    out = OperatorLimits(
        op=op,
        weight=hidden.weight,
        source=measured.source if measured else None,
        scored_shapes=len(scored),
        measured_shapes=None if measured is None or measured.shapes is None else len(shapes),
        correct_shapes=None if measured is None or measured.shapes is None else sum(x.correct for x in shapes),
        s=s,
        s_reported=measured.reported_s if measured else None,
        s_ceiling=s_ceiling,
        s_ceiling_measured=_median(x.s_ceiling_measured for x in unmeasured) or 0.0,
        headroom=max(0.0, s_ceiling - s),
        weighted_headroom=hidden.weight * max(0.0, s_ceiling - s),
        classes=dict(Counter(x.limit for x in shapes)),
        median_hbm_fraction_measured=_median(x.hbm_fraction_measured for x in good),
        median_peak_fraction_measured=_median(x.peak_fraction_measured for x in good),
        median_tbps=_median(x.tbps for x in good),
        median_tflops=_median(x.tflops for x in good),
        median_t_over_floor=_median(x.t_over_floor for x in good),
        median_launches=_median(x.launches for x in good),
        worst=[x.id for x in _worst(shapes)],
        statement="",
        note="; ".join(notes),
        shapes=shapes,
    )
    out.statement = statement(out)
    return out


def analyse(
    catalog: Catalog,
    sources: list[Source],
    floor_ms: float,
    floor_source: str,
    th: Thresholds = Thresholds(),
    top: int = TOP,
) -> LimitsReport:
    """Every catalog operator ranked by weight × (S ceiling − S), later sources replacing earlier ones."""
    merged: dict[str, MeasuredOperator] = {}
    for src in sources:
        merged.update(src.operators)
    strays = sorted(set(merged) - set(catalog.names()))
    if strays:
        raise AtrexError(
            "input",
            "unknown_operator",
            f"The inputs name operators the problem catalog lacks: {', '.join(strays)}.",
            "Use the problem set the run was judged on (the run's problems folder).",
        )
    rows = [operator_limits(catalog, op, merged.get(op), floor_ms, th) for op in catalog.names()]
    rows.sort(key=lambda o: (-o.weighted_headroom, o.op))
    profiles = {
        name: {"hbm_bytes_per_s": p.hbm_bandwidth.value, "flops_per_s": {k: v.value for k, v in p.peaks.items()}}
        for name, p in ((n, load_profile(n)) for n in (SCORING_PROFILE, MEASURED_PROFILE))
    }
    dates = [s.date for s in sources if s.date]
    return LimitsReport(
        date=max(dates) if dates else datetime.now(UTC).date().isoformat(),
        written_at=datetime.now(UTC).isoformat(timespec="seconds"),
        gpu=next((s.gpu for s in reversed(sources) if s.gpu), None),
        sources=[f"{s.path} ({s.kind}, {s.date or 'undated'}, {len(s.operators)} operators)" for s in sources],
        floor_ms=floor_ms,
        floor_source=floor_source,
        profiles=profiles,
        thresholds={
            "launch_factor": th.launch_factor,
            "memory_share": th.memory_share,
            "compute_share": th.compute_share,
        },
        s_agg=sum(o.weight * o.s for o in rows),
        s_agg_ceiling=sum(o.weight * o.s_ceiling for o in rows),
        s_agg_ceiling_measured=sum(o.weight * o.s_ceiling_measured for o in rows),
        top=[o.op for o in rows[:top]],
        operators=rows,
    )


# -- output -------------------------------------------------------------------------------------


def _f(value: float | None, fmt: str = ".3f", scale: float = 1.0) -> str:
    return "—" if value is None else format(value * scale, fmt)


def render_markdown(report: LimitsReport, top: int = TOP) -> str:
    th = report.thresholds
    lines = [
        f"# {report.question}",
        "",
        f"Measured {report.date} on {report.gpu or 'an unnamed GPU'}; analysed {report.written_at} by "
        "`measurements/operator_limits.py`.",
        "",
        "Sources (a later one replaces an earlier one's operators):",
        *[f"* {s}" for s in report.sources],
        "",
        f"T_floor = {report.floor_ms * 1e3:.2f} µs (`{report.floor_source}`). Limit classes, first that holds: "
        f"**compute** ≥ {th['compute_share']:.0%} of the dtype's measured peak; **memory** ≥ {th['memory_share']:.0%} "
        f"of the measured HBM rate ({report.profiles[MEASURED_PROFILE]['hbm_bytes_per_s'] / 1e12:.2f} TB/s); "
        f"**launch** T ≤ {th['launch_factor']:g} × T_floor; **host** the host outran the timing loop (host_bound); "
        "**kernel** otherwise. Rates are the "
        "roofline's counted W and Q over T (useful work, not hardware counters).",
        "",
        f"S_agg over every catalog operator (absent = 0): **{report.s_agg:.4f}**; with every operator at its "
        f"S ceiling (each shape at max(T_SOL, T_floor)): {report.s_agg_ceiling:.4f}; at the measured peaks (each "
        f"shape at max(T_SOL on h200-measured, T_floor)): {report.s_agg_ceiling_measured:.4f}.",
        "",
        f"## Top {top} by weight × (S ceiling − S)",
        "",
        *[f"{i}. {o.statement}" for i, o in enumerate(report.operators[:top], 1)],
        "",
        "## Every operator",
        "",
        "| # | operator | weight | S | S ceiling | ceiling (measured peaks) | w × headroom | shapes | kernel | launch "
        "| host | memory | compute | failed | median HBM % | median peak % | median T/T_floor | source |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, o in enumerate(report.operators, 1):
        c = o.classes
        shapes = "—" if o.measured_shapes is None else f"{o.measured_shapes}/{o.scored_shapes}"
        lines.append(
            f"| {i} | {o.op} | {o.weight:.4f} | {o.s:.3f} | {o.s_ceiling:.3f} | {o.s_ceiling_measured:.3f} "
            f"| {o.weighted_headroom:.4f} | {shapes} "
            f"| {c.get('kernel', 0)} | {c.get('launch', 0)} | {c.get('host', 0)} | {c.get('memory', 0)} "
            f"| {c.get('compute', 0)} | {c.get('failed', 0)} | {_f(o.median_hbm_fraction_measured, '.0f', 100)} "
            f"| {_f(o.median_peak_fraction_measured, '.0f', 100)} | {_f(o.median_t_over_floor, '.1f')} "
            f"| {Path(o.source).name if o.source else '—'} |"
        )
    notes = [f"* {o.op}: {o.note}" for o in report.operators if o.note]
    if notes:
        lines += ["", "Notes:", *notes]
    lines += ["", "## Per shape", "", "HBM and peak %: of the h200 datasheet / of h200-measured."]
    for o in report.operators:
        if not o.shapes:
            continue
        lines += [
            "",
            f"### {o.op}",
            "",
            o.statement,
            "",
            "| shape | limit | bound | T µs | T_SOL µs | S | ceiling | TFLOP/s | TB/s | HBM % | peak % | T/T_floor "
            "| launches |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in o.shapes:
            limit = s.limit if s.limit != "failed" else f"failed ({s.failure})"
            lines.append(
                f"| {s.id} | {limit} | {s.bound or '—'} | {_f(s.time_ms, '.1f', 1e3)} | {_f(s.t_sol_ms, '.1f', 1e3)} "
                f"| {_f(s.s)} | {_f(s.s_ceiling, '.2f')} | {_f(s.tflops, '.1f')} | {_f(s.tbps, '.2f')} "
                f"| {_f(s.hbm_fraction, '.0f', 100)} / {_f(s.hbm_fraction_measured, '.0f', 100)} "
                f"| {_f(s.peak_fraction, '.0f', 100)} / {_f(s.peak_fraction_measured, '.0f', 100)} "
                f"| {_f(s.t_over_floor, '.1f')} | {s.launches if s.launches is not None else '—'} |"
            )
    return "\n".join(lines) + "\n"


def _gpu_slug(gpu: str | None) -> str:
    if not gpu:
        return "gpu"
    match = re.search(r"\b([a-z]\d{2,4}[a-z]?)\b", gpu.lower())
    return match.group(1) if match else re.sub(r"[^a-z0-9]+", "_", gpu.lower()).strip("_")


def _catalog(sources: list[Source]) -> Catalog:
    """The problem set the run was judged on when its folders exist here, else the shipped one."""
    roots = [Path(r) for s in sources for r in s.catalog_roots]
    return Catalog(roots) if roots and all(r.is_dir() for r in roots) else Catalog()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="run dir, results folder, report.json, wiki-kernels JSON")
    parser.add_argument("--floor", type=Path, help="launch-floor JSON (default: the newest in results/launch_floor)")
    parser.add_argument("--out", type=Path, help="prefix of PREFIX.md / PREFIX.json (default: results/…/<date>_<gpu>)")
    parser.add_argument("--run", help="which run of a report.json that holds several")
    parser.add_argument(
        "--candidate",
        default="candidate",
        choices=["candidate", "eager", "torch-compile"],
        help="which evaluations of a run or results folder (eager / torch-compile: the timed references)",
    )
    parser.add_argument("--top", type=int, default=TOP, help="operators the summary states (default 5)")
    parser.add_argument("--launch-factor", type=float, default=LAUNCH_FACTOR)
    parser.add_argument("--memory-share", type=float, default=MEMORY_SHARE)
    parser.add_argument("--compute-share", type=float, default=COMPUTE_SHARE)
    args = parser.parse_args(argv)
    try:
        sources = [load_source(p, args.run, args.candidate) for p in args.inputs]
        floor_ms, floor_source = load_floor(args.floor)
        th = Thresholds(args.launch_factor, args.memory_share, args.compute_share)
        report = analyse(_catalog(sources), sources, floor_ms, floor_source, th, args.top)
    except AtrexError as exc:
        print(f"operator_limits: {exc.shell_text()}", file=sys.stderr)
        return 2
    prefix = args.out or RESULTS_DIR / f"{report.date}_{_gpu_slug(report.gpu)}"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    md = Path(f"{prefix}.md")
    md.write_text(render_markdown(report, args.top))
    Path(f"{prefix}.json").write_text(report.model_dump_json(indent=1) + "\n")
    print(f"S_agg {report.s_agg:.4f} (ceiling {report.s_agg_ceiling:.4f}); top {args.top} by weight × headroom:")
    for i, o in enumerate(report.operators[: args.top], 1):
        print(f"{i}. {o.statement}")
    print(f"wrote {md} and {prefix}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
