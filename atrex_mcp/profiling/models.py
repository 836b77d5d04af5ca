"""What a profile says, as typed records: per-kernel counters, SASS facts, the bottleneck."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

BottleneckKind = Literal["memory", "compute", "latency", "launch", "unknown"]


class KernelCounters(BaseModel):
    """Hardware counters of one kernel (median over its profiled launches), keyed by metric key."""

    name: str = Field(description="Kernel name as the profiler reports it.")
    launches: int = Field(description="Launches per forward call aggregated into these figures.")
    origin: str = Field(
        default="",
        description="Which code it came from (the evaluator's DSL attribution): candidate_dsl (your own "
        "kernel in the target DSL), generated (torch.compile/Inductor), library (cuBLAS, cuDNN, "
        "flash…) or framework (PyTorch/aten, copies).",
    )
    block: str = Field(default="", description="Block size, e.g. '(128, 1, 1)'.")
    grid: str = Field(default="", description="Grid size.")
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="Metric key → value in base units (ns, bytes, %, count); see atrex_mcp.profiling.metrics.",
    )


class SassFacts(BaseModel):
    """What the machine code of one kernel shows, from cuobjdump -sass."""

    kernel: str
    instructions: int = Field(description="Static SASS instruction count.")
    hgmma: int = Field(description="HGMMA (Hopper warpgroup MMA, wgmma) instructions.")
    hmma: int = Field(description="HMMA (mma.sync) instructions.")
    global_loads: dict[str, int] = Field(default_factory=dict, description="LDG count by access width in bits.")
    global_stores: dict[str, int] = Field(default_factory=dict, description="STG count by access width in bits.")
    local_loads: int = Field(description="LDL instructions (register spills or local arrays).")
    local_stores: int = Field(description="STL instructions.")
    tma: int = Field(description="TMA bulk-copy instructions (UTMALDG/UTMASTG/UBLKCP).")
    cp_async: int = Field(description="LDGSTS (cp.async) instructions.")
    facts: list[str] = Field(default_factory=list, description="The above in plain sentences.")


class Bottleneck(BaseModel):
    """The classification and the short evidence it rests on."""

    kind: BottleneckKind = Field(description="memory, compute, latency, launch or unknown.")
    evidence: list[str] = Field(
        default_factory=list, description="The measurements behind the classification, one per line."
    )


class ProfileReport(BaseModel):
    """A stored profile: cite its profile_id as evidence in a plan."""

    profile_id: str | None = Field(default=None, description="Id under which the profile is stored.")
    op: str
    shape: str
    tool: Literal["ncu", "torch.profiler"] = Field(description="Which profiler produced the figures.")
    fallback: bool = Field(description="True when this is the torch.profiler fallback, not Nsight Compute.")
    note: str = Field(default="", description="What this profile can and cannot tell (always set for the fallback).")
    device: str = Field(default="", description="Device the kernel ran on.")
    kernels: list[KernelCounters] = Field(default_factory=list)
    wall_ms: float | None = Field(default=None, description="Wall time of one forward call (fallback only), ms.")
    time_ms: float | None = Field(
        default=None,
        description="The evaluator's median device time per call (GPU fallback only; "
        "ncu's replayed durations are not a timing), ms.",
    )
    dsl_share: float | None = Field(
        default=None,
        description="Share of the profiled device time in your own target-DSL kernels; null without device time.",
    )
    sass: list[SassFacts] = Field(
        default_factory=list, description="SASS facts per kernel, where cuobjdump was available."
    )
    bottleneck: Bottleneck
    roofline: dict | None = Field(default=None, description="T_SOL and bound of this shape (optimise mode only).")
    unavailable_metrics: list[str] = Field(
        default_factory=list, description="Metrics of the set this ncu/GPU did not provide."
    )
