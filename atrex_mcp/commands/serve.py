"""`atrex-mcp serve`: run the MCP server over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from atrex_mcp.commands.grammar import add_problems_option, count
from atrex_mcp.knowledge import KNOWLEDGE_CONDITIONS, KNOWLEDGE_HELP

if TYPE_CHECKING:
    from atrex_mcp.server.app import ServerConfig
    from atrex_mcp.server.transport import HttpSettings
    from atrex_mcp.views import Mode


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the MCP tool server (stdio by default)",
        description="Run the MCP tool server. With no options: stdio, optimize mode, the embedded problems and wiki.",
    )
    p.add_argument(
        "--benchmark-mode",
        action="store_true",
        help="hide roofline figures, scores, production timings, provenance and weights from every tool",
    )
    p.add_argument("--knowledge", choices=KNOWLEDGE_CONDITIONS, help=KNOWLEDGE_HELP)
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port")
    p.add_argument(
        "--token-env",
        metavar="VAR",
        action="append",
        default=[],
        help="environment variable holding an HTTP bearer token (required for HTTP; repeatable: each token "
        "is one client, and a client sees only its own runs)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name clients use to reach a non-loopback HTTP server (repeatable)",
    )
    add_problems_option(p)
    p.add_argument("--hardware", default="h200", help="hardware profile for roofline figures (default h200)")
    p.add_argument("--state-dir", type=Path, help="where the server keeps its state (wiki index, runs)")
    p.add_argument(
        "--workspace",
        action="append",
        type=Path,
        metavar="DIR",
        help="folder tools may read candidate files from and write packages into (repeatable; default: the current "
        "folder)",
    )
    p.add_argument(
        "--correctness-jobs",
        type=count(1),
        default=2,
        metavar="N",
        help="correctness-only evaluations that may run at once (timed work always has a GPU to itself)",
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS|local[:N]",
        help="run validate, profile_kernel and run iterations on a Dask cluster's GPUs (a scheduler address "
        "such as tcp://HOST:8786, or local[:N]) instead of this server's own queue; docs/cluster.md",
    )
    p.add_argument(
        "--tools",
        type=_tool_list,
        metavar="A,B,C",
        help="register only these tools (comma-separated allow-list; unknown names are refused at start "
        "with the valid choices); default: every tool",
    )
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run)


def _tool_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one tool name")
    return names


def _configure_logging(level: str, mode: Mode) -> None:
    """Logs go to stderr only (stdout is the stdio protocol stream), which a client may keep
    where the agent can read it: every record passes the policy's log redactor for `mode`."""
    from atrex_mcp.policy import RedactingFilter, log_redactor

    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    redactor = log_redactor(mode)
    if redactor is not None:
        for handler in logging.getLogger().handlers:
            handler.addFilter(RedactingFilter(redactor))


def run(args: argparse.Namespace) -> int:
    from atrex_mcp.errors import AtrexError

    if args.transport == "stdio":
        _serve(args, http=None)
        return 0
    from atrex_mcp.server.transport import HttpSettings, check_settings

    tokens = []
    for var in args.token_env:
        tokens.append(os.environ.get(var, ""))
        if not tokens[-1]:
            raise AtrexError(
                "input",
                "token_env_empty",
                f"The environment variable {var} is empty or unset.",
                f"export {var}=<long random secret> before starting the server.",
            )
    http = HttpSettings(
        host=args.host,
        port=args.port,
        token=tokens[0] if tokens else "",
        more_tokens=tokens[1:],
        allowed_hosts=args.allowed_host,
    )
    check_settings(http)  # refuse an unsafe setup before loading anything heavy
    _serve(args, http)
    return 0


def _serve(args: argparse.Namespace, http: HttpSettings | None) -> None:
    from atrex_mcp.paths import default_state_dir, problems_dir
    from atrex_mcp.problemset.catalog import Catalog
    from atrex_mcp.server.app import ServerConfig

    config = ServerConfig(
        mode="benchmark" if args.benchmark_mode else "optimize",
        problems=[p.resolve() for p in args.problems] if args.problems else [problems_dir()],
        hardware=args.hardware,
        state_dir=(args.state_dir or default_state_dir()).resolve(),
        workspaces=[w.resolve() for w in args.workspace] if args.workspace else [Path.cwd()],
        correctness_limit=args.correctness_jobs,
        tools=args.tools,
        knowledge=args.knowledge,
    )
    _configure_logging(args.log_level, config.mode)
    catalog = Catalog(config.problems)
    if catalog.missing_hidden():  # a set never built (a trace snapshot): the explicit derive step
        from atrex_mcp.problemset.derive import derive_missing

        derive_missing(catalog)
    if args.cluster is None:
        _run(config, http)
        return
    from atrex_mcp.cluster.engine import connect
    from atrex_mcp.cluster.remote import ClusterPool

    with connect(args.cluster) as connection:
        config.cluster = ClusterPool(connection, catalog)
        _run(config, http)


def _run(config: ServerConfig, http: HttpSettings | None) -> None:
    from atrex_mcp.server.app import build_server

    if http is None:
        build_server(config).run()
    else:
        from atrex_mcp.server.transport import serve_http

        serve_http(config, http)
