#!/usr/bin/env python3
"""Nsight Compute capture and parsing without the server.

    python3 tools/ncu_capture.py [--kernel REGEX] [--nvtx RANGE] [--metrics a,b,…] [--json] -- CMD ARGS…
    python3 tools/ncu_capture.py --parse ncu_output.csv [--json]

Runs CMD under `ncu --clock-control none` with the Hopper metric set of atrex_mcp.profiling
(metrics this ncu or GPU does not know are dropped and listed), or parses a CSV that
`ncu --csv` wrote, then prints per-kernel figures and the bottleneck classification.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

try:
    import atrex_mcp  # noqa: F401
except ImportError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from atrex_mcp.errors import AtrexError
from atrex_mcp.profiling.classify import classify
from atrex_mcp.profiling.metrics import BY_KEY
from atrex_mcp.profiling.ncu import capture, parse_ncu_csv


def _print_text(kernels, unavailable, bottleneck) -> None:
    for k in kernels:
        print(f"{k.name}  launches {k.launches}  block {k.block}  grid {k.grid}")
        for key, value in sorted(k.metrics.items()):
            meaning = BY_KEY[key].meaning if key in BY_KEY else key
            print(f"    {key:<28} {value:>16,.2f}   {meaning}")
    if unavailable:
        print("unavailable metrics: " + ", ".join(unavailable))
    print(f"\nbottleneck: {bottleneck.kind}")
    for line in bottleneck.evidence:
        print(f"  - {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parse", type=Path, help="parse this ncu --csv output instead of running anything")
    parser.add_argument("--kernel", help="profile only kernels whose name matches this regex")
    parser.add_argument("--nvtx", help="profile only inside this NVTX push/pop range")
    parser.add_argument("--metrics", help="comma-separated metric names (default: the Hopper set)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the program to profile")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        if args.parse:
            parsed = parse_ncu_csv(args.parse.read_text())
            kernels, unavailable = parsed.kernels, parsed.unavailable
        elif command:
            with tempfile.TemporaryDirectory(prefix="ncu-capture-") as tmp:
                result = capture(
                    command,
                    workdir=Path(tmp),
                    metrics=args.metrics.split(",") if args.metrics else None,
                    nvtx_range=args.nvtx,
                    kernel_regex=args.kernel,
                )
            kernels, unavailable = result.kernels, result.unavailable
        else:
            parser.error("give --parse FILE or a command after --")
    except AtrexError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bottleneck = classify(kernels)
    if args.json:
        print(
            json.dumps(
                {
                    "kernels": [k.model_dump() for k in kernels],
                    "unavailable": unavailable,
                    "bottleneck": bottleneck.model_dump(),
                },
                indent=2,
            )
        )
    else:
        _print_text(kernels, unavailable, bottleneck)
    return 0


if __name__ == "__main__":
    sys.exit(main())
