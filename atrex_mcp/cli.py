"""The `atrex-mcp` command. Each subcommand lives in atrex_mcp/commands/<name>.py and exposes
`register(subparsers)`; this module registers them and is the one place that turns a failure
into an exit code and a one-line `error:` message.

Exit codes: 0 success (for `eval`: every judged shape passed), 1 the candidate (or a checked
problem, a benchmark operator) failed, 2 a usage or input error, 3 the tool's own failure (a
sandbox that cannot start, a bug), 130 interrupted, 141 output pipe closed."""

from __future__ import annotations

import json
import os
import sys

from atrex_mcp import __version__
from atrex_mcp.commands import bench, config, demo, doctor, problems, roofline, runs, score, serve, trace, wiki
from atrex_mcp.commands import eval as eval_command
from atrex_mcp.commands.grammar import Parser, UsageError, one_line

DESCRIPTION = (
    "An MCP tool server and command line for a production-trace-driven GPU-kernel benchmark and a "
    "profile-driven kernel-optimisation loop. Exit codes: 0 ok, 1 the candidate failed, 2 usage or "
    "input error, 3 the tool's own failure."
)
COMMANDS = (bench, config, demo, doctor, eval_command, problems, roofline, runs, score, serve, trace, wiki)
EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 2, 3, 130, 141
DEBUG_ENV = "ATREX_DEBUG"


def build_parser() -> Parser:
    parser = Parser(prog="atrex-mcp", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"atrex-mcp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for module in COMMANDS:
        module.register(sub)
    return parser


def _error(message: str, as_json: bool, info: dict | None = None) -> None:
    if as_json:
        print(json.dumps({"error": info or {"stage": "input", "category": "usage", "message": message, "hint": ""}}))
    print(f"error: {one_line(message)}", file=sys.stderr)


def _silence_stdout() -> None:
    """After the reader of our output went away, flushing at exit would raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    from atrex_mcp.errors import AtrexError

    as_json = False
    try:
        args = build_parser().parse_args(argv)
        as_json = bool(getattr(args, "json", False))
        return int(args.func(args) or 0)
    except UsageError as exc:
        _error(str(exc), as_json)
        return EXIT_USAGE
    except AtrexError as exc:
        _error(exc.shell_text(), as_json, exc.info.model_dump())
        return EXIT_INTERNAL if exc.info.stage == "internal" else EXIT_USAGE
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
        _error(f"[input/invalid_value] {problems}", as_json)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nerror: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a bug: one line, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        _error(f"[internal/{type(exc).__name__}] {exc} (set {DEBUG_ENV}=1 for the traceback)", as_json)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
