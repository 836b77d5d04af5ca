"""The roofline a run is measured against: per target shape T_SOL, bound and intensity on the
run's hardware, read from the problem's hidden roofline (trusted side only), and the S of a
kernel's times against it. What an agent may see of it is the policy's decision."""

from __future__ import annotations

from typing import Any

from atrex_mcp.catalog import Catalog
from atrex_mcp.errors import unknown_choice


def run_roofline(catalog: Catalog, op: str, shape_ids: list[str], hardware: str) -> dict[str, Any]:
    """Per-shape roofline figures for `hardware`, with where the figures come from."""
    roofline = catalog.hidden(op).roofline
    shapes: dict[str, Any] = {}
    for shape_id in shape_ids:
        entry = roofline["shapes"][shape_id]
        profiles = sorted(entry["t_sol_ms"])
        if hardware not in entry["t_sol_ms"]:
            raise unknown_choice("hardware", hardware, profiles)
        shapes[shape_id] = {
            "t_sol_ms": entry["t_sol_ms"][hardware],
            "bound": entry["bound"][hardware],
            "arithmetic_intensity": entry["arithmetic_intensity"],
            "flops": entry["flops"],
            "bytes_read": entry["bytes_read"],
            "bytes_written": entry["bytes_written"],
        }
    return {"hardware": hardware, "counting": roofline.get("counting", ""), "shapes": shapes,
            "sources": hardware_sources(hardware)}


def hardware_sources(hardware: str) -> dict[str, Any]:
    """Where each peak of the hardware profile comes from (datasheet or measurement)."""
    from atrex_mcp.hardware import load_profile

    return load_profile(hardware).sources()


def scores_from_times(roofline: dict[str, Any], time_ms: dict[str, float | None]) -> dict[str, float | None]:
    """S_j = T_SOL / T per shape; None where a shape was not timed or has no T_SOL."""
    scores: dict[str, float | None] = {}
    for shape_id, t in time_ms.items():
        sol = roofline.get("shapes", {}).get(shape_id, {}).get("t_sol_ms")
        scores[shape_id] = sol / t if (t and sol) else None
    return scores
