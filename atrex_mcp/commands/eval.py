"""`atrex-mcp eval CANDIDATE.py --op OP`: the three-stage gate on one candidate (or a baseline)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="evaluate a candidate kernel file (or the reference as a baseline)")
    parser.add_argument("candidate", nargs="?", type=Path, help="Python file defining class Model(nn.Module)")
    parser.add_argument("--op", required=True, help="operator (problem) name")
    parser.add_argument("--baseline", choices=("eager", "torch-compile"), help="evaluate the reference itself instead of a file")
    parser.add_argument("--shapes", default="all", help="comma-separated shape ids, 'all' (every scored shape) or 'smoke'")
    parser.add_argument("--seeds", type=int, default=5, help="fresh random input seeds per shape (default 5)")
    parser.add_argument("--hardware", default="h200", help="hardware profile for T_SOL and scores (default h200)")
    parser.add_argument("--dsl", default="triton", help="target DSL (default triton)")
    parser.add_argument("--no-timing", action="store_true", help="skip the performance stage")
    parser.add_argument("--no-dsl", action="store_true", help="skip the profiler trace for DSL attribution")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per shape and stage (default 120)")
    parser.add_argument("--deadline-s", type=float, help="seconds for the whole evaluation: past it the shape in progress is "
                                                         "stopped and the result is partial (finished shapes kept, the rest not_run)")
    parser.add_argument("--problems", type=Path, help="problem set root (default: the embedded set or ATREX_PROBLEMS)")
    parser.add_argument("--out", type=Path, help="write the result JSON into this directory (<op>.json, <op>.<baseline>.json)")
    parser.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    parser.set_defaults(func=run)


def _summary(result) -> str:
    from atrex_mcp.doctor import isolation_summary

    lines = [f"{result.op} [{result.candidate}] compiled={result.compiled} device={result.device.name} "
             f"S_i={result.operator_score if result.operator_score is not None else '—'}"]
    if result.compile_error:
        lines.append(f"compile error: {result.compile_error.category}: {result.compile_error.message}")
    if result.partial:
        judged = sum(s.judged for s in result.shapes)
        lines.append(f"PARTIAL ({result.partial}): {judged} of {len(result.shapes)} shapes judged; "
                     f"S_i {result.operator_score_note}")
    for s in result.shapes:
        time = f"{s.time_ms:.4f} ms" if s.time_ms is not None else (s.timing_note or "—")
        share = f"{s.dsl_share:.2f}" if s.dsl_share is not None else "—"
        score = f"{s.score:.4f}" if s.score is not None else "—"
        verdict = "ok" if s.correct else f"{s.stage}/{s.category}"
        lines.append(f"  {s.id:>6}  {verdict:<32} time {time:<22} dsl {share:<5} S {score}"
                     + (f"  integrity: {','.join(s.integrity)}" if s.integrity else "")
                     + ("" if s.judged else f"  {s.message}"))
    isolation = isolation_summary(result.isolation.warnings)
    if isolation:
        lines.append(isolation)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from atrex_mcp.catalog import Catalog
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.evaluate import EvalRequest, evaluate

    try:
        if (args.candidate is None) == (args.baseline is None):
            raise AtrexError("input", "missing_candidate", "Give either a candidate file or --baseline.",
                             "e.g. atrex-mcp eval kernel.py --op rms_norm, or atrex-mcp eval --baseline eager --op rms_norm")
        catalog = Catalog(args.problems) if args.problems else Catalog()
        problem = catalog.visible(args.op)
        if args.shapes == "all":
            shapes = None
        elif args.shapes == "smoke":
            shapes = [problem.smoke_shape.id]
        else:
            shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
        source = None
        if args.candidate is not None:
            try:
                source = args.candidate.read_text()
            except OSError as exc:
                raise AtrexError("input", "unreadable_candidate", f"Cannot read {args.candidate}: {exc}") from None
        request = EvalRequest(op=args.op, source=source, baseline=args.baseline, shapes=shapes, seeds=args.seeds,
                              hardware=args.hardware, dsl=args.dsl, timing=not args.no_timing, measure_dsl=not args.no_dsl,
                              timeout_s=args.timeout, deadline_s=args.deadline_s)
        progress = None if args.json else (lambda message, fraction: print(f"[{fraction:4.0%}] {message}", file=sys.stderr))
        result = evaluate(request, catalog, progress=progress)
    except AtrexError as exc:
        if args.json:
            print(json.dumps({"error": exc.info.model_dump()}))
        else:
            print(str(exc), file=sys.stderr)
        return 2
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"{result.op}.json" if result.candidate == "candidate" else f"{result.op}.{result.candidate}.json"
        (args.out / name).write_text(result.model_dump_json(indent=1))
    print(result.model_dump_json() if args.json else _summary(result))
    return 0
