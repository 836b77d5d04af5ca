"""`atrex-mcp bench run|eval|report`: agent-driven benchmark runs, their trusted evaluation,
and the report (tables and figures)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from atrex_mcp.commands.grammar import add_problems_option, count, positive_seconds
from atrex_mcp.knowledge import KNOWLEDGE_CONDITIONS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="drive an agent over the operators, evaluate its kernels, report",
        description="Agent-driven benchmark runs: run -> eval -> report (docs/bench.md).",
    )
    sub = parser.add_subparsers(dest="bench_command", metavar="STEP", required=True)
    _add_run_parser(sub)
    _add_eval_parser(sub)
    _add_report_parser(sub)


def _add_run_parser(sub) -> None:
    """`bench run`: what the agent is, what it works on, and where the run directory is."""
    run = sub.add_parser(
        "run",
        help="drive an agent over the operators (resumable)",
        description="Drive an agent over the operators: a fresh workspace per operator with only the visible files, "
        "the benchmark-mode server attached, a time budget, the packaged kernel collected. "
        "Run it again on the same --out to continue an interrupted run.",
    )
    run.add_argument(
        "--agent", help='claude, codex, or a command line run in each workspace, e.g. "python3 my_agent.py"'
    )
    run.add_argument("--ops", help="all, or a comma-separated list of operators")
    run.add_argument("--dsl", help="target DSL (default triton)")
    run.add_argument(
        "--condition",
        choices=("vanilla", "optimizer"),
        help="vanilla: one pass; optimizer: measure-revise loop (default vanilla)",
    )
    run.add_argument(
        "--knowledge",
        choices=KNOWLEDGE_CONDITIONS,
        help="what the wiki gives the agent: none (no wiki tools), general (default: no document that solves "
        "a served operator) or full (the whole wiki); recorded with every result and report",
    )
    run.add_argument("--model", help="model name passed to the agent's CLI")
    run.add_argument("--budget-minutes", type=positive_seconds, help="wall-clock budget per operator (default 30)")
    run.add_argument("--parallel", type=count(1), default=1, metavar="N", help="operators run at once (default 1)")
    run.add_argument(
        "--out", type=Path, required=True, metavar="RUN_DIR", help="the run directory (created, or resumed)"
    )
    run.add_argument("--name", help="run name in reports (default: the directory's name)")
    add_problems_option(run)
    run.add_argument("--hardware", help="hardware profile of the server and the scores (default h200)")
    _add_agent_process_options(run)
    run.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    run.set_defaults(func=run_command)


def _add_agent_process_options(run: argparse.ArgumentParser) -> None:
    """`bench run` options on how the agent's process is started: how it reaches the server, its
    uid, its executable, extra arguments and the environment it may see."""
    run.add_argument(
        "--server",
        choices=("auto", "stdio", "http"),
        help="how the agent reaches the server: auto = http when the agent runs as another uid, else stdio",
    )
    run.add_argument(
        "--agent-uid",
        default="auto",
        metavar="auto|same|UID",
        help="uid the agent runs as: auto = 65534 when run as root (and it can run the agent), else this uid",
    )
    run.add_argument("--agent-bin", metavar="PATH", help="the claude/codex executable (default: found on PATH)")
    run.add_argument(
        "--agent-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the agent's command line (repeatable; write --agent-arg=--flag)",
    )
    run.add_argument(
        "--agent-env",
        action="append",
        default=[],
        metavar="NAME",
        help="environment variable passed through to the agent (repeatable; credentials, proxies)",
    )


def _add_eval_parser(sub) -> None:
    """`bench eval`: which shapes and seeds are judged, baselines, and the optional cluster."""
    ev = sub.add_parser(
        "eval",
        help="trusted evaluation of every submission of a run",
        description="Judge every collected submission with the evaluator (CPU: correctness only, not timed). "
        "Already evaluated submissions are skipped unless --force. Exit code 0 when every "
        "submission passed every judged shape, 1 when one failed a stage or could not be "
        "evaluated, 2 for a usage or input error.",
    )
    ev.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    ev.add_argument(
        "--shapes",
        default=None,
        help="all (every scored shape), smoke, or comma-separated shape ids (default: all on a GPU, smoke without one)",
    )
    ev.add_argument(
        "--seeds", type=count(1, 64), default=5, help="fresh random input seeds per shape, 1-64 (default 5)"
    )
    ev.add_argument(
        "--baselines",
        choices=("auto", "yes", "no"),
        default="auto",
        help="also time the eager and torch.compile references (auto: when a GPU is present)",
    )
    ev.add_argument("--timeout", type=positive_seconds, default=120.0, help="seconds per shape and stage (default 120)")
    ev.add_argument(
        "--force", action="store_true", help="evaluate again, also with settings other than the stored ones"
    )
    ev.add_argument(
        "--cluster",
        metavar="ADDRESS|local[:N]",
        help="judge on a Dask cluster: a scheduler address (tcp://HOST:8786) or local[:N] "
        "(one worker per GPU of this host); needs the cluster extra (docs/cluster.md)",
    )
    ev.add_argument(
        "--shard-shapes",
        type=count(1),
        metavar="N",
        help="with --cluster: shapes per shard sent to one worker (default 8)",
    )
    ev.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    ev.set_defaults(func=eval_command)


def _add_report_parser(sub) -> None:
    """`bench report`: the runs to report on and where the report goes."""
    rep = sub.add_parser(
        "report",
        help="tables and figures of one or more runs (markdown + HTML)",
        description="The main table per run, the failure taxonomy, per-operator tables and figures, "
        "as report.md, a self-contained report.html, report.json and PNG figures.",
    )
    rep.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    rep.add_argument(
        "--out", type=Path, help="output directory (default: RUN_DIR/report for one run; required for several)"
    )
    rep.add_argument("--hardware", help="profile the scores are computed against (default: the first run's)")
    rep.add_argument("--title", default="atrex-mcp benchmark report", help="report title")
    rep.set_defaults(func=report_command)


def run_command(args: argparse.Namespace) -> int:
    from atrex_mcp.agentbench.runner import BenchRunner, RunRequest, open_run

    request = RunRequest(
        out=args.out,
        agent=args.agent,
        ops=args.ops,
        dsl=args.dsl,
        condition=args.condition,
        knowledge=args.knowledge,
        model=args.model,
        budget_minutes=args.budget_minutes,
        problems=args.problems,
        hardware=args.hardware,
        server=args.server,
        agent_uid=args.agent_uid,
        agent_bin=args.agent_bin,
        agent_args=args.agent_arg,
        agent_env=args.agent_env,
        name=args.name,
    )
    config, layout = open_run(request)
    summary = BenchRunner(config, layout, parallel=args.parallel, live=False if args.plain else None).run()
    print(f"run directory: {layout.root}")
    if summary.interrupted:
        return 130
    return 1 if any(s.status == "error" for s in summary.states.values()) else 0


def eval_command(args: argparse.Namespace) -> int:
    from atrex_mcp.agentbench.evaluation import EvalSettings, evaluate_run
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.evaluate.device import has_gpu

    shapes = args.shapes
    if shapes is None:
        shapes = "all" if has_gpu() else "smoke"
        if shapes == "smoke":
            print(
                "note: no GPU: judging only each operator's smoke shape, for correctness (nothing is timed); "
                "pass --shapes all or shape ids for more",
                file=sys.stderr,
            )
    if args.shard_shapes is not None and args.cluster is None:
        raise AtrexError(
            "input",
            "shard_shapes_without_cluster",
            "--shard-shapes only applies with --cluster.",
            "Add --cluster ADDRESS|local[:N], or drop --shard-shapes.",
        )
    settings = EvalSettings(shapes=shapes, seeds=args.seeds, timeout_s=args.timeout, baselines=args.baselines)
    summary = evaluate_run(
        args.run_dir,
        settings,
        force=args.force,
        live=False if args.plain else None,
        cluster=args.cluster,
        shard_shapes=args.shard_shapes,
    )
    return 1 if summary.failed or summary.rejected else 0


def report_command(args: argparse.Namespace) -> int:
    from atrex_mcp.agentbench.report import build_report
    from atrex_mcp.agentbench.report_render import write_report
    from atrex_mcp.errors import AtrexError

    if args.out is None and len(args.run_dirs) > 1:
        raise AtrexError("input", "report_needs_out", "A report over several runs needs --out DIR.")
    out = args.out or args.run_dirs[0] / "report"
    report = build_report(args.run_dirs, hardware=args.hardware, title=args.title)
    paths = write_report(report, out)
    for path in paths:
        print(path)
    return 0
