"""The JSON edges of the MCP tools: argument types (with the descriptions an agent reads in the
input schema) and the results of the tools that are not a policy view (which become
`outputSchema` and `structuredContent`). The views an agent is shown, and the fields every result
shares, are atrex_mcp.views.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field

from atrex_mcp.knowledge import Knowledge
from atrex_mcp.views import KNOWLEDGE_FIELD, Mode, ShapeInfo, ToolOutput
from atrex_mcp.wiki.models import WikiDoc, WikiHit

DtypePathArg = Literal["bf16", "fp16", "fp8_e4m3", "tf32", "fp32", "int"]


@dataclass(frozen=True)
class ToolSpec:
    """One tool as build_server registers it: the function (its first parameter is the server
    context; its docstring is the description an agent reads) and its MCP annotations."""

    fn: Callable[..., Any]
    title: str
    read_only: bool
    idempotent: bool = False
    wiki: bool = False  # offered only under a knowledge condition that has a wiki


# ---------------------------------------------------------------- arguments
OpArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        description="Operator (problem) name, e.g. 'rms_norm'. list_problems gives the choices.",
    ),
]
ShapesArg = Annotated[
    list[Annotated[str, Field(max_length=64)]] | None,
    Field(
        max_length=1000,
        description=(
            "Shape ids to run (from get_problem), e.g. ['smoke'] or ['0', '5']. Omit to run every scored shape (slow "
            "on CPU: start with ['smoke'])."
        ),
    ),
]
SourceArg = Annotated[
    str | None,
    Field(
        description=(
            "The candidate kernel file's full text: one Python file defining `Model` with the reference's signature. "
            "Give this or `path`."
        )
    ),
]
PathArg = Annotated[
    str | None,
    Field(
        max_length=4096,
        description=(
            "Path of the candidate file inside the server's workspace root (relative paths start there). Give this "
            "or `source`."
        ),
    ),
]
SeedsArg = Annotated[
    int,
    Field(
        ge=1,
        le=10,
        description="How many fresh input seeds each shape is checked with (more = stronger check, slower).",
    ),
]
HardwareArg = Annotated[
    str | None,
    Field(
        max_length=64,
        description=(
            "Hardware profile for roofline figures, e.g. 'h200' or 'h200-measured'. Omit for the server's profile."
        ),
    ),
]


# ---------------------------------------------------------------- results
class ProblemSummary(BaseModel):
    name: str = Field(description="Operator name; pass it as `op` to the other tools.")
    scored_shapes: int = Field(description="Number of scored shapes (production shapes) of this operator.")
    smoke_shape: str | None = Field(
        description="Id of the small smoke shape for quick checks, or null if the problem has none."
    )
    forward_inputs: list[str] = Field(
        description="Names of Model.forward's tensor arguments, as make_inputs returns them."
    )


class ProblemList(ToolOutput):
    mode: Mode = Field(
        description="benchmark: roofline figures and scores are hidden; optimize: they are shown for your own kernels."
    )
    knowledge: Knowledge = Field(description=KNOWLEDGE_FIELD)
    hardware: str = Field(description="The server's hardware profile (roofline basis in optimize mode).")
    problems: list[ProblemSummary] = Field(description="Every problem the server serves, by name.")


class ProblemDetail(ToolOutput):
    name: str = Field(description="Operator name.")
    mode: Mode = Field(description="Server mode (see list_problems).")
    reference_py: str = Field(description="reference.py: the PyTorch Model your kernel must match.")
    input_py: str = Field(
        description="input.py: make_inputs(seed=, device=, **shape inputs) -> dict of forward's tensors."
    )
    shapes: list[ShapeInfo] = Field(
        description=(
            "The shapes of shapes.json (those named in shape_ids, if given), in its order: id, init and inputs as "
            'stored, smoke true for the smoke shape. The file itself is {"op": name, "shapes": [these]}, so it is '
            "not sent again."
        )
    )
    rules: list[str] = Field(
        description="The output contract your kernel file must satisfy (checked by validate and package)."
    )
    allowed_imports: list[str] = Field(description="Top-level modules a kernel file may import.")

    uncut: ClassVar[frozenset[str]] = frozenset(
        {"name", "mode", "reference_py", "input_py", "rules", "allowed_imports"}
    )
    truncation_hint: ClassVar[str] = "Ask get_problem again with shape_ids for the shapes that were left out."


class RooflineResult(ToolOutput):
    hardware: str = Field(description="Hardware profile used.")
    flops: dict[str, float] = Field(description="Work per dtype path that entered the calculation.")
    bytes: float = Field(description="Bytes moved (read + written).")
    arithmetic_intensity: float | None = Field(description="FLOP per byte; null when bytes is 0.")
    compute_ms: float = Field(description="sum over dtype paths of W_d / peak_d, in ms.")
    memory_ms: float = Field(description="bytes / HBM bandwidth, in ms.")
    t_sol_ms: float = Field(description="Speed-of-light time: max(compute_ms, memory_ms).")
    bound: Literal["memory", "compute"] = Field(description="Which side sets t_sol_ms.")
    peaks: dict[str, float] = Field(description="Peak rate used per dtype path, FLOP/s.")
    bandwidth: float = Field(description="HBM bandwidth used, bytes/s.")
    sources: list[str] = Field(description="Where the peak figures come from.")
    problem: str | None = Field(
        default=None, description="The problem the figures belong to, when looked up by op/shape (optimize mode only)."
    )
    shape: str | None = Field(default=None, description="The shape looked up, with `problem`.")


class WikiSearchResult(ToolOutput):
    query: str = Field(description="The query as searched.")
    hits: list[WikiHit] = Field(description="Best matches first; pass a doc_id to wiki_read.")


class WikiReadResult(ToolOutput):
    doc: WikiDoc = Field(description="The document (long texts are cut; see notes).")
