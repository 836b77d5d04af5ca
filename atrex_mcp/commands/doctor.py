"""`atrex-mcp doctor`: what this machine gives a sandbox worker (uid switch, namespaces, Landlock,
seccomp), the GPU and its clocks, Nsight Compute, the problem set, the wiki index, the state
directory, and whether Claude Code and Codex are set up to start this install; each with what to do."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check this machine and install: isolation, GPU, ncu, wiki, state, client configs",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="the server's state directory (default: ATREX_STATE_DIR or ~/.local/state/atrex-mcp)",
    )
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help="skip starting a real worker on the example kernel (the plan is still reported)",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from atrex_mcp.doctor import render, run_checks
    from atrex_mcp.paths import default_state_dir

    report = run_checks((args.state_dir or default_state_dir()).resolve(), probe=not args.no_probe)
    print(report.model_dump_json(indent=1) if args.json else render(report))
    return 1 if report.failed else 0
