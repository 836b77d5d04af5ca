"""How long does `atrex-mcp serve` take to answer `initialize` over stdio?

Codex drops an optional MCP server that has not answered within about a second, so this is the
figure a user's first connection depends on. Each repeat spawns a fresh server process, connects
a real MCP client over stdio with the 2025 handshake (what Codex speaks) and records the seconds
from spawn to the `initialize` reply, then to the `tools/list` reply.

    python3 measurements/serve_initialize_time.py [--repeats 5] [--sdk-floor] [--json] [-- SERVER COMMAND ...]

Without a command it starts `python -m atrex_mcp.cli serve` with this interpreter. `--sdk-floor`
also measures an MCP SDK server with one trivial tool, alternating with ours: what any server on
this SDK, interpreter and machine pays, so a busy machine does not pass for a slow server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

_SDK_FLOOR = """
from mcp.server import MCPServer
server = MCPServer("floor")


@server.tool()
def ping() -> str:
    return "pong"


server.run()
"""


async def _once(command: list[str]) -> dict[str, float]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=command[0], args=command[1:], env=dict(os.environ), cwd=tempfile.gettempdir()
    )
    t0 = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        initialized = time.perf_counter() - t0
        await client.list_tools()
        listed = time.perf_counter() - t0
    return {"initialize_s": initialized, "tools_list_s": listed}


def _summary(command: list[str], runs: list[dict[str, float]]) -> dict:
    return {
        "command": command,
        "repeats": len(runs),
        "runs": runs,
        "initialize_median_s": statistics.median(r["initialize_s"] for r in runs),
        "tools_list_median_s": statistics.median(r["tools_list_s"] for r in runs),
    }


def measure(commands: list[list[str]], repeats: int) -> list[dict]:
    """Each command `repeats` times, interleaved so that load changes hit all alike."""
    import anyio

    runs: list[list[dict[str, float]]] = [[] for _ in commands]
    for _ in range(repeats):
        for i, command in enumerate(commands):
            runs[i].append(anyio.run(_once, command))
    return [_summary(command, r) for command, r in zip(commands, runs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sdk-floor", action="store_true", help="also measure a one-tool MCP SDK server, interleaved")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("command", nargs="*", help="the server command (default: this interpreter's atrex-mcp serve)")
    args = parser.parse_args(argv)
    commands = [args.command or [sys.executable, "-m", "atrex_mcp.cli", "serve"]]
    if args.sdk_floor:
        commands.append([sys.executable, "-c", _SDK_FLOOR])
    results = measure(commands, max(1, args.repeats))
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for result in results:
        floor = result["command"][-1] == _SDK_FLOOR
        print("SDK floor (a one-tool MCPServer):" if floor else f"$ {' '.join(result['command'])}")
        for r in result["runs"]:
            print(f"  initialize {r['initialize_s']:.3f} s   tools/list {r['tools_list_s']:.3f} s")
        print(
            f"  median: initialize {result['initialize_median_s']:.3f} s, "
            f"tools/list {result['tools_list_median_s']:.3f} s over {result['repeats']} fresh servers"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
