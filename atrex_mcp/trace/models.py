"""Typed JSON forms of the trace refresh: a snapshot's manifest and a comparison of two problem sets.

The manifest holds per-shape call counts and device times, i.e. production timings: like
weights.json it is evaluator-only and sits at the snapshot's root, outside every operator folder
(the catalog's visible view reads only reference.py, input.py and shapes.json).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

MANIFEST_FORMAT = 1


class TraceInput(BaseModel):
    """One imported trace file."""

    path: str = Field(description="The trace file as given on the command line.")
    sha256: str = Field(description="SHA-256 of the file's bytes (compressed bytes for .gz).")
    app: str = Field(description="Application the trace belongs to.")
    device: Literal["gpu", "cpu"] = Field(
        description="'gpu' when device activity was attributed; 'cpu' for a CPU-only trace (operator self time)."
    )
    device_names: list[str] = Field(default_factory=list, description="Devices named in the trace's deviceProperties.")
    attributed_us: float = Field(description="Time attributed from this trace, in microseconds.")
    links: dict[str, int] = Field(
        default_factory=dict,
        description="How device events were tied to host events (correlation, external_id, time_containment, none) "
        "and, for those no host operator claimed, to an operator (gpu_range, kernel_name).",
    )


class ShapeStats(BaseModel):
    """The calls that fell into one (bucketed) shape."""

    count: int = Field(description="Number of calls.")
    device_us: float = Field(description="Total attributed time of those calls, in microseconds.")
    phases: list[str] = Field(description="Phases the calls ran in.")
    defaulted: list[str] = Field(
        default_factory=list,
        description="Parameters taken from the shipped smoke shape because the trace does not record them.",
    )


class OperatorRecord(BaseModel):
    """What the traces say about one benchmark operator."""

    retained: bool = Field(
        description="Whether the snapshot keeps the operator (it needs at least one resolved shape and a shipped "
        "reference)."
    )
    dropped_reason: str | None = Field(default=None, description="Why a mapped operator was not retained.")
    device_us: dict[str, float] = Field(description="Attributed time per phase over all applications, in microseconds.")
    calls: int = Field(description="Calls attributed to the operator.")
    unresolved_calls: int = Field(description="Calls whose shape could not be read from the trace.")
    unresolved_us: float = Field(description="Attributed time of those calls, in microseconds.")
    unresolved_reasons: dict[str, int] = Field(
        default_factory=dict, description="Why shapes were unresolved, with counts (most frequent first)."
    )
    shapes: dict[str, ShapeStats] = Field(default_factory=dict, description="Shape id (as in shapes.json) → its calls.")
    sources: dict[str, int] = Field(
        default_factory=dict,
        description=(
            "How the calls were recognised (host op, 'pattern a+b', generated kernel, kernel name) with counts."
        ),
    )
    benchmark: bool = Field(
        default=True,
        description=(
            "False for an operator the rules recognise but the benchmark does not define (e.g. gelu_and_mul)."
        ),
    )


class FusedKernel(BaseModel):
    """A compiler-generated kernel that computes parts of several operators; its time is split evenly between them."""

    kernel: str = Field(
        description=("Kernel name without its numeric suffix, e.g. 'triton_red_fused_add_cat_mean_mul_neg_pow_rsqrt'.")
    )
    operators: list[str] = Field(description="Operators whose ops it fuses.")
    launches: int = Field(description="Number of launches (device events, or CPU kernel calls).")
    device_us: float = Field(description="Total time, in microseconds.")


class UnmappedCategory(BaseModel):
    """One kind of unmapped time."""

    label: str = Field(description="What it is, e.g. 'GEMM (not a benchmark operator)'.")
    share: float = Field(description="Eq. 3 share of device time; the categories add up to unmapped_share.")
    device_us: float = Field(description="Total time over all applications and phases, in microseconds.")
    top: dict[str, float] = Field(
        default_factory=dict,
        description=("The names behind it (host operator or kernel) with the most time, in microseconds."),
    )


class Manifest(BaseModel):
    """Provenance of a trace-derived snapshot."""

    format: int = Field(default=MANIFEST_FORMAT, description="Manifest format version.")
    kind: Literal["atrex-trace-snapshot"] = Field(default="atrex-trace-snapshot", description="What this directory is.")
    created: str = Field(description="UTC time of the import, ISO 8601.")
    tool_version: str = Field(description="atrex-mcp version that wrote the snapshot.")
    rules_version: str = Field(description="Version of the rules table.")
    rules_sha256: str = Field(description="SHA-256 of the rules table file.")
    phase_mode: Literal["prefill", "decode", "auto"] = Field(description="--phase of the import.")
    decode_max_tokens: int = Field(description="Token threshold for decode when no phase range is present.")
    token_buckets: dict = Field(description="Bucket scheme for dynamic dimensions (from the rules table).")
    device: Literal["gpu", "cpu"] = Field(description="Kind of time the weights are shares of.")
    inputs: list[TraceInput] = Field(description="Imported traces.")
    apps: dict[str, float] = Field(
        description="Card-hour share per application, normalised over the applications with traces."
    )
    apps_file: dict[str, str] | None = Field(default=None, description="The --apps file (path, sha256), if any.")
    problems_source: str = Field(description="Problem set whose references, inputs and smoke shapes were copied.")
    unmapped_share: float = Field(
        description="Eq. 3 share of device time that no rule mapped to a benchmark operator ('other')."
    )
    excluded_share: float = Field(
        description="Eq. 3 share of the mapped operators that the snapshot could not retain, pooled as one."
    )
    unmapped_by_app_phase: dict[str, dict[str, float]] = Field(
        description="Eq. 2 share of 'other' per application and phase."
    )
    unmapped_by_category: dict[str, UnmappedCategory] = Field(
        default_factory=dict,
        description=(
            "What the unmapped time is (gemm, communication, memory, generated, other_ops, unknown), largest first."
        ),
    )
    fused_kernels: list[FusedKernel] = Field(
        default_factory=list,
        description=("Generated kernels that fuse several operators (their time is split between them)."),
    )
    stacks: dict[str, str] = Field(
        default_factory=dict,
        description=("Frameworks the rules table has names for, with the versions the names come from."),
    )
    device_us_by_app_phase: dict[str, dict[str, float]] = Field(
        description="All attributed time per application and phase, in microseconds."
    )
    operators: dict[str, OperatorRecord] = Field(description="Every operator the traces mention, retained or not.")


class WeightChange(BaseModel):
    """One operator's normalised weight in both problem sets."""

    op: str = Field(description="Operator name.")
    a: float | None = Field(description="Weight in A (None: operator absent).")
    b: float | None = Field(description="Weight in B (None: operator absent).")
    delta: float = Field(description="b − a, absent counted as 0.")


class ShapeChanges(BaseModel):
    """Scored shapes of one operator present in only one of the two sets (compared by init and inputs, not id)."""

    op: str = Field(description="Operator name.")
    added: list[dict] = Field(description="Shapes only in B: {id, init, inputs}.")
    removed: list[dict] = Field(description="Shapes only in A: {id, init, inputs}.")
    common: int = Field(description="Shapes in both.")


class SnapshotDiff(BaseModel):
    """`atrex-mcp trace diff A B`."""

    a: str = Field(description="First problem set.")
    b: str = Field(description="Second problem set.")
    operators_added: list[str] = Field(description="Operators only in B.")
    operators_removed: list[str] = Field(description="Operators only in A.")
    weights: list[WeightChange] = Field(
        description="Normalised weights of every operator in either set, largest |delta| first."
    )
    shapes: list[ShapeChanges] = Field(
        description="Shape changes of operators present in both sets (only those with changes)."
    )
    unmapped_share: dict[str, float | None] = Field(
        description="Unmapped share from each set's manifest (None: not a trace snapshot)."
    )
