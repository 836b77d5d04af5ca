"""`atrex-mcp config claude|codex`: the block that registers this install's server with a client,
naming the executable by its absolute path so the client finds it from any folder."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "config",
        help="print the block that registers this install with Claude Code or Codex",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument(
        "client", choices=("claude", "codex"), help="claude: a `claude mcp add` command; codex: a config.toml table"
    )
    parser.add_argument("--benchmark-mode", action="store_true", help="register the server in benchmark mode")
    parser.add_argument("--name", default="atrex", help="the server's name in the client (default atrex)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from atrex_mcp.registration import claude_block, codex_block, this_install

    launch = this_install(args.benchmark_mode)
    print(claude_block(launch, args.name) if args.client == "claude" else codex_block(launch, args.name))
    return 0
