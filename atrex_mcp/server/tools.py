"""The problem, judging, profiling, packaging and wiki tools: one module-level function per tool,
taking the server context first and the tool's typed arguments after it (the context is bound
by `ServerContext.add_tool`, so an agent sees only the arguments). Each tool wires arguments to a
service and returns the policy's view of the result (atrex_mcp.policy).
"""

from __future__ import annotations

import ast
import threading
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from atrex_mcp import candidate_contract
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate.models import EvalRequest
from atrex_mcp.package import package_source, record_refusal
from atrex_mcp.problemset import roofline
from atrex_mcp.problemset.hardware import load_profile
from atrex_mcp.profiling.models import ProfileReport
from atrex_mcp.server.gpu_queue import JobKind
from atrex_mcp.server.models import (
    DtypePathArg,
    HardwareArg,
    OpArg,
    PathArg,
    ProblemDetail,
    ProblemList,
    ProblemSummary,
    RooflineResult,
    SeedsArg,
    ShapesArg,
    SourceArg,
    ToolSpec,
    WikiReadResult,
    WikiSearchResult,
)
from atrex_mcp.views import PackageOutput, ProfileResult, ValidateResult
from atrex_mcp.wiki.corpus import OP_FAMILIES

if TYPE_CHECKING:  # the context binds these functions; app.py imports this module to register them
    from atrex_mcp.server.app import ServerContext, ThreadProgress

OP_FAMILY_HELP = f"Only this operator family, one of: {', '.join(OP_FAMILIES)}."
ISOLATION_NOTE = (
    "isolation_warnings are sandbox limits of this machine, for the server's operator "
    "(`atrex-mcp doctor` says what to do); nothing for you to change. Each is listed once per session."
)


def list_problems(app: ServerContext) -> ProblemList:
    """List the benchmark problems (operators) this server serves, with their number of scored
    shapes and smoke shape. Cheap; call it first. Then get_problem(op) for one problem's files."""
    problems = []
    for name in app.catalog.names():
        visible = app.catalog.visible(name)
        problems.append(
            ProblemSummary(
                name=name,
                scored_shapes=len(visible.scored_shapes),
                smoke_shape=next((s.id for s in visible.shapes if s.smoke), None),
                forward_inputs=_forward_inputs(visible.reference_source),
            )
        )
    return ProblemList(mode=app.config.mode, knowledge=app.knowledge, hardware=app.config.hardware, problems=problems)


def get_problem(
    app: ServerContext,
    op: OpArg,
    shape_ids: Annotated[
        list[Annotated[str, Field(max_length=64)]] | None,
        Field(
            max_length=1000,
            description="Only these shapes (ids); default every shape. Use it when an answer says "
            "shapes were left out to fit the size cap.",
        ),
    ] = None,
) -> ProblemDetail:
    """Everything needed to write a kernel for one problem: reference.py (the PyTorch Model to
    match), input.py (how inputs are drawn), the shapes of shapes.json, and the output-contract rules.
    In optimize mode each shape also carries its speed-of-light (roofline) figures. Cheap."""
    visible = app.catalog.visible(op)
    for shape_id in shape_ids or ():
        visible.shape(shape_id)
    shapes = app.policy.shapes(visible, app.config.hardware)
    if shape_ids is not None:
        wanted = set(shape_ids)
        shapes = [s for s in shapes if s.id in wanted]
    return ProblemDetail(
        name=op,
        mode=app.config.mode,
        reference_py=visible.reference_source,
        input_py=visible.input_source,
        shapes=shapes,
        rules=_contract_rules(),
        allowed_imports=sorted(candidate_contract.ALLOWED_IMPORTS),
    )


def roofline_lookup(
    app: ServerContext,
    flops: Annotated[
        int, Field(ge=0, description="Your kernel's arithmetic work (FLOPs; integer ops for dtype_path 'int').")
    ] = 0,
    dtype_path: Annotated[
        DtypePathArg, Field(description="Which peak the work runs at: bf16, fp16, fp8_e4m3, tf32, fp32 or int.")
    ] = "bf16",
    bytes_read: Annotated[int, Field(ge=0, description="Bytes your kernel must read from HBM.")] = 0,
    bytes_written: Annotated[int, Field(ge=0, description="Bytes your kernel must write to HBM.")] = 0,
    hardware: HardwareArg = None,
    op: Annotated[
        str | None,
        Field(
            max_length=128, description="Optimize mode only: look up a problem's own figures instead (with `shape`)."
        ),
    ] = None,
    shape: Annotated[str | None, Field(max_length=64, description="Shape id for `op`.")] = None,
) -> RooflineResult:
    """Speed-of-light calculator: T_SOL = max(flops / peak[dtype_path], bytes / HBM bandwidth)
    on a hardware profile, with the bound and arithmetic intensity. Works in every mode on
    your own counts. In optimize mode, `op` + `shape` instead return that problem shape's
    figures. Cheap."""
    profile = load_profile(hardware or app.config.hardware)
    point: roofline.RooflinePoint
    if op is not None or shape is not None:
        app.policy.require_roofline("A problem's roofline figures")
        if op is None or shape is None:
            raise AtrexError("input", "op_and_shape", "Give both `op` and `shape` to look up a problem's figures.")
        visible = app.catalog.visible(op)
        visible.shape(shape)
        figures = app.policy.shape_figures(op, shape, profile.name)
        assert figures is not None, "require_roofline refused benchmark mode, the one mode without figures"
        point = figures
    else:
        workload = roofline.Workload(flops={dtype_path: flops}, bytes_read=bytes_read, bytes_written=bytes_written)
        point = roofline.roofline_point(workload, profile)
    paths = [p for p, w in point.flops.items() if w]
    bandwidth = profile.hbm_bandwidth.value
    assert bandwidth is not None, "HardwareProfile's validator rejects a profile without a bandwidth"
    return RooflineResult(
        hardware=profile.name,
        flops={k: float(v) for k, v in point.flops.items()},
        bytes=float(point.total_bytes),
        arithmetic_intensity=point.arithmetic_intensity,
        compute_ms=point.compute_ms,
        memory_ms=point.memory_ms,
        t_sol_ms=point.t_sol_ms,
        bound=point.bound,
        peaks={p: profile.peak(p) for p in paths},
        bandwidth=float(bandwidth),
        sources=[f"{p} peak: {profile.peaks[p].source}" for p in paths]
        + [f"HBM bandwidth: {profile.hbm_bandwidth.source}"],
        problem=op,
        shape=shape,
    )


def wiki_search(
    app: ServerContext,
    query: Annotated[
        str,
        Field(
            min_length=1,
            max_length=500,
            description="What you need, in words, e.g. 'row reduction rms norm triton' or 'split-k skinny GEMM'.",
        ),
    ],
    category: Annotated[
        str | None,
        Field(
            max_length=64,
            description=(
                "Only this category: hardware, patterns, recipes, pitfalls, profiling, conversion, kernels, source."
            ),
        ),
    ] = None,
    dsl: Annotated[
        str | None, Field(max_length=32, description="Only documents for this language, e.g. 'triton'.")
    ] = None,
    hardware: Annotated[
        str | None, Field(max_length=32, description="Only documents for this hardware, e.g. 'h200'.")
    ] = None,
    op_family: Annotated[str | None, Field(max_length=64, description=OP_FAMILY_HELP)] = None,
    limit: Annotated[int, Field(ge=1, le=20, description="How many hits to return.")] = 5,
) -> WikiSearchResult:
    """Search the GPU optimisation wiki (articles on hardware, patterns, recipes, pitfalls,
    profiling, plus validated Triton reference kernels) by relevance. Returns ids, titles and
    matching snippets; read a whole document with wiki_read. Cheap."""
    hits = app.wiki().search(
        query, category=category, dsl=dsl, hardware=hardware, op_family=op_family, limit=limit, withheld=app.withheld
    )
    return WikiSearchResult(query=query, hits=hits)


def wiki_read(
    app: ServerContext,
    doc_id: Annotated[
        str,
        Field(
            min_length=1, max_length=300, description="A doc_id from wiki_search, e.g. 'docs/patterns/row-reductions'."
        ),
    ],
    offset: Annotated[int, Field(ge=0, description="Character offset to start from, to continue a long document.")] = 0,
    max_chars: Annotated[int, Field(ge=1000, le=40000, description="Most characters of text to return.")] = 20000,
) -> WikiReadResult:
    """Read one wiki document in full (title, tags, sources as fields, then its text), or a window
    of a long one. Cheap."""
    doc = app.wiki().read(doc_id, withheld=app.withheld)
    total = len(doc.text)
    window = doc.text[offset : offset + max_chars]
    notes = []
    if offset + max_chars < total:
        notes.append(
            f"Characters {offset}-{offset + len(window)} of {total} shown; call wiki_read with "
            f"offset={offset + len(window)} to continue."
        )
    return WikiReadResult(doc=doc.model_copy(update={"text": window}), notes=notes)


def package(
    app: ServerContext,
    op: OpArg,
    source: SourceArg = None,
    path: PathArg = None,
    out_dir: Annotated[
        str | None,
        Field(
            max_length=4096,
            description="New or empty folder inside the workspace for the artifact; default 'atrex-package/<op>'.",
        ),
    ] = None,
) -> PackageOutput:
    """Package a finished kernel: check the output contract (one self-contained file, Model with
    the reference's signature, allow-listed imports, no file/network/process access, a Triton
    kernel really launched) and write <op>.py plus manifest.json (sha256 hashes) into a new or
    empty folder of the workspace. Static check only (nothing runs): validate first. Cheap."""
    text = app.candidate_source(source, path)
    app.catalog.visible(op)
    target = app.workspace.output_path(out_dir or f"atrex-package/{op}")
    try:
        result = package_source(text, op, app.catalog, target, denied=app.workspace.denied)
    except candidate_contract.ContractRefused as refused:
        record_refusal(app.state_dir, op, refused.report)
        raise
    return app.policy.package_view(result)


async def validate(
    app: ServerContext,
    op: OpArg,
    source: SourceArg = None,
    path: PathArg = None,
    shapes: ShapesArg = None,
    seeds: SeedsArg = 3,
    timing: Annotated[bool, Field(description="Time correct shapes on the GPU (ignored without a GPU).")] = True,
    ctx: Context = None,  # type: ignore[assignment]
) -> ValidateResult:
    """Judge a candidate kernel: import it in a sandbox, check each requested shape against the
    reference on fresh random inputs, and (on a GPU) time it and attribute device time to your
    Triton kernels. Per shape: correct or the stage/category/message of the first failure.
    Costs seconds per shape on a GPU; on CPU (Triton interpreter, untimed) large shapes are slow,
    so start with shapes=['smoke']. Also reports the output-contract check that package applies
    (`contract`): a correct kernel that fails it would still be refused by package.
    Sends progress; cancelling the call stops the work."""
    text = app.candidate_source(source, path)
    visible = app.catalog.visible(op)
    for shape_id in shapes or ():
        visible.shape(shape_id)
    contract = candidate_contract.check_contract(text, visible.reference_source)
    request = EvalRequest(op=op, source=text, shapes=shapes, seeds=seeds, hardware=app.config.hardware, timing=timing)
    evaluated = await app.evaluate(ctx, request)
    shown = app.isolation_warnings_shown(evaluated.isolation.warnings)
    result = app.policy.validate_view(evaluated, warnings_shown=shown)
    notes = [ISOLATION_NOTE] if result.isolation_warnings else []
    return result.model_copy(update={"contract": contract, "notes": [*result.notes, *notes]})


async def profile_kernel(
    app: ServerContext,
    op: OpArg,
    source: SourceArg = None,
    path: PathArg = None,
    shape: Annotated[
        str, Field(max_length=64, description="The one shape id to profile (from get_problem).")
    ] = "smoke",
    run_id: Annotated[
        str | None,
        Field(max_length=64, description="Optimisation run this profile belongs to (from start_run), if any."),
    ] = None,
    ctx: Context = None,  # type: ignore[assignment]
) -> ProfileResult:
    """Where the time goes for one shape: per-kernel hardware counters of your Triton kernels
    (Nsight Compute on a GPU that has it; otherwise per-kernel device times from torch.profiler,
    marked as the fallback) and the bottleneck they point to (memory, compute, latency, launch).
    The profile is stored: cite its profile_id in a run's plan. Needs a GPU for figures: on CPU
    it checks the kernel on the smoke shape and answers in seconds with what it could not
    measure. Takes a GPU to itself for up to a few minutes; sends progress; cancelling stops it."""
    # Deferred for start-up time: the profiler pulls in the evaluator (torch) on first use.
    from atrex_mcp.profiling import service as profiling

    text = app.candidate_source(source, path)
    app.catalog.visible(op).shape(shape)
    store = app.runs()
    if run_id is not None:
        store.get_run(run_id)  # another client's run is as unknown as a missing one
    kind: JobKind = "timed" if await app.has_gpu() else "correctness"
    cluster = app.config.cluster

    def work(device: str, progress: ThreadProgress, cancel: threading.Event) -> ProfileReport:
        if cluster is None:
            return profiling.profile_kernel(
                op,
                text,
                shape,
                app.catalog,
                hardware=app.config.hardware,
                store=store,
                run_id=run_id,
                policy=app.policy,
                progress=progress,
                cancel=cancel,
                state_dir=app.state_dir,
            )
        # Profiled on a cluster GPU, stored here with the server's other state.
        report: Any = cluster.profile(
            op, text, shape, hardware=app.config.hardware, policy=app.policy, progress=progress, cancel=cancel
        )
        return profiling.save_report(report, store, op=op, shape=shape, source=text, run_id=run_id)

    return app.policy.profile_view(await app.run_job(ctx, kind, f"profile {op}/{shape}", work))


def _forward_inputs(reference_source: str) -> list[str]:
    """Model.forward's parameter names, read from the reference text without importing it."""
    for node in ast.parse(reference_source).body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return [a.arg for a in item.args.args + item.args.kwonlyargs if a.arg != "self"]
    return []


def _contract_rules() -> list[str]:
    return [
        "One self-contained Python file; nothing else travels with it.",
        f"It defines class {candidate_contract.MODEL_CLASS}(torch.nn.Module) whose __init__ and forward take the same "
        "parameters as the reference's.",
        f"Imports only from: {', '.join(sorted(candidate_contract.ALLOWED_IMPORTS))} "
        "(os only to read environment variables: os.environ.get, os.getenv).",
        "No file, network or process access (open, subprocess, socket, torch.load/save, torch.hub, ... are refused), "
        "no eval/exec/__import__, no getattr with a computed name, modules used only through their attributes.",
        "The target DSL is really used: forward launches at least one @triton.jit kernel; time spent in PyTorch or "
        "library kernels counts against DSL adoption.",
        "Outputs must match the reference's dtype, shape and structure; inputs must not be modified.",
    ]


# Registered in this order by build_server; the wiki tools only under a knowledge condition with a wiki.
TOOLS = (
    ToolSpec(validate, "Validate a kernel", read_only=False),
    ToolSpec(profile_kernel, "Profile a kernel", read_only=False),
    ToolSpec(package, "Package a kernel", read_only=False),
    ToolSpec(list_problems, "List problems", read_only=True, idempotent=True),
    ToolSpec(get_problem, "Get a problem", read_only=True, idempotent=True),
    ToolSpec(roofline_lookup, "Roofline calculator", read_only=True, idempotent=True),
    ToolSpec(wiki_search, "Search the GPU wiki", read_only=True, idempotent=True, wiki=True),
    ToolSpec(wiki_read, "Read a wiki document", read_only=True, idempotent=True, wiki=True),
)
