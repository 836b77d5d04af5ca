#!/usr/bin/env python3
"""Eager and torch.compile baselines through the real evaluator, on any subset of operators
and shapes, within a time budget; the main table against the `h200` (datasheet) and
`h200-measured` profiles; the evaluator's throughput split; every shape near the roofline.

    python3 measurements/baselines.py plan [--baseline both] [--select representative --budget-s 300]
                                   [--calibrate DIR…] [--gpus N]
    python3 measurements/baselines.py run --baseline eager --out DIR [--ops a,b] [--shapes all|ID,…]
                                   [--select representative|spread [--per-op K]] [--shapes-from DIR] [--budget-s S]
                                   [--gpus N] [--seeds 5] [--timeout 120]
                                   [--no-timing [--lanes-per-gpu K]]
    python3 measurements/baselines.py table DIR… [--out PREFIX]
    # runs of several device calls, one result per operator:
    python3 measurements/baselines.py combine DIR… --out DIR [--exclude OP:ID,… --why TEXT]

`run` writes one EvalResult JSON per operator (`<op>.<baseline>.json`, as `atrex-mcp eval
--out` names them, so `atrex-mcp score --baselines DIR` reads them), `run.json` (conditions,
selection, predicted and actual seconds, schedule, shapes not run with the reason, throughput
split, shapes with S > 0.9) and `table_<profile>.{md,json}`. Shapes the budget leaves out are
listed in run.json's `not_run`, never silently dropped. `--shapes-from DIR` evaluates exactly
the shapes another run judged, of --ops when given (it overrides --shapes/--select). Without a GPU every
shape is evaluated for correctness and reported "not timed: no GPU" (a dry run).
`--no-timing` makes a compile probe: compile and correctness only, several lanes per GPU
allowed (`--lanes-per-gpu`; torch.compile runs single-threaded in the worker, so lanes on a
many-core host barely slow each other). A probe's failures (a compile past the limit) are
verdicts; a shape it passes still needs a timed run, and `--skip-judged` will not skip it.
`combine` joins runs of the same baseline made in separate device calls: per operator and
shape the latest judged result (a shape judged in no run stays not run, once; one that only
passed a probe says so).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.eval_cost import (  # noqa: E402
    BASELINES,
    CostModel,
    fit_to_budget,
    jobs_for,
    load_reference_times,
    load_shape_traffic,
    predicted_seconds,
    representative_order,
    spread_order,
)
from measurements.multi_gpu import BUDGET_REASON  # noqa: E402

PROFILES = ("h200", "h200-measured")
NEAR_ROOFLINE = 0.9
LEFT_OUT = "left out of the selection for the budget"
JUDGED_EARLIER = "judged in an earlier run (--skip-judged)"
# Fixed parts of the full issue besides the baselines (seconds on the device machine).
LAUNCH_FLOOR_S, TIMING_ACCURACY_S, MACHINE_START_S = 20.0, 90.0, 90.0


def _catalog(problems: Path | None):
    from atrex_mcp.problemset.catalog import Catalog

    return Catalog(problems) if problems else Catalog()


def _load_results(dirs: Iterable[Path]) -> list:
    from atrex_mcp.evaluate.table import load_results

    return [r for d in dirs for r in load_results(d)]


def calibration_results(dirs: Iterable[Path]) -> list:
    """Results of single evaluate() calls: a run's parts/ when it has them (merged results sum
    several worker starts), else the run's own files."""
    return _load_results((d / "parts") if (d / "parts").is_dir() else d for d in dirs)


def _ops(args: argparse.Namespace, catalog) -> list[str]:
    """The operators --ops names (all of the catalog's without it)."""
    return catalog.names() if args.ops in (None, "all") else [o.strip() for o in args.ops.split(",") if o.strip()]


def _shape_list(spec: str, ops: Sequence[str]) -> dict[str, list[str]]:
    """{op: [shape ids]} from --shapes: a plain id for every operator in `ops`, OP:ID for one."""
    chosen: dict[str, list[str]] = defaultdict(list)
    for item in (part.strip() for part in spec.split(",")):
        op, _, sid = item.rpartition(":")
        if op and op not in ops:
            raise SystemExit(f"--shapes {item}: {op} is not among the operators selected")
        for target in ([op] if op else ops) if sid else ():
            chosen[target].append(sid)
    return dict(chosen)


def final_verdict(shape) -> bool:
    """A shape's result is its verdict: judged (started and finished, right or wrong), and not a
    pass from an untimed compile probe, which still lacks the timing."""
    return shape.judged and not shape.untimed_pass


def _judged(dirs: Iterable[Path], ops: Sequence[str]) -> dict[str, list[str]]:
    """{op: [shape ids]} the runs in `dirs` gave a final verdict (see final_verdict), of `ops`."""
    judged: dict[str, list[str]] = defaultdict(list)
    for r in _load_results(dirs):
        if r.op in ops:
            judged[r.op] += [s.id for s in r.shapes if final_verdict(s) and s.id not in judged[r.op]]
    return dict(judged)


def selection(
    args: argparse.Namespace, catalog, times, model: CostModel, baseline: str, gpus: int = 1
) -> tuple[dict[str, list[str]], list[dict[str, str]]]:
    """{op: [shape ids]} to evaluate, and the shapes left out with the reason: judged already in a
    --skip-judged run, or left by a --select (for the budget of `gpus` GPUs, less a tenth for
    imperfect packing when there are several, or by not being among the shapes it ranks)."""
    ops = _ops(args, catalog)
    done = _judged(args.skip_judged, ops)
    left = [{"op": op, "shape": sid, "reason": JUDGED_EARLIER} for op, ids in done.items() for sid in ids]
    if args.shapes_from:
        chosen = _judged([args.shapes_from], ops)
    elif args.select:
        ranked = (
            representative_order(times, catalog.weights())
            if args.select == "representative"
            else spread_order(times, catalog.weights(), args.per_op)
        )
        order = [(op, sid) for op, sid in ranked if op in ops and sid not in done.get(op, ())]
        budget = args.budget_s * (gpus if gpus == 1 else 0.9 * gpus) if args.budget_s is not None else float("inf")
        chosen, over = fit_to_budget(order, times, model, baseline, budget)
        ranked_ids = set(order)
        over += [
            (op, s.id)
            for op in ops
            for s in catalog.visible(op).scored_shapes
            if (op, s.id) not in ranked_ids and s.id not in done.get(op, ())
        ]
        left += [{"op": op, "shape": sid, "reason": LEFT_OUT} for op, sid in over]
    elif args.shapes in (None, "all"):
        chosen = {op: [s.id for s in catalog.visible(op).scored_shapes] for op in ops}
    else:
        chosen = _shape_list(args.shapes, ops)
    chosen = {op: kept for op, ids in chosen.items() if (kept := [sid for sid in ids if sid not in done.get(op, ())])}
    return chosen, left


def throughput_split(results: Sequence) -> dict[str, float]:
    """Where the evaluator's wall time went, summed over evaluations."""
    split = dict.fromkeys(
        ("start_up", "candidate_load", "compile", "correctness", "timing", "profile", "other", "total"), 0.0
    )
    for r in results:
        split["start_up"] += r.overhead.worker_start_s + r.overhead.restart_s
        split["candidate_load"] += r.overhead.candidate_load_s
        split["total"] += r.overhead.total_s
        for s in r.shapes:
            first = s.seconds.get("first_call_extra", 0.0)
            split["compile"] += first
            split["correctness"] += (
                s.seconds.get("correctness", 0.0) - first + s.seconds.get("reference_and_compare", 0.0)
            )
            split["timing"] += s.seconds.get("timing", 0.0) + s.seconds.get("timed_output_checks", 0.0)
            split["profile"] += s.seconds.get("profile", 0.0)
    split["other"] = split["total"] - sum(v for k, v in split.items() if k not in ("other", "total"))
    return {k: round(v, 2) for k, v in split.items()}


def near_roofline(
    results: Sequence, catalog, profile: str = "h200", threshold: float = NEAR_ROOFLINE
) -> list[dict[str, Any]]:
    """Every correct, timed shape with S_j above `threshold` (item 4: none may exceed 1)."""
    from atrex_mcp.evaluate import scoring

    rows = []
    for r in results:
        roofline = scoring.Roofline.load(catalog, r.op, profile)
        shapes = catalog.hidden(r.op).roofline.get("shapes", {})
        for s in r.shapes:
            t_sol, _ = roofline.t_sol_ms(s.id)
            score = scoring.shape_score(t_sol, s.time_ms) if s.correct else None
            if score is not None and score > threshold:
                entry = shapes.get(s.id, {})
                rows.append(
                    {
                        "op": r.op,
                        "candidate": r.candidate,
                        "shape": s.id,
                        "time_ms": s.time_ms,
                        "t_sol_ms": t_sol,
                        "score": round(score, 4),
                        "bound": (entry.get("bound") or {}).get(profile),
                        "arithmetic_intensity": entry.get("arithmetic_intensity"),
                    }
                )
    return sorted(rows, key=lambda row: -row["score"])


def write_tables(dirs: Sequence[Path], catalog, prefix: Path) -> dict[str, Any]:
    """The main table (eager / torch-compile rows) per profile, as markdown and JSON."""
    from atrex_mcp.evaluate.table import main_table, render_markdown

    out = {}
    for profile in PROFILES:
        table = main_table([], catalog, profile, list(dirs))
        Path(f"{prefix}_{profile}.md").write_text(render_markdown(table))
        Path(f"{prefix}_{profile}.json").write_text(table.model_dump_json(indent=1))
        out[profile] = {row.run: row.s_agg for row in table.rows}
    return out


def _git_commit() -> str | None:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        return None


def conditions(results: Sequence) -> dict[str, Any]:
    """Date, host, hardware and versions, read from the results themselves."""
    device = results[0].device if results else None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "commit": _git_commit(),
        "device": device.name if device else None,
        "driver": device.driver if device else None,
        "cuda": device.cuda if device else None,
        "versions": device.versions if device else {},
        "max_sm_clock_mhz": device.max_sm_clock_mhz if device else None,
    }


def untimed_run(directory: Path) -> bool:
    """A compile probe's run directory (run.json says timing: false)."""
    path = directory / "run.json"
    return path.is_file() and json.loads(path.read_text()).get("timing") is False


def _cost_model(args: argparse.Namespace, catalog, times) -> CostModel:
    """The cost model for these options: per-shape traffic from the catalog, refitted on the
    --calibrate runs that timed (a probe's lanes share the host and it times nothing, so its
    seconds would teach the model the wrong costs)."""
    model = CostModel(
        seeds=args.seeds,
        traffic=load_shape_traffic(catalog),
        eager_ms=times,
        stage_limit_s=getattr(args, "timeout", CostModel.stage_limit_s),
    )
    timed = [d for d in args.calibrate if not untimed_run(d)]
    return model.calibrated(calibration_results(timed)) if timed else model


def run(args: argparse.Namespace) -> int:
    from atrex_mcp.evaluate.models import EvalResult
    from measurements.multi_gpu import check_lanes, gpu_devices, merge_results, run_spread

    catalog = _catalog(args.problems)
    times = load_reference_times()
    model = _cost_model(args, catalog, times)
    devices = gpu_devices(args.gpus)
    try:
        check_lanes(args.lanes_per_gpu, timed=not args.no_timing)
    except ValueError as exc:
        raise SystemExit(
            f"--lanes-per-gpu {args.lanes_per_gpu}: {exc} (timed work never shares a GPU; lanes need --no-timing)"
        ) from exc
    chosen, left_out = selection(args, catalog, times, model, args.baseline, len(devices) * args.lanes_per_gpu)
    jobs = jobs_for(chosen, times, model, args.baseline)
    request = {
        "baseline": args.baseline,
        "seeds": args.seeds,
        "hardware": "h200",
        "timeout_s": args.timeout,
        "measure_dsl": not args.no_profile and not args.no_timing,
        "timing": not args.no_timing,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"[baselines] {args.baseline}: {len(jobs)} shapes of {len(chosen)} operators on {len(devices)} device(s) "
        f"{devices} × {args.lanes_per_gpu} lane(s){' untimed' if args.no_timing else ''}, predicted "
        f"{predicted_seconds(jobs, model, args.baseline):.0f} s sequential, budget {args.budget_s} s",
        flush=True,
    )
    schedule = run_spread(
        jobs,
        devices,
        args.out / "parts",
        request,
        model.evaluation_s(args.baseline),
        args.budget_s,
        args.problems,
        lanes_per_device=args.lanes_per_gpu,
    )
    parts: dict[str, list] = defaultdict(list)
    for outcome in schedule.outcomes:
        if outcome.result_file:  # complete, or partial: stopped at the deadline with its finished shapes
            parts[outcome.op].append(EvalResult.model_validate_json(Path(outcome.result_file).read_text()))
    results = []
    for op, op_parts in sorted(parts.items()):
        order = [s.id for s in catalog.visible(op).shapes]
        merged = merge_results(op_parts, order)
        (args.out / f"{op}.{args.baseline}.json").write_text(merged.model_dump_json(indent=1))
        results.append(merged)
    not_run = left_out + schedule.not_run
    report = {
        "conditions": conditions(results),
        "baseline": args.baseline,
        "budget_s": args.budget_s,
        "devices": devices,
        "timing": not args.no_timing,
        "lanes_per_gpu": args.lanes_per_gpu,
        "cost_model": model.describe(),
        "predicted_s": round(predicted_seconds(jobs, model, args.baseline), 1),
        "selection": chosen,
        "schedule": schedule.summary(),
        "not_run": not_run,
        "throughput": throughput_split(calibration_results([args.out])),
        "near_roofline": near_roofline(results, catalog),
    }
    report["s_agg"] = write_tables([args.out], catalog, args.out / "table")
    (args.out / "run.json").write_text(json.dumps(report, indent=1))
    timed = sum(1 for r in results for s in r.shapes if s.time_ms is not None)
    correct = sum(1 for r in results for s in r.shapes if s.correct)
    print(
        f"[baselines] {args.baseline}: {correct} correct, {timed} timed, {len(not_run)} not run; wall "
        f"{schedule.makespan_s:.0f} s (predicted {report['predicted_s']:.0f} s); S_agg {report['s_agg']}; "
        f"throughput {report['throughput']}",
        flush=True,
    )
    return 0


def session_split(per_op: dict[str, float], session_s: float) -> list[list[str]]:
    """Operators packed into sessions of at most `session_s` predicted seconds (largest first,
    first fit); an operator larger than a session gets a session of its own."""
    sessions: list[tuple[float, list[str]]] = []
    for op, seconds in sorted(per_op.items(), key=lambda kv: -kv[1]):
        for k, (used, ops) in enumerate(sessions):
            if used + seconds <= session_s:
                sessions[k] = (used + seconds, [*ops, op])
                break
        else:
            sessions.append((seconds, [op]))
    return [ops for _, ops in sessions]


def plan(args: argparse.Namespace) -> int:
    """Predicted device seconds per operator, their split by part, the full issue, a budgeted
    selection, and (with --split-s) the operators grouped into sessions that fit."""
    catalog = _catalog(args.problems)
    times = load_reference_times()
    model = _cost_model(args, catalog, times)
    kinds = BASELINES if args.baseline == "both" else (args.baseline,)
    gpus = max(1, args.gpus or 1)
    print(f"cost model: {model.describe()}\n")
    print("| operator | shapes | eager ms / call (sum) | " + " | ".join(f"{k} s" for k in kinds) + " |")
    print("|---|---|---|" + "---|" * len(kinds))
    per_op: dict[str, dict[str, float]] = {k: {} for k in kinds}
    split = {k: {"evaluation_start": 0.0} for k in kinds}
    for op in catalog.names():
        ids = [s.id for s in catalog.visible(op).scored_shapes]
        for k in kinds:
            per_op[k][op] = predicted_seconds(jobs_for({op: ids}, times, model, k), model, k)
            split[k]["evaluation_start"] += model.evaluation_s(k)
            for sid in ids:
                for part, value in model.parts(times.get(op, {}).get(sid, 1.0), k, op, sid).items():
                    split[k][part] = split[k].get(part, 0.0) + value
        print(
            f"| {op} | {len(ids)} | {sum(times.get(op, {}).values()):.1f} | "
            + " | ".join(f"{per_op[k][op]:.0f}" for k in kinds)
            + " |"
        )
    totals = {k: sum(per_op[k].values()) for k in kinds}
    print("| **all** | | | " + " | ".join(f"**{totals[k]:.0f}**" for k in kinds) + " |\n")
    for k in kinds:
        print(f"{k} predicted split (s): " + ", ".join(f"{part} {value:.0f}" for part, value in split[k].items()))
    if set(kinds) == set(BASELINES):
        issue = LAUNCH_FLOOR_S + TIMING_ACCURACY_S + totals["eager"] + 2 * totals["torch-compile"]
        print(
            f"\nfull issue on one GPU (launch floor {LAUNCH_FLOOR_S:.0f} s + timing accuracy {TIMING_ACCURACY_S:.0f} "
            f"s + eager + torch.compile twice for stability): {issue:.0f} s = {issue / 60:.1f} min, plus "
            f"{MACHINE_START_S:.0f} s machine start per lease; on {gpus} GPU(s) about {issue / gpus / 60:.1f} min if "
            "the work splits evenly"
        )
    selections = {k: selection(args, catalog, times, model, k, gpus) for k in kinds}
    selected = {k: chosen for k, (chosen, _) in selections.items()}
    if args.select or args.ops or args.shapes or args.skip_judged:
        for k, (_, left) in selections.items():
            jobs = jobs_for(selected[k], times, model, k)
            print(
                f"\n{k}, selection within {args.budget_s} s on {gpus} GPU(s): {len(jobs)} shapes of "
                f"{len(selected[k])} operators, predicted {predicted_seconds(jobs, model, k):.0f} s sequential; "
                f"{len(left)} left out"
            )
            print("  " + "; ".join(f"{op}: {','.join(ids)}" for op, ids in selected[k].items()))
    if args.split_s:
        for k in kinds:
            per_op[k] = {
                op: predicted_seconds(jobs_for({op: ids}, times, model, k), model, k) for op, ids in selected[k].items()
            }
            sessions = session_split(per_op[k], args.split_s * gpus)
            print(f"\n{k} in sessions of {args.split_s:.0f} s × {gpus} GPU(s): {len(sessions)} sessions")
            for n, ops in enumerate(sessions, 1):
                print(f"  {n}: {sum(per_op[k][op] for op in ops):.0f} s  --ops {','.join(sorted(ops))}")
    return 0


def table(args: argparse.Namespace) -> int:
    catalog = _catalog(args.problems)
    prefix = args.out or (args.dirs[0] / "table")
    s_agg = write_tables(args.dirs, catalog, prefix)
    results = _load_results(args.dirs)
    summary = {
        "s_agg": s_agg,
        "near_roofline": near_roofline(results, catalog),
        "throughput": {d.name: throughput_split(calibration_results([d])) for d in args.dirs},
    }
    Path(f"{prefix}_summary.json").write_text(json.dumps(summary, indent=1))
    for profile in PROFILES:
        print(Path(f"{prefix}_{profile}.md").read_text())
    print(json.dumps(summary, indent=1))
    return 0


def stopped_or_failed(dirs: Iterable[Path]) -> set[tuple[str, str, str]]:
    """(op, shape, baseline) a run of that baseline started or meant to start but did not judge,
    for a reason other than its selection or budget (a failed batch), from the runs' run.json
    `not_run`. Every other shape missing from all results was never part of any run's selection."""
    stopped = set()
    for d in dirs:
        path = d / "run.json"
        if path.is_file():
            run = json.loads(path.read_text())
            for entry in run.get("not_run", []):
                if not entry["reason"].startswith((LEFT_OUT, JUDGED_EARLIER, BUDGET_REASON)):
                    stopped.add((entry["op"], entry["shape"], run.get("baseline")))
    return stopped


def _not_judged(shape_id: str, lost: bool, probed: bool, excluded: str | None = None):
    """The combined entry of a shape no run gave a verdict: its results set aside (--exclude,
    with why), lost (a run meant to judge it, see stopped_or_failed), passed only an untimed
    compile probe, or never selected."""
    from atrex_mcp.evaluate import taxonomy as tx
    from atrex_mcp.evaluate.models import ShapeResult

    if excluded is not None:
        message = f"Not judged: its results were set aside when the runs were combined ({excluded})."
    elif probed:
        message = "Not judged: it compiled and passed correctness in an untimed compile probe but was never timed."
    elif lost:
        message = "Not judged: in none of the combined runs' results (see their run.json not_run for why)."
    else:
        message = "Not judged: in none of the combined runs' results (no run selected it, or its budget left it out)."
    return ShapeResult(
        id=shape_id,
        correct=False,
        stage=tx.NOT_RUN,
        message=message,
        category=tx.NOT_RUN_DEADLINE if lost or probed or excluded is not None else tx.NOT_RUN_UNSELECTED,
    )


def combine(args: argparse.Namespace) -> int:
    from atrex_mcp.evaluate import taxonomy as tx
    from atrex_mcp.evaluate.table import load_results
    from measurements.multi_gpu import merge_results

    catalog = _catalog(args.problems)
    stopped = stopped_or_failed(args.dirs)
    excluded = {(op, sid) for op, ids in _shape_list(args.exclude or "", catalog.names()).items() for sid in ids}
    if excluded and not args.why:
        raise SystemExit("--exclude needs --why: the combined result says why each set-aside shape has no verdict")
    by_op: dict[tuple[str, str], list] = defaultdict(list)
    for d in args.dirs:
        for r in load_results(d):
            by_op[(r.op, r.candidate)].append(r)
    args.out.mkdir(parents=True, exist_ok=True)
    for (op, candidate), results in sorted(by_op.items()):
        results.sort(key=lambda r: r.started_at)
        chosen: dict[str, tuple[int, Any]] = {}
        probed: set[str] = set()  # passed an untimed compile probe; a verdict only once timed
        for k, r in enumerate(results):
            for shape in r.shapes:
                if (op, shape.id) in excluded:
                    continue
                if shape.untimed_pass:
                    probed.add(shape.id)
                elif shape.judged or shape.id not in chosen:
                    chosen[shape.id] = (k, shape)
        scored = [s.id for s in catalog.visible(op).scored_shapes]
        missing = [sid for sid in scored if sid not in chosen or (sid in probed and not chosen[sid][1].judged)]
        parts = []
        for k, r in enumerate(results):
            part = r.model_copy(deep=True)
            part.shapes = [shape for shape_id, (j, shape) in chosen.items() if j == k and shape_id not in missing]
            if part.shapes or (
                k == len(results) - 1 and not parts
            ):  # the last run carries the unjudged if none else does
                parts.append(part)
        if missing:  # no verdict in any run (never selected, lost, only probed, or set aside): not run, said once
            parts[-1].shapes += [
                _not_judged(
                    sid, (op, sid, candidate) in stopped, sid in probed, args.why if (op, sid) in excluded else None
                )
                for sid in missing
            ]
        merged = merge_results(parts, scored)
        unjudged = {s.category for s in merged.shapes if not s.judged}
        merged.partial = None if not unjudged else "selection" if unjudged == {tx.NOT_RUN_UNSELECTED} else "deadline"
        (args.out / f"{op}.{candidate}.json").write_text(merged.model_dump_json(indent=1))
        print(f"{op}: {sum(s.judged for s in merged.shapes)} judged of {len(scored)} shapes, from {len(parts)} run(s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--problems", type=Path, help="problem set root (default: the embedded set)")
    common.add_argument("--seeds", type=int, default=5, help="correctness seeds per shape (default 5)")
    common.add_argument(
        "--calibrate", nargs="*", type=Path, default=[], help="refit the cost model from these finished runs"
    )
    common.add_argument("--gpus", type=int, help="GPUs to spread over (default: all visible)")
    common.add_argument("--budget-s", type=float, help="wall-clock budget in seconds (default: none)")
    common.add_argument(
        "--select",
        choices=("representative", "spread"),
        help="choose shapes within the budget: representative (each operator's fastest and median shapes, "
        "a few large ones) or spread (--per-op shapes per operator, evenly spaced by eager time)",
    )
    common.add_argument("--per-op", type=int, default=5, help="shapes per operator for --select spread (default 5)")
    common.add_argument("--ops", help="comma-separated operators (default all)")
    common.add_argument(
        "--shapes",
        help="'all' (default), or comma-separated shape ids for every operator given, or "
        "OP:ID items for one operator each",
    )
    common.add_argument(
        "--skip-judged",
        nargs="*",
        type=Path,
        default=[],
        metavar="DIR",
        help="leave out shapes these earlier runs judged (resume a baseline over several device calls)",
    )
    run_p = sub.add_parser("run", parents=[common], help="evaluate a baseline")
    run_p.add_argument("--baseline", choices=BASELINES, required=True)
    run_p.add_argument("--out", type=Path, required=True)
    run_p.add_argument(
        "--shapes-from", type=Path, help="evaluate exactly the shapes this earlier run judged (of --ops when given)"
    )
    run_p.add_argument("--timeout", type=float, default=120.0, help="seconds per shape and stage (default 120)")
    run_p.add_argument(
        "--no-timing",
        action="store_true",
        help="compile and correctness only (a compile probe): a shape that passes is not a verdict until a "
        "timed run judges it; its failures are",
    )
    run_p.add_argument(
        "--lanes-per-gpu",
        type=int,
        default=1,
        help="untimed evaluations sharing each GPU (only with --no-timing; default 1)",
    )
    run_p.add_argument(
        "--no-profile",
        action="store_true",
        help="skip the profiled forward per shape (a baseline's DSL share is 0 by definition; a candidate "
        "evaluation includes it, so leave it on for the throughput figure)",
    )
    run_p.set_defaults(func=run)
    plan_p = sub.add_parser("plan", parents=[common], help="predicted device seconds per operator")
    plan_p.add_argument("--baseline", choices=(*BASELINES, "both"), default="both")
    plan_p.add_argument("--split-s", type=float, help="group whole operators into sessions of this many device seconds")
    plan_p.set_defaults(func=plan, shapes_from=None)
    table_p = sub.add_parser("table", help="main table, near-roofline shapes and throughput of finished runs")
    table_p.add_argument("dirs", nargs="+", type=Path)
    table_p.add_argument("--out", type=Path, help="prefix of the written files (default DIR/table)")
    table_p.add_argument("--problems", type=Path)
    table_p.set_defaults(func=table)
    combine_p = sub.add_parser("combine", help="one result per operator from runs made in several device calls")
    combine_p.add_argument("dirs", nargs="+", type=Path)
    combine_p.add_argument("--out", type=Path, required=True)
    combine_p.add_argument("--problems", type=Path)
    combine_p.add_argument("--exclude", help="OP:ID,… whose results are set aside (listed as not judged, with --why)")
    combine_p.add_argument("--why", help="why the --exclude shapes have no verdict (written into each)")
    combine_p.set_defaults(func=combine)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
