"""`bench report`: the paper's tables from one or more evaluated runs.

The per-run aggregation is the evaluator's (`atrex_mcp.evaluate.table.run_row`, scores from
`atrex_mcp.evaluate.scoring`), applied over every operator the run was given, not only those
with a result: an operator without an evaluated submission (no package, budget reached,
contract refused, not evaluated yet) counts as failed in every rate and as S_i = 0.

Nothing is filled in that was not measured: without GPU timing S, S_agg and the baseline ratios
are null ("n/a" in the tables, a plain statement instead of a plot in the figures); without a
profiled forward DSL adoption is null rather than 0.

* S: the mean of S_i over the run's operators (operator-balanced, unweighted).
* S_agg: Σ w_i·S_i with the production weights normalised over the run's operators; for a run
  over the whole catalog this is the paper's S_agg.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from atrex_mcp.agentbench.evaluation import SETTINGS_FILE, EvalError, StoredSettings
from atrex_mcp.agentbench.layout import RunLayout, RunStore, now_iso
from atrex_mcp.agentbench.models import OpState, RunConfig
from atrex_mcp.candidate_contract import RULES as CONTRACT_RULES
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import scoring
from atrex_mcp.evaluate.models import EvalResult
from atrex_mcp.evaluate.table import OperatorRow, load_results, run_row
from atrex_mcp.evaluate.taxonomy import STAGES
from atrex_mcp.problemset.catalog import Catalog, HiddenProblem
from atrex_mcp.problemset.roofline import shape_roofline


class OperatorLine(BaseModel):
    """One operator of one run: what the agent did and what the evaluator found."""

    op: str
    weight: float | None = Field(description="Production weight, normalised over the catalog.")
    regime: str | None = Field(
        description="memory or compute bound on the report's profile (mixed when shapes differ); null when unknown."
    )
    agent: str = Field(
        description="What the agent run ended with: submitted, no submission, contract failed, error, not run."
    )
    timed_out: bool = Field(description="The agent was stopped at its budget.")
    elapsed_s: float | None = Field(description="Agent wall time.")
    input_tokens: int | None = Field(description="Uncached input tokens the CLI reported.")
    output_tokens: int | None = Field(description="Output tokens the CLI reported.")
    cost_usd: float | None = Field(description="Cost the CLI reported.")
    evaluated: bool = Field(description="The trusted evaluation has a result for this operator.")
    compiled: bool | None = None
    shapes: int | None = None
    correct: int | None = None
    dsl_share: float | None = None
    score: float | None = Field(default=None, description="S_i against the report's profile.")
    vs_torch_compile: float | None = None
    vs_eager: float | None = None
    faster_than_sol: int = Field(
        default=0,
        description="Shapes with S > 1: evaluation errors against a datasheet profile; against a measured one, a "
        "ceiling the kernel beat.",
    )
    failure: str | None = Field(
        default=None, description="Where the operator stopped (stage/category); null when every shape was correct."
    )


class MainRow(BaseModel):
    """One row of the main table."""

    run: str
    agent: str
    condition: str | None
    knowledge: str | None = Field(
        default=None, description="Knowledge condition of the run (none, general, full); null for a reference baseline."
    )
    model: str | None
    operators: int = Field(description="Operators the run was given.")
    submitted: int = Field(description="Operators with a collected submission.")
    evaluated: int = Field(description="Operators with an evaluation result.")
    compile_rate: float
    correctness: float = Field(description="Operator-balanced share of shapes correct.")
    fully_correct: float = Field(description="Share of operators with every evaluated shape correct.")
    dsl_adoption: float | None = Field(
        description="Share of operators whose correct kernels are DSL-dominant; null when nothing was profiled."
    )
    s: float | None = Field(description="Mean S_i over the run's operators; null when not timed.")
    s_agg: float | None = Field(description="Weighted S over the run's operators; null when not timed.")
    vs_torch_compile: float | None
    vs_eager: float | None
    s_note: str | None = Field(default=None, description="Why S is n/a, when it is.")
    timed: bool = Field(description="At least one shape was timed on a GPU.")
    dsl_measured: bool = Field(description="At least one shape had its device time attributed.")
    notes: list[str] = Field(default_factory=list)


class FailureRow(BaseModel):
    failure: str = Field(description="stage/category, or agent/…, contract/…, eval/… before the evaluator.")
    operators: dict[str, int] = Field(description="Per run: operators that stopped here.")
    shapes: dict[str, int] = Field(description="Per run: evaluated shapes that failed here.")


class RunReport(BaseModel):
    row: MainRow
    operators: list[OperatorLine]
    run_dir: str
    hardware: str
    evaluated_shapes: str | None = Field(description="Which shapes bench eval judged (all, smoke, ids), when known.")
    device: str | None = Field(description="Where the evaluation ran.")
    isolation_warnings: list[str]


class BenchReport(BaseModel):
    title: str
    generated_at: str
    hardware: str = Field(description="Profile every S is computed against.")
    runs: list[RunReport]
    baselines: list[MainRow] = Field(description="The eager / torch.compile references where they were timed.")
    failures: list[FailureRow]
    notes: list[str]

    @property
    def any_timed(self) -> bool:
        return any(r.row.timed for r in self.runs)


@dataclass
class LoadedRun:
    layout: RunLayout
    config: RunConfig
    states: dict[str, OpState]
    catalog: Catalog
    results: dict[str, EvalResult] = field(default_factory=dict)
    errors: dict[str, EvalError] = field(default_factory=dict)
    baselines: dict[tuple[str, str], EvalResult] = field(default_factory=dict)
    settings: StoredSettings | None = None


def load_run(run_dir: Path) -> LoadedRun:
    layout = RunLayout(run_dir)
    store = RunStore(layout)
    config = store.load_config()
    run = LoadedRun(layout, config, store.states(config.ops), Catalog([Path(p) for p in config.problems]))
    if layout.eval_dir.is_dir():
        run.results = {
            r.op: r for r in load_results(layout.eval_dir) if r.candidate == "candidate" and r.op in config.ops
        }
        for path in layout.eval_dir.glob("*.error.json"):
            try:
                error = EvalError.model_validate_json(path.read_text())
            except (ValidationError, ValueError):
                continue
            run.errors[error.op] = error
        try:
            run.settings = StoredSettings.model_validate_json((layout.eval_dir / SETTINGS_FILE).read_text())
        except (OSError, ValidationError, ValueError):
            run.settings = None
    if layout.baselines_dir.is_dir():
        run.baselines = {
            (r.op, r.candidate): r for r in load_results(layout.baselines_dir) if r.candidate != "candidate"
        }
    return run


def _regime(catalog: Catalog, op: str, profile: str, shape_ids: list[str]) -> str | None:
    try:
        hidden = catalog.hidden(op)
    except (AtrexError, OSError, ValueError, KeyError):
        return None
    ids = [i for i in shape_ids if hidden.roofline_entry(i)] or [s.id for s in catalog.visible(op).scored_shapes]
    bounds = {_bound(hidden, i, profile) for i in ids} - {None}
    return bounds.pop() if len(bounds) == 1 else ("mixed" if bounds else None)


def _bound(hidden: HiddenProblem, shape_id: str, profile: str) -> str | None:
    try:
        return shape_roofline(hidden, shape_id, profile).bound
    except AtrexError:  # no W/Q for the shape, or the profile lacks a peak its work needs
        return None


def _failure(state: OpState, result: EvalResult | None, error: EvalError | None) -> str | None:
    """Where an operator stopped: the first gate it did not pass."""
    if state.status == "error":
        return "agent/error"
    if state.status != "done":
        return "agent/not_run"
    submission = state.submission
    if submission is None or submission.outcome == "no_submission":
        return "agent/budget_reached" if state.timed_out else "agent/no_submission"
    if submission.outcome == "contract_failed":  # violations read `rule (line N): …`
        rule = submission.violations[0].split(" ")[0].rstrip(":") if submission.violations else ""
        return f"contract/{rule if rule in CONTRACT_RULES else 'violation'}"
    if result is None:
        return f"eval/{error.error.category}" if error else "eval/not_evaluated"
    if not result.compiled:
        return f"compile/{result.compile_error.category}" if result.compile_error else "compile/unknown"
    failed = Counter(f"{s.stage}/{s.category}" for s in result.shapes if not s.correct)
    if not failed:
        return None
    order = {stage: i for i, stage in enumerate(STAGES)}
    return min(failed, key=lambda k: (-failed[k], order.get(k.split("/")[0], len(order)), k))


def _agent_outcome(state: OpState) -> str:
    if state.status == "error":
        return "error"
    if state.status != "done":
        return "not run"
    return state.submission.outcome.replace("_", " ") if state.submission else "no submission"


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _timing_reason(results: list[EvalResult]) -> str:
    notes = [s.timing_note for r in results for s in r.shapes if s.timing_note]
    return Counter(notes).most_common(1)[0][0] if notes else "no shape was timed"


def run_report(run: LoadedRun, name: str, profile: str, baselines: dict[tuple[str, str], EvalResult]) -> RunReport:
    config, ops = run.config, run.config.ops
    results = [run.results[op] for op in ops if op in run.results]
    row = run_row(name, results, run.catalog, profile, baselines)
    by_op: dict[str, OperatorRow] = {o.op: o for o in row.per_operator}
    weights = run.catalog.weights()
    n, k = len(ops), len(results)
    # run_row's rates cover operators with a judged shape; every other operator the run was given
    # (no result, or an evaluation that judged nothing) counts as failed here
    share = sum(o.compiled is not None for o in row.per_operator) / n if n else 0.0
    timed = any(s.time_ms is not None for r in results for s in r.shapes)
    dsl_measured = any(s.dsl_share is not None for r in results for s in r.shapes)
    notes: list[str] = []

    lines = []
    for op in ops:
        state, result, o = run.states[op], run.results.get(op), by_op.get(op)
        usage = state.usage
        lines.append(
            OperatorLine(
                op=op,
                weight=weights.get(op),
                regime=_regime(run.catalog, op, profile, [s.id for s in result.shapes] if result else []),
                agent=_agent_outcome(state),
                timed_out=state.timed_out,
                elapsed_s=state.elapsed_s,
                input_tokens=usage.input_tokens if usage else None,
                output_tokens=usage.output_tokens if usage else None,
                cost_usd=usage.cost_usd if usage else None,
                evaluated=result is not None,
                compiled=o.compiled if o else None,
                shapes=o.shapes if o else None,
                correct=o.correct if o else None,
                dsl_share=o.dsl_share if o else None,
                score=o.score if o else None,
                vs_torch_compile=o.vs_torch_compile if o else None,
                vs_eager=o.vs_eager if o else None,
                faster_than_sol=o.faster_than_sol if o else 0,
                failure=_failure(state, result, run.errors.get(op)),
            )
        )

    submitted = sum(1 for s in run.states.values() if s.submission and s.submission.outcome == "submitted")
    if submitted > k:
        notes.append(
            f"{submitted - k} submission(s) not evaluated yet, counted as failed: run `atrex-mcp bench eval "
            f"{run.layout.root}`."
        )
    s = s_agg = s_note = None
    if not results:
        s_note = "nothing evaluated yet"
    elif not timed:
        s_note = f"{_timing_reason(results)} (correctness only)"
    else:
        scores = {op: (by_op[op].score if op in by_op else 0.0) for op in ops}
        unscored = sorted(op for op, v in scores.items() if v is None)
        if unscored:
            mismatch = next((m for r in results if (m := scoring.profile_mismatch(profile, r.device.name))), "")
            s_note = (
                f"correct shapes without a score for {', '.join(unscored)} "
                f"({mismatch or f'not timed, or no roofline for {profile}'})"
            )
        else:
            s = _mean([v for v in scores.values() if v is not None])
            s_agg, _ = scoring.aggregate(scores, {op: weights.get(op, 0.0) for op in ops})
    if s_note:
        notes.append(f"S, S_agg and the baseline ratios are n/a: {s_note}.")
    if results and not dsl_measured:
        notes.append("DSL adoption is n/a: no forward was profiled (needs a GPU).")
    if any(line.faster_than_sol for line in lines):
        notes.append(
            "Some shapes ran faster than the roofline bound (S > 1), kept unclipped — see the per-operator table: "
            "against a datasheet profile an evaluation error, against a measured profile a ceiling the kernel beat."
        )

    main = MainRow(
        run=name,
        agent=config.agent.kind
        if config.agent.kind != "command"
        else " ".join(Path(a).name for a in config.agent.command[:2]),
        condition=config.condition,
        knowledge=config.knowledge,
        model=config.agent.model,
        operators=n,
        submitted=submitted,
        evaluated=k,
        compile_rate=row.compile_rate * share,
        correctness=row.correctness * share,
        fully_correct=row.fully_correct * share,
        dsl_adoption=row.dsl_adoption * share if dsl_measured and row.dsl_adoption is not None else None,
        s=s,
        s_agg=s_agg,
        vs_torch_compile=row.vs_torch_compile if timed else None,
        vs_eager=row.vs_eager if timed else None,
        s_note=s_note,
        timed=timed,
        dsl_measured=dsl_measured,
        notes=notes,
    )
    device = next((f"{r.device.kind}: {r.device.name}" for r in results), None)
    return RunReport(
        row=main,
        operators=lines,
        run_dir=str(run.layout.root),
        hardware=profile,
        evaluated_shapes=run.settings.shapes if run.settings else None,
        device=device,
        isolation_warnings=config.isolation.warnings,
    )


def _baseline_rows(runs: list[LoadedRun], profile: str, baselines: dict[tuple[str, str], EvalResult]) -> list[MainRow]:
    rows = []
    catalog = runs[0].catalog
    for kind in ("eager", "torch-compile"):
        found = [r for (op, k), r in sorted(baselines.items()) if k == kind]
        if not found:
            continue
        row = run_row(kind, found, catalog, profile, baselines)
        timed = any(s.time_ms is not None for r in found for s in r.shapes)
        scores = {o.op: o.score for o in row.per_operator}
        complete = timed and all(v is not None for v in scores.values())
        rows.append(
            MainRow(
                run=kind,
                agent="reference",
                condition=None,
                model=None,
                operators=len(found),
                submitted=len(found),
                evaluated=len(found),
                compile_rate=row.compile_rate,
                correctness=row.correctness,
                fully_correct=row.fully_correct,
                dsl_adoption=None,
                s=_mean([v for v in scores.values() if v is not None]) if complete else None,
                s_agg=scoring.aggregate(scores, {op: catalog.weights().get(op, 0.0) for op in scores})[0]
                if complete
                else None,
                vs_torch_compile=None,
                vs_eager=None,
                s_note=None if complete else "not timed",
                timed=timed,
                dsl_measured=False,
            )
        )
    return rows


def _unique_names(runs: list[LoadedRun]) -> list[str]:
    names, seen = list[str](), Counter[str]()
    for run in runs:
        seen[run.config.name] += 1
        names.append(run.config.name if seen[run.config.name] == 1 else f"{run.config.name}#{seen[run.config.name]}")
    return names


def build_report(
    run_dirs: list[Path], *, hardware: str | None = None, title: str = "atrex-mcp benchmark report"
) -> BenchReport:
    runs = [load_run(d) for d in run_dirs]
    profile = hardware or runs[0].config.hardware
    baselines: dict[tuple[str, str], EvalResult] = {}
    for run in runs:
        for key, value in run.baselines.items():
            baselines.setdefault(key, value)
    names = _unique_names(runs)
    reports = [run_report(run, name, profile, baselines) for run, name in zip(runs, names)]

    failures: dict[str, FailureRow] = {}
    for run, name, report in zip(runs, names, reports):
        for line in report.operators:
            if line.failure:
                entry = failures.setdefault(line.failure, FailureRow(failure=line.failure, operators={}, shapes={}))
                entry.operators[name] = entry.operators.get(name, 0) + 1
        for result in run.results.values():
            for shape in result.shapes:
                if not shape.correct and shape.category:
                    failure = f"{shape.stage}/{shape.category}"
                    entry = failures.setdefault(failure, FailureRow(failure=failure, operators={}, shapes={}))
                    entry.shapes[name] = entry.shapes.get(name, 0) + 1
    notes = [
        "Rates are operator-balanced over every operator a run was given; an operator without an evaluated "
        "submission counts as failed.",
        "S_i = median over correct shapes of T_SOL/T_kernel (0 when no shape is correct); S = mean S_i; "
        "S_agg = Σ w_i·S_i with production weights normalised over the run's operators.",
        "n/a = not measured (no GPU timing, or no profiled forward); never estimated.",
    ]
    return BenchReport(
        title=title,
        generated_at=now_iso(),
        hardware=profile,
        runs=reports,
        baselines=_baseline_rows(runs, profile, baselines),
        failures=sorted(failures.values(), key=lambda f: f.failure),
        notes=notes,
    )
