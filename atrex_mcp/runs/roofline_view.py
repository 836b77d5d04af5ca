"""The roofline a run is measured against: per target shape T_SOL, bound and intensity on the
run's hardware profile (computed by atrex_mcp.problemset.roofline from the problem's hidden W/Q, trusted
side only) and where the profile's peaks come from; and S of a kernel's times against it.
What an agent may see of it is the policy's decision (atrex_mcp.policy.Policy.run_state_view)."""

from __future__ import annotations

from typing import Any

from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.problemset.hardware import load_profile
from atrex_mcp.problemset.roofline import Workload, arithmetic_intensity, bound, t_sol_ms


def run_roofline(catalog: Catalog, op: str, shape_ids: list[str], hardware: str) -> dict[str, Any]:
    """Per-shape roofline figures for the `hardware` profile, with the profile's sources."""
    profile = load_profile(hardware)
    hidden = catalog.hidden(op)
    shapes: dict[str, Any] = {}
    for shape_id in shape_ids:
        if shape_id not in hidden.roofline.get("shapes", {}):
            shapes[shape_id] = {"t_sol_ms": None, "note": "no roofline for this shape (smoke shapes are not scored)"}
            continue
        stored = hidden.shape_roofline(shape_id)
        workload = Workload(flops=stored["flops"], bytes_read=stored["bytes_read"], bytes_written=stored["bytes_written"])
        shapes[shape_id] = {
            "t_sol_ms": t_sol_ms(workload, profile),
            "bound": bound(workload, profile),
            "arithmetic_intensity": arithmetic_intensity(workload),
            "flops": dict(workload.flops),
            "bytes": workload.total_bytes,
        }
    used_paths = sorted({path for s in shapes.values() for path in s.get("flops", {})})
    sources = {f"peak_{path}": profile.peaks[path].source for path in used_paths}
    sources["hbm_bandwidth"] = profile.hbm_bandwidth.source
    return {"hardware": hardware, "description": profile.description, "shapes": shapes, "sources": sources}


def scores_from_times(roofline: dict[str, Any], time_ms: dict[str, float | None]) -> dict[str, float | None]:
    """S_j = T_SOL / T per shape; None where a shape was not timed or has no T_SOL."""
    scores: dict[str, float | None] = {}
    for shape_id, t in time_ms.items():
        sol = roofline.get("shapes", {}).get(shape_id, {}).get("t_sol_ms")
        scores[shape_id] = sol / t if (t and sol) else None
    return scores
