"""`atrex-mcp trace import|diff`: turn serving traces into a versioned problem-set snapshot, and
compare two problem sets (weights, operators, shapes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from atrex_mcp.commands.grammar import count


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trace", help="import serving traces as a problem-set snapshot; diff two problem sets"
    )
    sub = parser.add_subparsers(dest="trace_command", metavar="ACTION", required=True)

    imp = sub.add_parser("import", help="torch.profiler traces → snapshot (shapes, weights, manifest)")
    imp.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="Kineto/Chrome trace JSON (.json or .json.gz) from torch.profiler with record_shapes=True; "
        "APP=PATH assigns one trace to another application than --app",
    )
    imp.add_argument("--app", help="application of the traces not written as APP=PATH")
    imp.add_argument(
        "--phase",
        choices=("prefill", "decode", "auto"),
        default="auto",
        help="force a phase, or infer it from prefill/decode ranges, else from token counts (default auto)",
    )
    imp.add_argument(
        "--apps",
        type=Path,
        metavar="APPS_FILE",
        help="card-hour share per application: `name: share` lines (YAML style) or a JSON object",
    )
    imp.add_argument("--out", type=Path, required=True, metavar="SNAPSHOT_DIR", help="new directory for the snapshot")
    imp.add_argument(
        "--problems", type=Path, help="problem set to copy references and smoke shapes from (default: the shipped one)"
    )
    imp.add_argument("--rules", type=Path, help="rules table (default: atrex_mcp/trace/rules.json)")
    imp.add_argument(
        "--decode-max-tokens",
        type=count(1),
        help="token threshold for decode without phase ranges (default from the rules)",
    )
    imp.add_argument("--json", action="store_true", help="print the manifest as JSON")

    diff = sub.add_parser("diff", help="compare two problem sets: weights, new/removed operators and shapes")
    diff.add_argument("a", type=Path, metavar="A", help="problem set or snapshot (e.g. problems/)")
    diff.add_argument("b", type=Path, metavar="B", help="problem set or snapshot")
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.set_defaults(func=run)


def _specs(args: argparse.Namespace):
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.trace import TraceSpec

    specs = []
    for item in args.traces:
        app, sep, path = item.partition("=")
        if sep and app and not Path(item).exists():
            specs.append(TraceSpec(app=app, path=Path(path)))
        elif args.app:
            specs.append(TraceSpec(app=args.app, path=Path(item)))
        else:
            raise AtrexError(
                "input",
                "no_app",
                f"Trace {item} has no application.",
                "Pass --app NAME, or write the trace as APP=PATH.",
            )
    return specs


def _summary(manifest) -> str:
    lines = [
        f"device time: {manifest.device}; rules {manifest.rules_version}; {len(manifest.inputs)} trace(s); "
        f"apps {', '.join(f'{a}={s:.3g}' for a, s in manifest.apps.items())}",
        f"mapped {100 * (1 - manifest.unmapped_share):.1f}% of device time to operators "
        f"(mapped but not retained {100 * manifest.excluded_share:.1f}%); "
        f"unmapped {100 * manifest.unmapped_share:.1f}%:",
    ]
    for category in manifest.unmapped_by_category.values():
        top = ", ".join(list(category.top)[:3])
        lines.append(f"  {100 * category.share:5.1f}%  {category.label}" + (f"  [{top}]" if top else ""))
    lines.append("operators:")
    for op, rec in manifest.operators.items():
        state = f"{len(rec.shapes)} shape(s)" if rec.retained else f"dropped: {rec.dropped_reason}"
        via = ", ".join(list(rec.sources)[:2])
        lines.append(f"  {op:<30} calls {rec.calls:>6}  unresolved {rec.unresolved_calls:>5}  {state}  (via {via})")
        if rec.unresolved_reasons:
            lines.append(f"  {'':<30} unresolved: {next(iter(rec.unresolved_reasons))}")
    for kernel in manifest.fused_kernels:
        lines.append(
            f"fused kernel {kernel.kernel}: {' + '.join(kernel.operators)} ({kernel.launches} launches, "
            "time split evenly)"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from atrex_mcp.trace import diff_problem_sets, import_traces, render_diff

    if args.trace_command == "import":
        manifest = import_traces(
            _specs(args),
            args.out,
            phase=args.phase,
            apps_file=args.apps,
            problems=args.problems,
            rules_path=args.rules,
            decode_max_tokens=args.decode_max_tokens,
        )
        print(manifest.model_dump_json(indent=2) if args.json else f"wrote {args.out}\n{_summary(manifest)}")
    else:
        result = diff_problem_sets(args.a, args.b)
        print(result.model_dump_json(indent=2) if args.json else render_diff(result))
    return 0
