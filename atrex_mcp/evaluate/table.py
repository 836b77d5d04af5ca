"""The paper's main table from many per-operator evaluation results.

A *run* is a directory of EvalResult JSON files (one per operator; baselines carry
`candidate` = eager / torch-compile). Every rate is operator-balanced — computed per
operator first, then averaged over operators — so an operator with 56 shapes weighs no more
than one with 3:

* compile rate: share of operators whose candidate compiled;
* correctness: mean over operators of the share of shapes correct; fully correct: share of
  operators with every shape correct;
* DSL adoption: share of operators whose correct shapes spend at least half their device
  time in the candidate's own DSL kernels (median DSL share ≥ 0.5); an operator without a
  correct, profiled shape does not adopt; null (n/a) when no shape of the run was profiled
  (CPU);
* S_agg: Σ w_i·S_i over the catalog's operators with normalised weights (missing = 0);
* S_floor_i / S_floor_agg, only when a launch floor T_floor is given: the same with
  S_floor_j = max(T_SOL, T_floor)/T_cand (`scoring.floor_aware_score`), beside S, never instead;
* vs torch.compile / vs eager: per operator the median over shapes of T_baseline / T_cand
  (both timed, candidate correct), then the median over operators.

A partial result (its evaluation stopped at a deadline or a cancel, or a benchmark run sampled
its shapes) counts only the shapes it judged; its not-run shapes are counted apart, never as failures, it is never
fully correct,
and the markdown marks its S_i — and S_agg, which it enters — with † and says what is missing. An
operator with no shape judged at all is in none of the rates (its compiled/correct read "—") and
counts 0 in S_agg, as a missing operator does.

Shape scores are recomputed from the recorded times against the requested hardware profile,
so one set of results can be scored against several profiles of the same accelerator (never
against another accelerator's: see scoring.profile_mismatch).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import scoring
from atrex_mcp.evaluate.models import EvalResult
from atrex_mcp.problemset.catalog import Catalog

DSL_DOMINANT = 0.5


class OperatorRow(BaseModel):
    """One operator of one run."""

    op: str = Field(description="Operator.")
    compiled: bool | None = Field(
        description="The candidate compiled; null when no shape was judged (nothing ran, e.g. a selection left the "
        "operator out)."
    )
    shapes: int = Field(description="Shapes judged (every requested shape, unless the result is partial).")
    not_run: int = Field(
        default=0, description="Shapes the evaluation stopped before judging (deadline or cancel); in no other figure."
    )
    partial: str | None = Field(
        default=None,
        description="Why the result is partial ('deadline' / 'cancelled' / 'selection'): S_i covers the judged "
        "shapes only. null: complete.",
    )
    correct: int = Field(description="Shapes correct.")
    correctness: float | None = Field(description="Share of judged shapes correct; null when none was judged.")
    score: float | None = Field(description="S_i against the requested profile.")
    score_floor: float | None = Field(
        default=None,
        description="S_floor_i: median S_floor_j = max(T_SOL, T_floor)/T_cand over correct shapes; null without a "
        "floor.",
    )
    dsl_share: float | None = Field(description="Median DSL share over correct, profiled shapes.")
    dsl_dominant: bool = Field(description="dsl_share ≥ 0.5.")
    vs_torch_compile: float | None = Field(description="Median over shapes of T_torch.compile / T_cand.")
    vs_eager: float | None = Field(description="Median over shapes of T_eager / T_cand.")
    faster_than_sol: int = Field(
        description="Shapes with S > 1, not clipped: against a datasheet profile an evaluation error; against a "
        "measured profile, a ceiling the kernel beat (the profile understates the hardware)."
    )


class RunRow(BaseModel):
    """One run: one row of the main table."""

    run: str = Field(description="Run name (its directory, or the baseline's name).")
    operators: int = Field(description="Operators with a result.")
    compile_rate: float = Field(description="Operator-balanced compile rate.")
    correctness: float = Field(description="Operator-balanced share of shapes correct.")
    fully_correct: float = Field(description="Share of operators with every shape correct.")
    dsl_adoption: float | None = Field(
        description="Share of operators whose correct kernels are DSL-dominant; null when nothing was profiled."
    )
    s_agg: float | None = Field(description="Σ w_i·S_i over the catalog's operators (missing operators count 0).")
    s_floor_agg: float | None = Field(default=None, description="Σ w_i·S_floor_i, as S_agg; null without a floor.")
    missing_operators: list[str] = Field(
        description="Catalog operators without a result or without a judged shape (count 0 in S_agg)."
    )
    partial_operators: list[str] = Field(
        default_factory=list,
        description="Operators whose result is partial: their S_i, and so S_agg, cover judged shapes only.",
    )
    vs_torch_compile: float | None = Field(
        description="Median over operators of the per-operator T_torch.compile/T_cand."
    )
    vs_eager: float | None = Field(description="Median over operators of the per-operator T_eager/T_cand.")
    failures: dict[str, int] = Field(description="Shape failures by 'stage/category'.")
    per_operator: list[OperatorRow] = Field(description="Per-operator detail.")


class MainTable(BaseModel):
    hardware: str = Field(description="Profile the scores are computed against.")
    floor_ms: float | None = Field(
        default=None, description="T_floor of the S_floor columns (measurements/launch_floor.py); null: not reported."
    )
    rows: list[RunRow] = Field(description="One row per run.")


def load_results(directory: Path) -> list[EvalResult]:
    """Every EvalResult JSON in a directory (other JSON files are ignored)."""
    if not directory.is_dir():
        raise AtrexError("input", "not_a_directory", f"{directory} is not a directory of evaluation results.")
    results = []
    for path in sorted(directory.glob("*.json")):
        try:
            results.append(EvalResult.model_validate(json.loads(path.read_text())))
        except (json.JSONDecodeError, ValidationError, UnicodeDecodeError):
            continue
    return results


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratios(result: EvalResult, baseline: EvalResult | None) -> float | None:
    if baseline is None:
        return None
    times = {s.id: s.time_ms for s in baseline.shapes if s.time_ms}
    return _median([times[s.id] / s.time_ms for s in result.shapes if s.correct and s.time_ms and s.id in times])


def operator_row(
    result: EvalResult,
    catalog: Catalog | None,
    profile: str,
    eager: EvalResult | None,
    compiled: EvalResult | None,
    floor_ms: float | None = None,
) -> OperatorRow:
    reason = "no catalog" if catalog is None else scoring.profile_mismatch(profile, result.device.name)
    if reason or catalog is None:
        roofline = scoring.Roofline(None, profile, reason)
    else:
        roofline = scoring.Roofline.load(catalog, result.op, profile)
    pairs, aware, above = [], [], 0
    judged = [s for s in result.shapes if s.judged]
    not_run = len(result.shapes) - len(judged)
    for s in judged:
        t_sol = roofline.t_sol_ms(s.id)[0] if s.correct else None
        score = scoring.shape_score(t_sol, s.time_ms)
        above += bool(score and score > 1.0)
        pairs.append((s.correct, score))
        if floor_ms is not None:
            aware.append((s.correct, scoring.floor_aware_score(t_sol, floor_ms, s.time_ms)))
    s_i, _ = scoring.judged_operator_score(pairs, not_run)
    s_floor_i = scoring.judged_operator_score(aware, not_run)[0] if floor_ms is not None else None
    shares = [s.dsl_share for s in judged if s.correct and s.dsl_share is not None]
    dsl = _median(shares)
    correct = sum(s.correct for s in judged)
    ran = bool(judged) or result.compile_error is not None
    return OperatorRow(
        op=result.op,
        compiled=result.compiled if ran else None,
        shapes=len(judged),
        correct=correct,
        correctness=correct / len(judged) if judged else (0.0 if ran else None),
        score=s_i,
        score_floor=s_floor_i,
        not_run=not_run,
        partial=result.partial,
        dsl_share=dsl,
        dsl_dominant=dsl is not None and dsl >= DSL_DOMINANT,
        vs_torch_compile=_ratios(result, compiled),
        vs_eager=_ratios(result, eager),
        faster_than_sol=above,
    )


def run_row(
    name: str,
    results: list[EvalResult],
    catalog: Catalog | None,
    profile: str,
    baselines: dict[tuple[str, str], EvalResult],
    floor_ms: float | None = None,
) -> RunRow:
    rows = [
        operator_row(
            r, catalog, profile, baselines.get((r.op, "eager")), baselines.get((r.op, "torch-compile")), floor_ms
        )
        for r in sorted(results, key=lambda r: r.op)
    ]
    ran = [r for r in rows if r.compiled is not None]  # the rates cover operators with something judged
    n = len(ran) or 1
    failures = Counter(f"{s.stage}/{s.category}" for r in results for s in r.shapes if s.category and s.judged)
    profiled = any(s.dsl_share is not None for r in results for s in r.shapes)
    s_agg, s_floor_agg, missing = None, None, list[str]()
    if catalog is not None:
        s_agg, missing = scoring.aggregate({row.op: row.score for row in ran}, catalog.weights())
        if floor_ms is not None:
            s_floor_agg, _ = scoring.aggregate({row.op: row.score_floor for row in ran}, catalog.weights())
    return RunRow(
        run=name,
        operators=len(rows),
        compile_rate=sum(bool(r.compiled) for r in ran) / n,
        correctness=sum(r.correctness or 0.0 for r in ran) / n,  # set on every row that ran
        fully_correct=sum(r.correct == r.shapes and r.shapes > 0 and not r.not_run for r in ran) / n,
        dsl_adoption=sum(r.dsl_dominant for r in ran) / n if profiled else None,
        s_agg=s_agg,
        s_floor_agg=s_floor_agg,
        missing_operators=missing,
        partial_operators=[r.op for r in rows if r.partial],
        vs_torch_compile=_median([r.vs_torch_compile for r in rows if r.vs_torch_compile is not None]),
        vs_eager=_median([r.vs_eager for r in rows if r.vs_eager is not None]),
        failures=dict(sorted(failures.items())),
        per_operator=rows,
    )


def main_table(
    run_dirs: list[Path],
    catalog: Catalog | None,
    profile: str,
    baseline_dirs: Sequence[Path] = (),
    floor_ms: float | None = None,
) -> MainTable:
    """Rows for each run's candidates, plus a row per baseline found among the results; with
    `floor_ms`, the S_floor columns beside S."""
    baselines: dict[tuple[str, str], EvalResult] = {}
    runs: list[tuple[str, list[EvalResult]]] = []
    for d in [*run_dirs, *baseline_dirs]:
        results = load_results(d)
        for r in results:
            if r.candidate != "candidate":
                baselines[(r.op, r.candidate)] = r
        if d in run_dirs:
            runs.append((d.name, [r for r in results if r.candidate == "candidate"]))
    rows = [run_row(name, results, catalog, profile, baselines, floor_ms) for name, results in runs if results]
    for kind in ("eager", "torch-compile"):
        found = [r for (op, k), r in baselines.items() if k == kind]
        if found:
            rows.append(run_row(kind, found, catalog, profile, baselines, floor_ms))
    return MainTable(hardware=profile, floor_ms=floor_ms, rows=rows)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _partial(flagged: bool) -> str:
    return " †" if flagged else ""


def render_markdown(table: MainTable) -> str:
    """The table as markdown; partial results (see the module docstring) marked with †."""
    floor = table.floor_ms is not None
    lines = [
        f"Scores against the `{table.hardware}` profile. Rates are operator-balanced."
        + (f" S_floor uses T_floor = {table.floor_ms * 1e3:.2f} µs." if table.floor_ms is not None else ""),
        "",
        "| run | ops | compile | correct | fully correct | DSL adoption | S_agg |"
        + (" S_floor_agg |" if floor else "")
        + " vs torch.compile | vs eager |",
        "|---|---|---|---|---|---|---|" + ("---|" if floor else "") + "---|---|",
    ]
    for r in table.rows:
        lines.append(
            f"| {r.run} | {r.operators} | {r.compile_rate:.0%} | {r.correctness:.0%} | {r.fully_correct:.0%} | "
            f"{_rate(r.dsl_adoption)} | {_fmt(r.s_agg, 4)}{_partial(bool(r.partial_operators))} |"
            + (f" {_fmt(r.s_floor_agg, 4)}{_partial(bool(r.partial_operators))} |" if floor else "")
            + f" {_fmt(r.vs_torch_compile, 2)} | {_fmt(r.vs_eager, 2)} |"
        )
    for r in table.rows:
        if r.partial_operators:
            lines += [
                "",
                f"† {r.run}: S_agg includes partial results ({', '.join(r.partial_operators)}): "
                "their S_i covers only the shapes judged.",
            ]
    for r in table.rows:
        lines += [
            "",
            f"### {r.run}",
            "",
            "| operator | compiled | correct | S_i |"
            + (" S_floor_i |" if floor else "")
            + " DSL share | vs torch.compile | vs eager | S>1 |",
            "|---|---|---|---|" + ("---|" if floor else "") + "---|---|---|---|",
        ]
        for o in r.per_operator:
            lines.append(
                f"| {o.op} | {'—' if o.compiled is None else 'yes' if o.compiled else 'no'} | {o.correct}/{o.shapes}"
                + (f" (+{o.not_run} not run)" if o.not_run else "")
                + f" | {_fmt(o.score, 4)}{_partial(bool(o.partial))} |"
                + (f" {_fmt(o.score_floor, 4)}{_partial(bool(o.partial))} |" if floor else "")
                + f" {_fmt(o.dsl_share, 2)} | {_fmt(o.vs_torch_compile, 2)} | {_fmt(o.vs_eager, 2)} | "
                f"{o.faster_than_sol} |"
            )
        if r.failures:
            lines += ["", "| failure (stage/category) | shapes |", "|---|---|"]
            lines += [f"| {k} | {v} |" for k, v in r.failures.items()]
        if r.missing_operators:
            lines += [
                "",
                f"Operators without a result or a judged shape (0 in S_agg): {', '.join(r.missing_operators)}",
            ]
        partial = [o for o in r.per_operator if o.partial]
        if partial:
            lines += [
                "",
                "† Partial results — S_i over the judged shapes only: "
                + "; ".join(
                    f"{o.op} ({o.partial}: {o.not_run} of {o.shapes + o.not_run} shapes not run)" for o in partial
                ),
            ]
    return "\n".join(lines) + "\n"
