"""`atrex-mcp score DIR…`: the paper's main table from per-operator evaluation results."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("score", help="aggregate evaluation results into the main table (markdown and JSON)")
    parser.add_argument("runs", nargs="+", type=Path, help="directories of EvalResult JSON files, one per run")
    parser.add_argument("--baselines", nargs="*", type=Path, default=[], help="directories holding eager / torch-compile results")
    parser.add_argument("--hardware", default="h200", help="profile to score against (default h200)")
    parser.add_argument("--problems", type=Path, help="problem set root (default: the embedded set or ATREX_PROBLEMS)")
    parser.add_argument("--floor", type=Path, help="launch-floor JSON (bench/launch_floor.py measure): adds S_floor columns beside S")
    parser.add_argument("--json", action="store_true", help="print the table as JSON instead of markdown")
    parser.add_argument("--out", type=Path, help="also write <out>.md and <out>.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from atrex_mcp.catalog import Catalog
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.evaluate.table import main_table, render_markdown

    try:
        catalog = Catalog(args.problems) if args.problems else Catalog()
        floor_ms = json.loads(args.floor.read_text()).get("floor_ms") if args.floor else None
        table = main_table(args.runs, catalog, args.hardware, args.baselines, floor_ms)
    except AtrexError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    markdown, data = render_markdown(table), table.model_dump_json(indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(markdown)
        args.out.with_suffix(".json").write_text(data)
    print(data if args.json else markdown)
    return 0
