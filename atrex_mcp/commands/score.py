"""`atrex-mcp score DIR…`: the paper's main table from per-operator evaluation results."""

from __future__ import annotations

import argparse
from pathlib import Path

from atrex_mcp.commands.grammar import add_problems_option


def register(subparsers) -> None:
    parser = subparsers.add_parser("score", help="aggregate evaluation results into the main table (markdown and JSON)")
    parser.add_argument("runs", nargs="+", type=Path, help="directories of EvalResult JSON files, one per run")
    parser.add_argument(
        "--baselines", nargs="*", type=Path, default=[], help="directories holding eager / torch-compile results"
    )
    parser.add_argument("--hardware", default="h200", help="profile to score against (default h200)")
    add_problems_option(parser)
    parser.add_argument(
        "--floor",
        type=Path,
        help="launch-floor JSON (measurements/launch_floor.py measure): adds S_floor columns beside S",
    )
    parser.add_argument("--json", action="store_true", help="print the table as JSON instead of markdown")
    parser.add_argument("--out", type=Path, help="also write <out>.md and <out>.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from atrex_mcp.errors import AtrexError
    from atrex_mcp.evaluate.table import main_table, render_markdown
    from atrex_mcp.problemset.catalog import Catalog

    catalog = Catalog(args.problems) if args.problems else Catalog()
    if catalog.missing_hidden():  # a set never built (a trace snapshot): the explicit derive step
        from atrex_mcp.problemset.derive import derive_missing

        derive_missing(catalog)
    floor_ms = None
    if args.floor:
        try:
            floor_ms = json.loads(args.floor.read_text()).get("floor_ms")
        except (OSError, ValueError, AttributeError) as exc:
            raise AtrexError(
                "input",
                "bad_floor_file",
                f"Cannot read the launch floor {args.floor}: {exc}",
                "Pass the JSON that measurements/launch_floor.py measure wrote.",
            ) from None
    table = main_table(args.runs, catalog, args.hardware, args.baselines, floor_ms)
    markdown, data = render_markdown(table), table.model_dump_json(indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(markdown)
        args.out.with_suffix(".json").write_text(data)
    print(data if args.json else markdown)
    return 0
