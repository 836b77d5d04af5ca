"""The `atrex-mcp` command. Each subcommand lives in atrex_mcp/commands/<name>.py and
exposes `register(subparsers)`; this module only discovers and dispatches them."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from atrex_mcp import __version__, commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="atrex-mcp", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"atrex-mcp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
