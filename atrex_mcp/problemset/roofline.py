"""The speed-of-light time of one problem instance (SPEC §0.5):

    T_SOL[ms] = 1000 * max( sum_d W_d / P_d , (Q_read + Q_write) / B )

W_d is the arithmetic work counted under dtype path d (one label per shipped operator, several
for a user problem counted by atrex_mcp.problemset.flop_counter), P_d that path's peak, Q the bytes read and
written, B the HBM bandwidth. The larger term names the bound.

`shape_roofline(problem, shape_id, profile)` is the one source of a problem shape's W, Q and
T_SOL: scoring, the policy's views, the run and profile rooflines and `atrex-mcp roofline` all
call it. `shape_record` writes the per-profile record of roofline.json at build/derive time.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import HiddenProblem
from atrex_mcp.problemset.hardware import DtypePath, HardwareProfile, load_profile

Bound = Literal["memory", "compute"]


class Workload(BaseModel):
    """Work and traffic of one problem instance."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flops: dict[DtypePath, int] = Field(
        default_factory=dict, description="Arithmetic work per dtype path (FLOP; integer operations under 'int')."
    )
    bytes_read: int = Field(
        ge=0, description="Q_read: bytes of the input data (SPEC §0.5 convention, see docs/roofline.md)."
    )
    bytes_written: int = Field(ge=0, description="Q_write: bytes of every output tensor.")

    @field_validator("flops")
    @classmethod
    def _non_negative(cls, flops: dict[DtypePath, int]) -> dict[DtypePath, int]:
        if any(w < 0 for w in flops.values()):
            raise ValueError("work must be non-negative")
        return flops

    @property
    def total_flops(self) -> int:
        return sum(self.flops.values())

    @property
    def total_bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def under_label(self, path: DtypePath) -> Workload:
        """The same work filed under one dtype label, as the SPEC stores shipped operators."""
        return Workload(flops={path: self.total_flops}, bytes_read=self.bytes_read, bytes_written=self.bytes_written)


def arithmetic_intensity(workload: Workload) -> float | None:
    """FLOP per byte moved; None when nothing moves."""
    return workload.total_flops / workload.total_bytes if workload.total_bytes else None


def compute_seconds(workload: Workload, profile: HardwareProfile) -> float:
    """sum_d W_d / P_d over the paths with work (a path without work needs no peak)."""
    return sum(w / profile.peak(path) for path, w in workload.flops.items() if w)


def memory_seconds(workload: Workload, profile: HardwareProfile) -> float:
    return workload.total_bytes / profile.hbm_bandwidth.value  # type: ignore[operator]


def t_sol_ms(workload: Workload, profile: HardwareProfile) -> float:
    return roofline_point(workload, profile).t_sol_ms


def bound(workload: Workload, profile: HardwareProfile) -> Bound:
    """Compute-bound only when the compute term is strictly larger (W = 0 is memory-bound)."""
    return roofline_point(workload, profile).bound


def shape_record(workload: Workload, profiles: dict[str, HardwareProfile]) -> dict[str, Any]:
    """One shape's entry of roofline.json: W, Q, intensity, and T_SOL and bound on every profile.

    A profile without a peak the work needs gets null for that shape (e.g. xpu-a has no tf32 figure).
    """
    t_sol: dict[str, float | None] = {}
    bounds: dict[str, Bound | None] = {}
    for name, profile in sorted(profiles.items()):
        usable = all(profile.has_peak(p) for p, w in workload.flops.items() if w)
        point = roofline_point(workload, profile) if usable else None
        t_sol[name] = point.t_sol_ms if point else None
        bounds[name] = point.bound if point else None
    return {
        "flops": dict(workload.flops),
        "bytes_read": workload.bytes_read,
        "bytes_written": workload.bytes_written,
        "arithmetic_intensity": arithmetic_intensity(workload),
        "t_sol_ms": t_sol,
        "bound": bounds,
    }


class RooflinePoint(BaseModel):
    """W, Q and the speed-of-light time of one workload on one hardware profile."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hardware: str = Field(description="Hardware profile the figures are computed for.")
    flops: dict[DtypePath, int] = Field(description="Work W per dtype path (FLOP; integer operations under 'int').")
    bytes_read: int = Field(description="Q_read in bytes.")
    bytes_written: int = Field(description="Q_write in bytes.")
    arithmetic_intensity: float | None = Field(
        description="Total W / total bytes (FLOP per byte); null when nothing moves."
    )
    compute_ms: float = Field(description="sum_d W_d / P_d in ms.")
    memory_ms: float = Field(description="(Q_read + Q_write) / B in ms.")
    t_sol_ms: float = Field(description="Speed-of-light time in ms: max(compute_ms, memory_ms).")
    bound: Bound = Field(description="Which term sets t_sol_ms.")

    @property
    def total_bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def summary(self) -> dict[str, Any]:
        """The per-shape entry of a run's roofline and of a profile report (what the agent may see in optimise mode)."""
        return {
            "t_sol_ms": self.t_sol_ms,
            "bound": self.bound,
            "arithmetic_intensity": self.arithmetic_intensity,
            "flops": dict(self.flops),
            "bytes": self.total_bytes,
        }


class ShapeRoofline(RooflinePoint):
    """The roofline of one scored shape of a problem."""

    op: str = Field(description="Operator (problem) name.")
    shape_id: str = Field(description="Shape id as in shapes.json.")


def roofline_point(workload: Workload, profile: HardwareProfile) -> RooflinePoint:
    """The figures of any workload (the calculator's, or a problem shape's); an AtrexError when the
    profile lacks a peak the work needs."""
    compute, memory = compute_seconds(workload, profile), memory_seconds(workload, profile)
    return RooflinePoint(
        hardware=profile.name,
        flops=dict(workload.flops),
        bytes_read=workload.bytes_read,
        bytes_written=workload.bytes_written,
        arithmetic_intensity=arithmetic_intensity(workload),
        compute_ms=1000.0 * compute,
        memory_ms=1000.0 * memory,
        t_sol_ms=1000.0 * max(compute, memory),
        bound="compute" if compute > memory else "memory",
    )


def shape_roofline(problem: HiddenProblem, shape_id: str, profile: HardwareProfile | str) -> ShapeRoofline:
    """THE figures of one problem shape: W and Q as stored in its roofline.json, T_SOL and the bound
    computed here on `profile`. Every T_SOL the tool shows or scores with comes from this function;
    the T_SOL stored beside W/Q is a record for readers, checked by `problems check`, never read."""
    if isinstance(profile, str):
        profile = load_profile(profile)
    entry = problem.roofline_entry(shape_id)
    if entry is None:
        raise AtrexError(
            "input",
            "no_roofline",
            f"Problem {problem.name} has no roofline for shape {shape_id}.",
            "Only scored shapes have one (the smoke shape is not scored); rebuild the hidden files "
            "with `atrex-mcp problems build` or `problems add` when a scored shape lacks it.",
        )
    try:
        workload = Workload(flops=entry["flops"], bytes_read=entry["bytes_read"], bytes_written=entry["bytes_written"])
    except (KeyError, TypeError, ValueError) as exc:
        raise AtrexError(
            "input",
            "bad_problem_file",
            f"roofline.json of {problem.name}, shape {shape_id}: no valid W/Q ({type(exc).__name__}).",
            "Rebuild the hidden files with `atrex-mcp problems build` or `problems add`.",
        ) from None
    point = roofline_point(workload, profile)
    return ShapeRoofline(op=problem.name, shape_id=shape_id, **point.model_dump())


def run_roofline(problem: HiddenProblem, shape_ids: list[str], hardware: str) -> dict[str, Any]:
    """The roofline a run is measured against: per target shape its summary (None T_SOL and a note for
    a shape without one), with where the profile's peaks come from."""
    profile = load_profile(hardware)
    shapes: dict[str, Any] = {}
    for shape_id in shape_ids:
        if problem.roofline_entry(shape_id) is None:
            shapes[shape_id] = {"t_sol_ms": None, "note": "no roofline for this shape (smoke shapes are not scored)"}
            continue
        shapes[shape_id] = shape_roofline(problem, shape_id, profile).summary()
    used_paths = sorted({path for s in shapes.values() for path in s.get("flops", {})})
    sources = {f"peak_{path}": profile.peaks[path].source for path in used_paths}
    sources["hbm_bandwidth"] = profile.hbm_bandwidth.source
    return {"hardware": hardware, "description": profile.description, "shapes": shapes, "sources": sources}


def run_scores(roofline: dict[str, Any], time_ms: dict[str, float | None]) -> dict[str, float | None]:
    """S_j = T_SOL / T per shape against a run's roofline; None where a shape was not timed or has no T_SOL."""
    scores: dict[str, float | None] = {}
    for shape_id, t in time_ms.items():
        sol = roofline.get("shapes", {}).get(shape_id, {}).get("t_sol_ms")
        scores[shape_id] = sol / t if (t and sol) else None
    return scores
