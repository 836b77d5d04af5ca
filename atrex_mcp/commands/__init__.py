"""Subcommands of `atrex-mcp`: one module each, each with `register(subparsers)`.

A module sets `func` on its parser (`parser.set_defaults(func=run)`); `run(args)` returns
the exit code. Imports of heavy libraries (torch, triton, mcp) belong inside `run`, so that
`atrex-mcp --help` stays fast."""
