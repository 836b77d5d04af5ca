"""`atrex-mcp roofline OP --hardware NAME [--json]`: speed-of-light time of every scored shape
of a problem on one hardware profile (trusted side: these are evaluator figures)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pydantic import BaseModel, Field

from atrex_mcp.commands.grammar import add_problems_option


class RooflineRow(BaseModel):
    """One scored shape of `roofline --json`."""

    shape_id: str = Field(description="Shape id as in shapes.json.")
    flops: int = Field(description="Total arithmetic work W over all dtype paths.")
    bytes_read: int = Field(description="Q_read in bytes.")
    bytes_written: int = Field(description="Q_write in bytes.")
    t_sol_ms: float = Field(description="Speed-of-light time on the profile, ms.")
    bound: str = Field(description="memory or compute: the larger roofline term.")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "roofline", help="T_SOL and bound of a problem's scored shapes on a hardware profile"
    )
    parser.add_argument("op", help="operator (problem) name")
    parser.add_argument("--hardware", default=None, help="hardware profile (default: h200, the datasheet basis)")
    add_problems_option(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    parser.set_defaults(func=run)


def rows(op: str, hardware: str, roots: list[Path] | None = None) -> list[RooflineRow]:
    """Computed from the stored W/Q by the one roofline function, so any profile works, including
    ones added after the build."""
    from atrex_mcp.problemset.catalog import Catalog
    from atrex_mcp.problemset.hardware import load_profile
    from atrex_mcp.problemset.roofline import shape_roofline

    profile = load_profile(hardware)
    catalog = Catalog(roots) if roots else Catalog()
    if not catalog.has_hidden(op):  # the explicit derive step (a problem never built or added)
        from atrex_mcp.problemset.derive import derive_missing

        derive_missing(catalog, [op])
    hidden = catalog.hidden(op)
    out = []
    for shape in catalog.visible(op).scored_shapes:
        r = shape_roofline(hidden, shape.id, profile)
        out.append(
            RooflineRow(
                shape_id=shape.id,
                flops=sum(r.flops.values()),
                bytes_read=r.bytes_read,
                bytes_written=r.bytes_written,
                t_sol_ms=r.t_sol_ms,
                bound=r.bound,
            )
        )
    return out


def run(args: argparse.Namespace) -> int:
    from atrex_mcp.problemset.hardware import DEFAULT_PROFILE

    hardware = args.hardware or DEFAULT_PROFILE
    table = rows(args.op, hardware, args.problems)
    if args.json:
        print(json.dumps([r.model_dump() for r in table], indent=2))
        return 0
    from atrex_mcp.commands.tables import plain_table, print_table

    print(f"{args.op} on {hardware}")
    numbers = ["shape", "GFLOP", "MB read", "MB written", "T_SOL µs"]
    listing = plain_table([*numbers, "bound"], justify=dict.fromkeys(numbers, "right"))
    for r in table:
        listing.add_row(
            r.shape_id,
            f"{r.flops / 1e9:.3f}",
            f"{r.bytes_read / 1e6:.3f}",
            f"{r.bytes_written / 1e6:.3f}",
            f"{r.t_sol_ms * 1e3:.3f}",
            r.bound,
        )
    print_table(listing)
    return 0
