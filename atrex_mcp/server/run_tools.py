"""The run-memory MCP tools, thin adapters over RunService: start_run, submit_baseline,
record_iteration, run_state, partial_restart, unmask, package_run. Like atrex_mcp.server.tools,
each is a module-level function taking the server context first.

A run belongs to the client that started it (ServerContext.client_id): every tool sees the
caller's runs and profiles only, and answers another client's run id exactly like one that does
not exist.

Measuring tools go through the server's GPU queue (`app.run_job`): timed work gets a GPU to
itself, so an interleaved comparison never shares the device with another job. What a mode may
show is the policy's decision: each tool returns the policy's view of the service's record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from atrex_mcp.errors import AtrexError
from atrex_mcp.runs.acceptance import NOT_TIMED_NO_GPU
from atrex_mcp.runs.iterations import RunService
from atrex_mcp.runs.measure import Judge
from atrex_mcp.runs.models import IterationRecord, MaskRecord, Plan, RunState
from atrex_mcp.server.gpu_queue import JobKind
from atrex_mcp.server.models import OpArg, PathArg, ShapesArg, SourceArg, ToolSpec
from atrex_mcp.views import PackageOutput, ToolOutput

if TYPE_CHECKING:  # the context binds these functions; app.py imports this module to register them
    from atrex_mcp.server.app import ServerContext

RunIdArg = Annotated[
    str, Field(min_length=1, max_length=64, description="Run id returned by start_run, e.g. 'run-1a2b3c4d5e6f'.")
]
JudgeFactory = Callable[[str], Judge]


class StartRunOutput(ToolOutput):
    run_id: str = Field(description="Pass this to every other run tool.")
    op: str = Field(description="Operator being optimised.")
    shapes: list[str] = Field(description="Target shapes every kernel of the run is measured on.")
    dsl: str = Field(description="Target DSL.")
    hardware: str = Field(description="Hardware profile of the roofline.")
    roofline: dict | None = Field(
        default=None, description="Per-shape T_SOL, bound, intensity and the profile's sources (optimize mode only)."
    )


UNTIMED_ITERATION = (
    "Correct on every target shape, but not timed: this server has no GPU, so no speed-up could "
    "be verified. 'rejected' here does not mean slower; to have this kernel timed against the "
    "accepted one, run the loop on a server with a GPU."
)
UNTIMED_BASELINE = (
    "Correct on every target shape and stored as the baseline, but not timed: this server has no "
    "GPU. Iterations recorded here are checked for correctness only and cannot be accepted; run the "
    "loop on a server with a GPU to time them."
)


class IterationOutput(ToolOutput):
    record: IterationRecord = Field(
        description="The stored verdict: status (accepted/rejected/failed), reason, timing comparison, source hash."
    )
    accepted: int | None = Field(description="Iteration number of the run's accepted kernel after this call.")
    timed: bool = Field(
        default=False,
        description=(
            "True when this kernel was timed on a GPU. False on a server without one: a correct iteration is then "
            "'rejected' only because no speed-up could be verified (notes say so)."
        ),
    )


def untimed_note(record: IterationRecord) -> str | None:
    """What a correct but untimed kernel's verdict means, since its status alone reads as 'not faster'."""
    if record.kind == "baseline":
        untimed = bool(record.times.time_ms) and all(t is None for t in record.times.time_ms.values())
        return UNTIMED_BASELINE if untimed else None
    if record.status == "rejected" and record.decision is not None and record.decision.reason == NOT_TIMED_NO_GPU:
        return UNTIMED_ITERATION
    return None


class RunStateOutput(RunState, ToolOutput):
    """The run as an agent may see it."""


class MaskOutput(ToolOutput):
    mask: MaskRecord = Field(
        description="The partial restart: seed, fraction, eligible and masked iteration numbers; undo with "
        "unmask(mask_id)."
    )


class UnmaskOutput(ToolOutput):
    reverted: list[MaskRecord] = Field(description="Masks undone by this call.")


def default_judge_factory(app: ServerContext) -> JudgeFactory:
    """The evaluator as judge. The granted device only orders the queue: like evaluate(), the
    judge runs on the process's current CUDA device. With a cluster, the evaluator judges on a
    cluster worker's GPU."""
    cluster = app.config.cluster
    if cluster is not None:
        return lambda device: cluster.judge()

    def make(device: str) -> Judge:
        # Deferred for start-up time: the judge pulls in the evaluator (torch) on first use.
        from atrex_mcp.runs.evaluator_judge import EvaluatorJudge

        return EvaluatorJudge(app.catalog, state_dir=app.state_dir)

    return make


def _doc_exists(app: ServerContext, doc_id: str) -> bool:
    try:
        app.wiki().read(doc_id, withheld=app.withheld)
    except AtrexError:
        return False
    return True


def _service(app: ServerContext, judge: Judge | None = None) -> RunService:
    """The run service over the calling client's run memory."""
    return RunService(app.runs(), app.catalog, judge, doc_exists=lambda doc_id: _doc_exists(app, doc_id))


async def _measured(
    app: ServerContext, mcp_ctx: Context | None, label: str, call: Callable[[RunService, Any, Any], IterationRecord]
) -> IterationOutput:
    """`call(service, progress, cancel)` as a queued job with a judge on the granted device; the
    verdict as the policy shows it, with the run's accepted iteration after it."""
    kind: JobKind = "timed" if await app.has_gpu() else "correctness"
    caller = _service(app)  # bound to the caller here: the job runs on another thread
    make_judge = default_judge_factory(app)
    record = await app.run_job(
        mcp_ctx,
        kind,
        label,
        lambda device, progress, cancel: call(
            RunService(caller.store, app.catalog, make_judge(device), doc_exists=caller.doc_exists), progress, cancel
        ),
    )
    accepted = caller.store.get_run(record.run_id).accepted
    note = untimed_note(record)
    timed = any(t is not None for t in record.times.time_ms.values())
    return IterationOutput(
        record=app.policy.iteration_view(record), accepted=accepted, timed=timed, notes=[note] if note else []
    )


def start_run(
    app: ServerContext,
    op: OpArg,
    shapes: ShapesArg = None,
    dsl: Annotated[str, Field(max_length=32, description="Target DSL of every kernel in the run.")] = "triton",
    hardware: Annotated[
        str | None, Field(max_length=64, description="Hardware profile for the roofline; omit for the server's.")
    ] = None,
    workspace: Annotated[
        str | None, Field(max_length=4096, description="Your working folder, recorded with the run for the audit.")
    ] = None,
) -> StartRunOutput:
    """Start an optimisation run: the server keeps its memory (baseline, accepted kernel, every
    iteration with plan and verdict), so nothing is lost between sessions and no claimed
    speed-up goes unverified. Next: submit_baseline with your first correct kernel. Cheap."""
    run = _service(app).start_run(op, shapes, dsl, hardware or app.config.hardware, workspace)
    return StartRunOutput(
        run_id=run.run_id,
        op=run.op,
        shapes=run.shapes,
        dsl=run.dsl,
        hardware=run.hardware,
        roofline=app.policy.run_roofline_view(run.roofline),
    )


async def submit_baseline(
    app: ServerContext, run_id: RunIdArg, mcp_ctx: Context, source: SourceArg = None, path: PathArg = None
) -> IterationOutput:
    """Submit the run's first kernel. The server checks it on every target shape (and times it
    on a GPU); a correct kernel becomes iteration 0: the baseline, the accepted kernel and the
    rollback point. Costs a full validation (minutes on CPU for large shapes)."""
    text = app.candidate_source(source, path)
    return await _measured(
        app,
        mcp_ctx,
        "submit_baseline",
        lambda svc, progress, cancel: svc.submit_baseline(run_id, text, progress=progress, cancel=cancel),
    )


async def record_iteration(
    app: ServerContext, run_id: RunIdArg, plan: Plan, mcp_ctx: Context, source: SourceArg = None, path: PathArg = None
) -> IterationOutput:
    """Submit a new kernel with its plan (measured bottleneck, cited profile ids and wiki ids,
    expected speed-up, risks, one category). The server validates it and times it against the
    accepted kernel in one interleaved measurement; it replaces the accepted kernel only when
    correct and faster beyond the measured noise. Every attempt is kept. Costs a validation plus
    a paired timing on a GPU (on CPU nothing can be timed, so nothing is accepted)."""
    text = app.candidate_source(source, path)
    return await _measured(
        app,
        mcp_ctx,
        "record_iteration",
        lambda svc, progress, cancel: svc.record_iteration(run_id, plan, text, progress=progress, cancel=cancel),
    )


def run_state(app: ServerContext, run_id: RunIdArg) -> RunStateOutput:
    """The run's memory as you may see it: baseline and accepted kernel (full source), a running
    summary, and every iteration record not hidden by a partial restart. Cheap."""
    return RunStateOutput(**app.policy.run_state_view(_service(app).run_state(run_id)).model_dump())


def partial_restart(
    app: ServerContext,
    run_id: RunIdArg,
    fraction: Annotated[
        float, Field(ge=0.0, le=1.0, description="Share of the visible iteration records to hide (0-1).")
    ],
    seed: Annotated[
        int,
        Field(ge=0, description="Seed of the random choice; the same seed on the same state hides the same records."),
    ],
) -> MaskOutput:
    """Optimisation dropout: hide a seeded random subset of iteration memories from run_state
    (never the baseline, the accepted kernel or the audit trail), so a fresh start is not anchored
    on old failures. Logged and reversible with unmask. Cheap."""
    return MaskOutput(mask=_service(app).partial_restart(run_id, fraction, seed))


def unmask(
    app: ServerContext,
    run_id: RunIdArg,
    mask_id: Annotated[
        str | None, Field(max_length=64, description="Mask to undo; omit to undo every live mask of the run.")
    ] = None,
) -> UnmaskOutput:
    """Undo a partial restart: the hidden iteration records reappear in run_state. Cheap."""
    return UnmaskOutput(reverted=_service(app).unmask(run_id, mask_id))


def package_run(
    app: ServerContext,
    run_id: RunIdArg,
    out_dir: Annotated[
        str | None,
        Field(max_length=4096, description="New or empty workspace folder; default 'atrex-package/<run id>'."),
    ] = None,
) -> PackageOutput:
    """Package the run's accepted kernel: the output-contract check, then <op>.py and
    manifest.json (hashes, the accepted-iteration chain, the final measured figures) in a new
    or empty workspace folder. Cheap."""
    target = app.workspace.output_path(out_dir or f"atrex-package/{run_id}")
    result = _service(app).package(run_id, target, policy=app.policy, denied=app.workspace.denied)
    return app.policy.package_view(result)


RUN_TOOLS = (
    ToolSpec(start_run, "Start an optimisation run", read_only=False),
    ToolSpec(submit_baseline, "Submit a run's baseline kernel", read_only=False),
    ToolSpec(record_iteration, "Record a verified iteration", read_only=False),
    ToolSpec(run_state, "Show a run's memory", read_only=True, idempotent=True),
    ToolSpec(partial_restart, "Partial restart (optimisation dropout)", read_only=False),
    ToolSpec(unmask, "Undo a partial restart", read_only=False, idempotent=True),
    ToolSpec(package_run, "Package a run's accepted kernel", read_only=False),
)
