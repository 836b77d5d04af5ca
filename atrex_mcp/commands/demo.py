"""`atrex-mcp demo`: the whole product in one command. Starts `atrex-mcp serve` as a subprocess,
connects a real MCP client to it over stdio, lists the problems, validates a shipped example
Triton kernel (on CPU through Triton's interpreter, or timed on a GPU) and prints the result."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from atrex_mcp.commands.grammar import count


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="start the server, connect an MCP client, validate an example kernel",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--op", default="rms_norm", help="problem to validate (default rms_norm)")
    p.add_argument("--kernel", type=Path, help="kernel file (default: the shipped example for --op)")
    p.add_argument(
        "--shapes", help="comma-separated shape ids (default: the smoke shape, then on a GPU every scored shape, timed)"
    )
    p.add_argument("--seeds", type=count(1, 64), default=1, help="input seeds per shape (default 1)")
    p.add_argument("--benchmark-mode", action="store_true", help="run the server in benchmark mode")
    p.set_defaults(func=run)


def _say(text: str) -> None:
    print(text, flush=True)


def _table(result: dict) -> list[str]:
    rows = [f"  {'shape':>8}  {'verdict':<28} {'time ms':>10} {'S':>7} {'DSL share':>9}"]
    for s in result["shapes"]:
        verdict = "correct" if s["correct"] else f"{s['stage']}/{s['category']}"
        time_ms = f"{s['time_ms']:.4f}" if s["time_ms"] is not None else "-"
        score = f"{s['score']:.3f}" if s["score"] is not None else "-"
        share = f"{s['dsl_share']:.0%}" if s["dsl_share"] is not None else "-"
        rows.append(f"  {s['id']:>8}  {verdict:<28} {time_ms:>10} {score:>7} {share:>9}")
        if not s["correct"] and s["message"]:
            rows.append("            " + s["message"].strip().splitlines()[-1][:160])
    return rows


async def _progress(value: float, total: float | None, message: str | None) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


async def _validate(client: Any, args: argparse.Namespace, kernel: Path, shapes: list[str] | None) -> dict | None:
    """One validate call, printed as a table; None when the call itself failed."""
    from atrex_mcp.doctor import isolation_summary

    call = {"op": args.op, "path": kernel.name, "seeds": args.seeds, **({"shapes": shapes} if shapes else {})}
    _say(f"validate {call}")
    result = await client.call_tool("validate", call, progress_callback=_progress)
    if result.is_error:
        _say(result.content[0].text)
        return None
    v = result.structured_content
    _say(f"{v['op']} on {v['device']}: compiled={v['compiled']}, {v['passed']} passed, {v['failed']} failed")
    if v["compile_error"]:
        _say(
            f"  compile error [{v['compile_error']['category']}]: "
            f"{v['compile_error']['message'].strip().splitlines()[0]}"
        )
    for line in _table(v):
        _say(line)
    if v["operator_score"] is not None and v["timed"]:
        _say(f"operator score S = {v['operator_score']:.3f} (median T_SOL/T over correct shapes)")
    for note in v["notes"]:
        _say(f"note: {note}")
    isolation = isolation_summary(v["isolation_warnings"])
    if isolation:
        _say(isolation)
    return v


async def _demo(args: argparse.Namespace, kernel: Path) -> int:
    import os
    import tempfile

    from mcp import Client, StdioServerParameters

    serve = [sys.executable, "-m", "atrex_mcp.cli", "serve", "--workspace", str(kernel.parent)]
    if args.benchmark_mode:
        serve.append("--benchmark-mode")
    params = StdioServerParameters(command=serve[0], args=serve[1:], env=dict(os.environ), cwd=tempfile.gettempdir())
    _say(f"$ {' '.join(serve)}   (an MCP server on stdio; this command is its client)")
    async with Client(params) as client:
        info = client.server_info
        name = f"{info.name} {info.version}" if info is not None else "a server that did not name itself"
        _say(f"connected: {name}, protocol {client.protocol_version}")
        _say(f"tools: {', '.join(t.name for t in (await client.list_tools()).tools)}")
        listed = (await client.call_tool("list_problems", {})).structured_content
        _say(
            f"list_problems: {len(listed['problems'])} problems in {listed['mode']} mode: "
            + ", ".join(p["name"] for p in listed["problems"])
        )
        # The smoke shape first (quick anywhere); where the server has a GPU, then every scored shape, timed.
        v = await _validate(client, args, kernel, args.shapes.split(",") if args.shapes else ["smoke"])
        if v is not None and not args.shapes and v["device"].startswith("cuda") and v["failed"] == 0:
            v = await _validate(client, args, kernel, None)
        return 0 if v is not None and v["compiled"] and v["failed"] == 0 else 1


def run(args: argparse.Namespace) -> int:
    import anyio

    from atrex_mcp.paths import examples_dir

    kernel = (args.kernel or examples_dir() / f"{args.op}_triton.py").resolve()
    if not kernel.is_file():
        from atrex_mcp.errors import AtrexError

        raise AtrexError("input", "no_kernel_file", f"No kernel file {kernel}.", "Pass --kernel PATH.")
    return anyio.run(_demo, args, kernel)
