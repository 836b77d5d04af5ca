"""Typed records of an optimisation run: the plan an agent submits, the server's verdict on
each iteration, and the views the tools and the audit print. Pydantic, because these cross
the MCP and CLI JSON edges."""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

from atrex_mcp.profiling.models import BottleneckKind


class Category(str, Enum):
    """The one optimisation category an iteration belongs to (the paper's taxonomy)."""

    tiling = "tiling"
    vectorisation = "vectorisation"
    memory_layout = "memory_layout"
    prefetching = "prefetching"
    synchronisation = "synchronisation"
    split_fusion = "split_fusion"
    instruction_selection = "instruction_selection"
    launch_configuration = "launch_configuration"


class Plan(BaseModel):
    """Why the agent thinks its change will help; the server checks the citations exist."""

    change: str = Field(
        min_length=3,
        max_length=2000,
        description="What the new kernel changes relative to the accepted one, in a sentence or two.",
    )
    bottleneck: BottleneckKind = Field(
        description="The measured bottleneck of the accepted kernel this change attacks: memory, compute, latency, "
        "launch or unknown."
    )
    bottleneck_detail: str = Field(
        default="",
        max_length=2000,
        description="The measurement behind the bottleneck, e.g. 'DRAM 41% of peak, long-scoreboard stalls 63%'.",
    )
    evidence: list[str] = Field(
        min_length=1, description="Ids of stored profiles (from profile_kernel) that show the bottleneck."
    )
    knowledge: list[str] = Field(
        default_factory=list, description="Wiki document ids consulted (from wiki_search / wiki_read)."
    )
    expected_effect: float = Field(
        gt=0, description="Expected speed-up of the new kernel over the accepted one, as a factor (1.15 = 15% faster)."
    )
    risks: list[str] = Field(
        default_factory=list, description="What could go wrong: correctness risks, shapes that may regress."
    )
    category: Category = Field(description="Exactly one optimisation category.")


IterationStatus = Literal["accepted", "rejected", "failed"]


class ShapeCheck(BaseModel):
    """Correctness of one shape as the evaluator judged it."""

    id: str = Field(description="Shape id.")
    correct: bool = Field(description="Whether the kernel's output matched the reference on every seed.")
    category: str | None = Field(default=None, description="Failure category when not correct (evaluator's taxonomy).")
    message: str = Field(default="", description="Failure detail when not correct.")


class ShapeTiming(BaseModel):
    """One shape's interleaved comparison of the accepted kernel (a) and the candidate (c)."""

    id: str = Field(description="Shape id.")
    accepted_ms: float = Field(description="Median time of the accepted kernel in this measurement, ms.")
    candidate_ms: float = Field(description="Median time of the candidate in this measurement, ms.")
    speedup: float = Field(description="Median over pairs of accepted/candidate time (>1: candidate faster).")
    ci_low: float = Field(description="Lower end of the bootstrap confidence interval of the speed-up.")
    ci_high: float = Field(description="Upper end of the bootstrap confidence interval of the speed-up.")
    noise: float = Field(description="Relative IQR of the per-pair time ratios: the measured noise of this shape.")
    pairs: int = Field(description="Number of interleaved (accepted, candidate) pairs.")


class Decision(BaseModel):
    """The server's verdict on one candidate, with the numbers it rests on."""

    accepted: bool = Field(description="True when the candidate is correct and faster beyond measured noise.")
    reason: str = Field(description="Why it was accepted or rejected, in one sentence.")
    speedup: float | None = Field(
        default=None, description="Geometric mean over shapes of the per-shape speed-ups (None when not timed)."
    )
    ci_low: float | None = Field(
        default=None, description="Lower end of the bootstrap confidence interval of the aggregate speed-up."
    )
    ci_high: float | None = Field(
        default=None, description="Upper end of the bootstrap confidence interval of the aggregate speed-up."
    )
    shapes: list[ShapeTiming] = Field(default_factory=list, description="Per-shape comparison.")


class KernelTimes(BaseModel):
    """Absolute figures of one kernel per shape, from the evaluator's own timing."""

    time_ms: dict[str, float | None] = Field(
        default_factory=dict, description="Median time per shape id, ms (None when not timed)."
    )
    score: dict[str, float | None] = Field(
        default_factory=dict, description="S_j = T_SOL / T per shape id (trusted side; hidden in benchmark mode)."
    )


class IterationRecord(BaseModel):
    """One stored iteration; number 0 is the baseline."""

    run_id: str
    number: int = Field(description="0 for the baseline, then 1, 2, … in commit order.")
    kind: Literal["baseline", "iteration"]
    status: IterationStatus = Field(
        description="accepted, rejected (correct but not faster beyond noise) or failed (did not compile or not "
        "correct)."
    )
    reason: str = Field(description="The server's reason for the status.")
    plan: Plan | None = Field(default=None, description="The plan (None for the baseline).")
    source_sha256: str
    compared_to: int | None = Field(
        default=None, description="Number of the accepted iteration this one was timed against."
    )
    checks: list[ShapeCheck] = Field(default_factory=list)
    decision: Decision | None = Field(
        default=None, description="Timing comparison (None when failed before timing, or baseline)."
    )
    times: KernelTimes = Field(
        default_factory=KernelTimes, description="Absolute per-shape figures of this kernel when measured."
    )
    created_at: str
    masked: bool = Field(default=False, description="True while a partial restart hides this record from run_state.")


class MaskRecord(BaseModel):
    """One partial restart: exactly which iteration memories it hid, and whether it was undone."""

    mask_id: str
    run_id: str
    seed: int
    fraction: float
    eligible: list[int] = Field(
        description="Iteration numbers that could be masked at the time (never baseline or accepted)."
    )
    masked: list[int] = Field(description="Iteration numbers hidden by this mask.")
    created_at: str
    reverted_at: str | None = None


class RunRecord(BaseModel):
    """A run as stored: its target, its roofline and its pointers to baseline and accepted kernel."""

    run_id: str
    op: str
    shapes: list[str]
    dsl: str
    hardware: str
    workspace: dict = Field(
        default_factory=dict,
        description="The client's workspace record: root it named, hashes of the visible problem files.",
    )
    roofline: dict = Field(
        default_factory=dict,
        description="Per-shape T_SOL, bound and intensity on the run's hardware, plus the profile's sources "
        "(trusted; policy decides who sees it).",
    )
    baseline: int | None = None
    accepted: int | None = None
    created_at: str


class AuditEvent(BaseModel):
    """One line of the append-only audit trail; never masked."""

    seq: int
    run_id: str
    at: str
    kind: str
    detail: dict


class KernelView(BaseModel):
    """The baseline or the accepted kernel as run_state shows it."""

    number: int = Field(description="Iteration number (0 = baseline).")
    source: str = Field(description="The kernel's full source text.")
    source_sha256: str
    times: KernelTimes = Field(description="Per-shape time (ms) and, where the mode allows, S.")
    speedup_vs_baseline: float | None = Field(
        default=None,
        description="Product of the paired speed-ups along the accepted chain from the baseline to this kernel.",
    )


class CategoryTally(BaseModel):
    tried: int = 0
    accepted: int = 0


class RunSummary(BaseModel):
    """A running summary computed from the visible (unmasked) records only."""

    recorded: int = Field(description="Iterations recorded after the baseline, masked ones included.")
    visible: int = Field(description="Iteration records shown below.")
    masked: int = Field(description="Iteration records hidden by live partial-restart masks.")
    accepted: int = Field(description="Visible accepted iterations.")
    rejected: int = Field(description="Visible iterations that were correct but not faster beyond noise.")
    failed: int = Field(description="Visible iterations that did not compile or were not correct.")
    by_category: dict[str, CategoryTally] = Field(
        default_factory=dict, description="Visible iterations per optimisation category."
    )
    speedup_vs_baseline: float | None = Field(
        default=None,
        description="Accepted kernel against the baseline (product of the accepted chain's paired speed-ups).",
    )


class RunState(BaseModel):
    """What an agent sees of a run: its target, baseline, accepted kernel and unmasked memory."""

    run_id: str
    op: str
    shapes: list[str]
    dsl: str
    hardware: str
    roofline: dict | None = Field(
        default=None,
        description="Per-shape T_SOL and bound on the run's hardware with sources (None where the mode hides it).",
    )
    baseline: KernelView | None = Field(
        default=None, description="Iteration 0, the rollback point (None until submit_baseline succeeds)."
    )
    accepted: KernelView | None = Field(default=None, description="The kernel every new iteration is timed against.")
    summary: RunSummary
    iterations: list[IterationRecord] = Field(
        default_factory=list, description="Unmasked iteration records (plans, verdicts, timings; no sources)."
    )
    live_masks: list[str] = Field(
        default_factory=list, description="Ids of partial-restart masks in force (undo with unmask)."
    )
