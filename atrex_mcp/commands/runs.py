"""`atrex-mcp runs list|show`: the optimisation runs kept in a state directory, and one run's
timeline (iterations, categories, verdicts, speed-ups, masked records, audit trail)."""

from __future__ import annotations

import argparse

from atrex_mcp.commands.grammar import add_state_dir_option, shared_options


def register(subparsers) -> None:
    parser = subparsers.add_parser("runs", help="list optimisation runs or show one run's timeline")
    sub = parser.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="one run's timeline")
    show.add_argument("run_id", help="run id, e.g. run-1a2b3c4d5e6f (see `runs list`)")
    show.add_argument("--json", action="store_true", help="print the timeline as JSON (with the full audit trail)")
    listing = sub.add_parser("list", help="every run in the state directory")
    listing.add_argument("--json", action="store_true", help="print the runs as JSON")
    shared_options(parser, [show, listing], add_state_dir_option)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from atrex_mcp.commands.tables import plain_table, print_table
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.paths import default_state_dir
    from atrex_mcp.runs.audit import render_timeline, timeline
    from atrex_mcp.runs.store import RunStore

    store = RunStore(args.state_dir or default_state_dir())
    if args.runs_command == "show":
        try:
            t = timeline(store, args.run_id)
        except AtrexError as exc:
            if exc.info.category != "unknown_run":
                raise
            raise AtrexError(
                "input",
                "unknown_run",
                exc.info.message,
                f"State: {store.path}; `atrex-mcp runs list` shows every client's runs.",
            ) from None
        print(t.model_dump_json(indent=2) if args.json else render_timeline(t))
        return 0
    runs = store.list_runs()
    if args.json:
        print(json.dumps([r.model_dump(exclude={"roofline", "workspace"}) for r in runs], indent=2))
        return 0
    if not runs:
        print(f"no runs in {store.path}")
        return 0
    table = plain_table(["run", "operator", "dsl", "hardware", "created", "state"])
    for r in runs:
        table.add_row(
            r.run_id,
            r.op,
            r.dsl,
            r.hardware,
            r.created_at,
            "no baseline" if r.baseline is None else f"accepted #{r.accepted}",
        )
    print_table(table)
    return 0
