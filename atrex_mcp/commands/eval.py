"""`atrex-mcp eval CANDIDATE.py --op OP`: the three-stage gate on one candidate (or a baseline).

Exit code 0 when every judged shape passed, 1 when the candidate failed any stage, 2 for a usage
or input error (cli.main)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from atrex_mcp.commands.grammar import add_problems_option, count, positive_seconds, read_source
from atrex_mcp.knowledge import KNOWLEDGE_CONDITIONS

EXIT_PASSED, EXIT_FAILED = 0, 1
NO_GPU_NOTE = (
    "no GPU: judging only the smoke shape ({id}), for correctness (nothing is timed); "
    "pass --shapes all or shape ids for more"
)
LONG_S = 30.0  # an estimate above this is printed before the work starts


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a candidate kernel file (or the reference as a baseline)",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("candidate", nargs="?", type=Path, help="Python file defining class Model(nn.Module)")
    parser.add_argument("--op", required=True, help="operator (problem) name")
    parser.add_argument(
        "--baseline", choices=("eager", "torch-compile"), help="evaluate the reference itself instead of a file"
    )
    parser.add_argument(
        "--shapes",
        default=None,
        help="comma-separated shape ids, 'all' (every scored shape) or 'smoke' "
        "(default: all on a GPU, smoke without one)",
    )
    parser.add_argument(
        "--seeds", type=count(1, 64), default=5, help="fresh random input seeds per shape, 1-64 (default 5)"
    )
    parser.add_argument("--hardware", default="h200", help="hardware profile for T_SOL and scores (default h200)")
    parser.add_argument("--dsl", default="triton", help="target DSL (default triton)")
    parser.add_argument("--no-timing", action="store_true", help="skip the performance stage")
    parser.add_argument("--no-dsl", action="store_true", help="skip the profiler trace for DSL attribution")
    parser.add_argument(
        "--timeout", type=positive_seconds, default=120.0, help="seconds per shape and stage (default 120)"
    )
    parser.add_argument(
        "--deadline-s",
        type=positive_seconds,
        help="seconds for the whole evaluation: past it the shape in progress is stopped and the "
        "result is partial (finished shapes kept, the rest not_run)",
    )
    add_problems_option(parser)
    parser.add_argument(
        "--out", type=Path, help="write the result JSON into this directory (<op>.json, <op>.<baseline>.json)"
    )
    parser.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    parser.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    parser.add_argument(
        "--knowledge",
        choices=KNOWLEDGE_CONDITIONS,
        help="knowledge condition the candidate was written under, recorded with the result (default: not stated)",
    )
    parser.set_defaults(func=run)


def shape_selection(text: str | None, smoke_id: str, has_gpu: bool) -> tuple[list[str] | None, str]:
    """(shape ids, or None for every scored shape; a note when the default was narrowed). Ids
    repeated in the list are judged once, in the order first given."""
    if text is None:
        return (None, "") if has_gpu else ([smoke_id], NO_GPU_NOTE.format(id=smoke_id))
    if text == "all":
        return None, ""
    if text == "smoke":
        return [smoke_id], ""
    ids = list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not ids:
        from atrex_mcp.errors import AtrexError

        raise AtrexError("input", "no_shapes", "--shapes names no shape.", "Give shape ids, 'all' or 'smoke'.")
    return ids, ""


def _summary(result, candidate: Path | None, source: str | None) -> str:
    from atrex_mcp.commands.failure_text import failure_report
    from atrex_mcp.doctor import isolation_summary

    lines = [
        f"{result.op} [{result.candidate}] compiled={result.compiled} device={result.device.name} "
        f"S_i={result.operator_score if result.operator_score is not None else '—'} "
        f"knowledge={result.knowledge or 'not stated'}"
    ]
    if result.partial:
        judged = sum(s.judged for s in result.shapes)
        lines.append(
            f"PARTIAL ({result.partial}): {judged} of {len(result.shapes)} shapes judged; "
            f"S_i {result.operator_score_note}"
        )
    for s in result.shapes:
        time = f"{s.time_ms:.4f} ms" if s.time_ms is not None else (s.timing_note or "—")
        share = f"{s.dsl_share:.2f}" if s.dsl_share is not None else "—"
        score = f"{s.score:.4f}" if s.score is not None else "—"
        verdict = "ok" if s.judged and not s.failed else f"{s.stage}/{s.category}"
        lines.append(
            f"  {s.id:>6}  {verdict:<32} time {time:<22} dsl {share:<5} S {score}"
            + (f"  integrity: {','.join(s.integrity)}" if s.integrity else "")
            + ("" if s.judged else f"  {s.message}")
        )
    isolation = isolation_summary(result.isolation.warnings)
    if isolation:
        lines.append(isolation)
    failures = failure_report(result, candidate, source)
    if failures:
        lines += [""] + failures
    judged = [s for s in result.shapes if s.judged]
    bad = sum(s.failed for s in judged)
    lines.append(
        f"{len(judged) - bad} passed, {bad} failed"
        + (f", {len(result.shapes) - len(judged)} not run" if len(judged) < len(result.shapes) else "")
    )
    return "\n".join(lines)


def exit_code(result) -> int:
    """0 when every judged shape passed (and the candidate compiled), else 1."""
    if result.compile_error is not None or any(s.failed for s in result.shapes):
        return EXIT_FAILED
    return EXIT_PASSED


def run(args: argparse.Namespace) -> int:
    import torch

    from atrex_mcp.errors import AtrexError
    from atrex_mcp.evaluate import EvalRequest, evaluate, footprint
    from atrex_mcp.problemset.catalog import Catalog
    from atrex_mcp.problemset.derive import derive_missing
    from atrex_mcp.progress import ShapeProgress, clock

    if (args.candidate is None) == (args.baseline is None):
        raise AtrexError(
            "input",
            "missing_candidate",
            "Give either a candidate file or --baseline.",
            "e.g. atrex-mcp eval kernel.py --op rms_norm, or atrex-mcp eval --baseline eager --op rms_norm",
        )
    source = read_source(args.candidate) if args.candidate is not None else None
    catalog = Catalog(args.problems) if args.problems else Catalog()
    derive_missing(catalog, [args.op])
    problem = catalog.visible(args.op)
    shapes, note = shape_selection(args.shapes, problem.smoke_shape.id, torch.cuda.is_available())
    chosen = [problem.shape(i) for i in shapes] if shapes is not None else list(problem.scored_shapes)
    where = footprint.room()
    sized = footprint.sizes(catalog, args.op, chosen)
    footprint.check_fit(args.op, sized, where)
    request = EvalRequest(
        op=args.op,
        source=source,
        baseline=args.baseline,
        shapes=shapes,
        seeds=args.seeds,
        hardware=args.hardware,
        dsl=args.dsl,
        timing=not args.no_timing,
        measure_dsl=not args.no_dsl,
        timeout_s=args.timeout,
        deadline_s=args.deadline_s,
    )
    estimate = footprint.estimate_s(sized, args.seeds, where.kind, request.timing)
    if not args.json:
        if note:
            print(f"note: {note}", file=sys.stderr)
        if estimate > LONG_S:
            print(
                f"note: {len(chosen)} shape(s) x {args.seeds} seed(s) on {where.kind}: about {clock(estimate)} "
                "(a rough estimate)",
                file=sys.stderr,
            )
    if args.json:
        result = evaluate(request, catalog)
    else:
        with ShapeProgress(len(chosen), estimate, live=False if args.plain else None) as progress:
            result = evaluate(request, catalog, progress=progress)
    if result.candidate == "candidate":
        result.knowledge = args.knowledge
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"{result.op}.json" if result.candidate == "candidate" else f"{result.op}.{result.candidate}.json"
        (args.out / name).write_text(result.model_dump_json(indent=1))
    print(result.model_dump_json() if args.json else _summary(result, args.candidate, source))
    return exit_code(result)
