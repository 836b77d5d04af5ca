"""The speed-of-light time of one problem instance (SPEC §0.5):

    T_SOL[ms] = 1000 * max( sum_d W_d / P_d , (Q_read + Q_write) / B )

W_d is the arithmetic work counted under dtype path d (one label per shipped operator, several
for a user problem counted by atrex_mcp.problemset.flop_counter), P_d that path's peak, Q the bytes read and
written, B the HBM bandwidth. The larger term names the bound.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atrex_mcp.problemset.hardware import DtypePath, HardwareProfile

Bound = Literal["memory", "compute"]


class Workload(BaseModel):
    """Work and traffic of one problem instance."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flops: dict[DtypePath, int] = Field(
        default_factory=dict, description="Arithmetic work per dtype path (FLOP; integer operations under 'int')."
    )
    bytes_read: int = Field(ge=0, description="Q_read: bytes of the input data (SPEC §0.5 convention, see docs/roofline.md).")
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
    return 1000.0 * max(compute_seconds(workload, profile), memory_seconds(workload, profile))


def bound(workload: Workload, profile: HardwareProfile) -> Bound:
    """Compute-bound only when the compute term is strictly larger (W = 0 is memory-bound)."""
    return "compute" if compute_seconds(workload, profile) > memory_seconds(workload, profile) else "memory"


def shape_record(workload: Workload, profiles: dict[str, HardwareProfile]) -> dict[str, Any]:
    """One shape's entry of roofline.json: W, Q, intensity, and T_SOL and bound on every profile.

    A profile without a peak the work needs gets null for that shape (e.g. xpu-a has no tf32 figure).
    """
    t_sol: dict[str, float | None] = {}
    bounds: dict[str, Bound | None] = {}
    for name, profile in sorted(profiles.items()):
        usable = all(profile.has_peak(p) for p, w in workload.flops.items() if w)
        t_sol[name] = t_sol_ms(workload, profile) if usable else None
        bounds[name] = bound(workload, profile) if usable else None
    return {
        "flops": dict(workload.flops),
        "bytes_read": workload.bytes_read,
        "bytes_written": workload.bytes_written,
        "arithmetic_intensity": arithmetic_intensity(workload),
        "t_sol_ms": t_sol,
        "bound": bounds,
    }
