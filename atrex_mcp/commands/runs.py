"""`atrex-mcp runs list|show`: the optimisation runs kept in a state directory, and one run's
timeline (iterations, categories, verdicts, speed-ups, masked records, audit trail)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("runs", help="list optimisation runs or show one run's timeline")
    parser.add_argument("--state-dir", type=Path, default=None, help="state directory (default: ATREX_STATE_DIR or ~/.local/state/atrex-mcp)")
    sub = parser.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="one run's timeline")
    show.add_argument("run_id", help="run id, e.g. run-1a2b3c4d5e6f (see `runs list`)")
    show.add_argument("--json", action="store_true", help="print the timeline as JSON (with the full audit trail)")
    listing = sub.add_parser("list", help="every run in the state directory")
    listing.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from atrex_mcp.errors import AtrexError
    from atrex_mcp.paths import default_state_dir
    from atrex_mcp.runs.audit import render_timeline, timeline
    from atrex_mcp.runs.store import RunStore

    try:
        store = RunStore(args.state_dir or default_state_dir())
        if args.runs_command == "show":
            t = timeline(store, args.run_id)
            print(t.model_dump_json(indent=2) if args.json else render_timeline(t))
            return 0
        runs = store.list_runs()
        if args.json:
            print(json.dumps([r.model_dump(exclude={"roofline", "workspace"}) for r in runs], indent=2))
            return 0
        if not runs:
            print(f"no runs in {store.path}")
        for r in runs:
            state = "no baseline" if r.baseline is None else f"accepted #{r.accepted}"
            print(f"{r.run_id}  {r.op:<28} {r.dsl:<8} {r.hardware:<14} {r.created_at}  {state}")
        return 0
    except AtrexError as exc:
        where = f" (state: {store.path}; `atrex-mcp runs list` shows every client's runs)" if exc.info.category == "unknown_run" else ""
        print(f"error: {exc}{where}", file=sys.stderr)
        return 2
