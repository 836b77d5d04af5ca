"""The run-memory MCP tools: thin adapters over RunService, registered on the server through
its hook (docs/DESIGN.md "Server hooks"): start_run, submit_baseline, record_iteration,
run_state, partial_restart, unmask, package_run.

A run belongs to the client that started it (ServerContext.client_id): every tool sees the
caller's runs and profiles only, and answers another client's run id exactly like one that does
not exist.

Measuring tools go through the server's GPU queue (`ctx.run_job`): timed work gets a GPU to
itself, so an interleaved comparison never shares the device with another job. What a mode may
show is the policy's decision: in benchmark mode roofline figures and S are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from atrex_mcp.errors import AtrexError
from atrex_mcp.runs.iterations import RunService
from atrex_mcp.runs.measure import Judge
from atrex_mcp.runs.models import IterationRecord, KernelTimes, MaskRecord, Plan, RunState
from atrex_mcp.runs.store import RunStore
from atrex_mcp.server.models import OpArg, PackageOutput, PathArg, ShapesArg, SourceArg, ToolOutput

if TYPE_CHECKING:
    from atrex_mcp.server.app import ServerContext

RunIdArg = Annotated[str, Field(min_length=1, max_length=64, description="Run id returned by start_run, e.g. 'run-1a2b3c4d5e6f'.")]
JudgeFactory = Callable[[str], Judge]


class StartRunOutput(ToolOutput):
    run_id: str = Field(description="Pass this to every other run tool.")
    op: str = Field(description="Operator being optimised.")
    shapes: list[str] = Field(description="Target shapes every kernel of the run is measured on.")
    dsl: str = Field(description="Target DSL.")
    hardware: str = Field(description="Hardware profile of the roofline.")
    roofline: dict | None = Field(default=None, description="Per-shape T_SOL, bound, intensity and the profile's sources (optimize mode only).")


class IterationOutput(ToolOutput):
    record: IterationRecord = Field(description="The stored verdict: status (accepted/rejected/failed), reason, timing comparison, source hash.")
    accepted: int | None = Field(description="Iteration number of the run's accepted kernel after this call.")


class RunStateOutput(RunState, ToolOutput):
    """The run as an agent may see it."""


class MaskOutput(ToolOutput):
    mask: MaskRecord = Field(description="The partial restart: seed, fraction, eligible and masked iteration numbers; undo with unmask(mask_id).")


class UnmaskOutput(ToolOutput):
    reverted: list[MaskRecord] = Field(description="Masks undone by this call.")


def _visible(record: IterationRecord, benchmark: bool) -> IterationRecord:
    return record.model_copy(update={"times": KernelTimes(time_ms=record.times.time_ms)}) if benchmark else record


def default_judge_factory(ctx: ServerContext) -> JudgeFactory:
    """The evaluator as judge. The granted device only orders the queue: like evaluate(), the
    judge runs on the process's current CUDA device. With a cluster, the evaluator judges on a
    cluster worker's GPU."""
    if ctx.config.cluster is not None:
        return lambda device: ctx.config.cluster.judge()

    def make(device: str) -> Judge:
        return ctx.service("atrex_mcp.runs.evaluator_judge").EvaluatorJudge(ctx.catalog, state_dir=ctx.state_dir)

    return make


def register_run_tools(server: Any, ctx: ServerContext, judge_factory: JudgeFactory | None = None) -> None:
    """Add the run tools to `server` through `ctx.add_tool` (same errors, redaction, output cap)."""
    database = RunStore(ctx.state_dir)
    make_judge = judge_factory or default_judge_factory(ctx)
    policy = ctx.policy

    def doc_exists(doc_id: str) -> bool:
        try:
            ctx.wiki().read(doc_id, withheld=ctx.withheld)
        except AtrexError:
            return False
        return True

    def store() -> RunStore:
        """The run memory as the calling client sees it."""
        return database.scoped(ctx.client_id())

    def service(judge: Judge | None = None) -> RunService:
        return RunService(store(), ctx.catalog, judge, doc_exists=doc_exists)

    async def measured(mcp_ctx: Context | None, label: str, call: Callable[[RunService, Any, Any], IterationRecord]) -> IterationRecord:
        kind = "timed" if await ctx.has_gpu() else "correctness"
        caller = service()  # bound to the caller here: the job runs on another thread
        return await ctx.run_job(mcp_ctx, kind, label, lambda device, progress, cancel: call(
            RunService(caller.store, ctx.catalog, make_judge(device), doc_exists=doc_exists), progress, cancel))

    def start_run(
        op: OpArg,
        shapes: ShapesArg = None,
        dsl: Annotated[str, Field(max_length=32, description="Target DSL of every kernel in the run.")] = "triton",
        hardware: Annotated[str | None, Field(max_length=64, description="Hardware profile for the roofline; omit for the server's.")] = None,
        workspace: Annotated[str | None, Field(max_length=4096, description="Your working folder, recorded with the run for the audit.")] = None,
    ) -> StartRunOutput:
        """Start an optimisation run: the server keeps its memory (baseline, accepted kernel, every
        iteration with plan and verdict), so nothing is lost between sessions and no claimed
        speed-up goes unverified. Next: submit_baseline with your first correct kernel. Cheap."""
        run = service().start_run(op, shapes, dsl, hardware or ctx.config.hardware, workspace)
        return StartRunOutput(run_id=run.run_id, op=run.op, shapes=run.shapes, dsl=run.dsl, hardware=run.hardware,
                              roofline=None if policy.benchmark else run.roofline)

    async def submit_baseline(run_id: RunIdArg, mcp_ctx: Context, source: SourceArg = None, path: PathArg = None) -> IterationOutput:
        """Submit the run's first kernel. The server checks it on every target shape (and times it
        on a GPU); a correct kernel becomes iteration 0: the baseline, the accepted kernel and the
        rollback point. Costs a full validation (minutes on CPU for large shapes)."""
        text = ctx.candidate_source(source, path)
        record = await measured(mcp_ctx, "submit_baseline",
                                lambda svc, progress, cancel: svc.submit_baseline(run_id, text, progress=progress, cancel=cancel))
        return IterationOutput(record=_visible(record, policy.benchmark), accepted=store().get_run(run_id).accepted)

    async def record_iteration(run_id: RunIdArg, plan: Plan, mcp_ctx: Context, source: SourceArg = None,
                               path: PathArg = None) -> IterationOutput:
        """Submit a new kernel with its plan (measured bottleneck, cited profile ids and wiki ids,
        expected speed-up, risks, one category). The server validates it and times it against the
        accepted kernel in one interleaved measurement; it replaces the accepted kernel only when
        correct and faster beyond the measured noise. Every attempt is kept. Costs a validation plus
        a paired timing on a GPU (on CPU nothing can be timed, so nothing is accepted)."""
        text = ctx.candidate_source(source, path)
        record = await measured(mcp_ctx, "record_iteration",
                                lambda svc, progress, cancel: svc.record_iteration(run_id, plan, text, progress=progress, cancel=cancel))
        return IterationOutput(record=_visible(record, policy.benchmark), accepted=store().get_run(run_id).accepted)

    def run_state(run_id: RunIdArg) -> RunStateOutput:
        """The run's memory as you may see it: baseline and accepted kernel (full source), a running
        summary, and every iteration record not hidden by a partial restart. Cheap."""
        state = service().run_state(run_id, reveal_figures=not policy.benchmark)
        return RunStateOutput(**state.model_dump())

    def partial_restart(
        run_id: RunIdArg,
        fraction: Annotated[float, Field(ge=0.0, le=1.0, description="Share of the visible iteration records to hide (0-1).")],
        seed: Annotated[int, Field(ge=0, description="Seed of the random choice; the same seed on the same state hides the same records.")],
    ) -> MaskOutput:
        """Optimisation dropout: hide a seeded random subset of iteration memories from run_state
        (never the baseline, the accepted kernel or the audit trail), so a fresh start is not anchored
        on old failures. Logged and reversible with unmask. Cheap."""
        return MaskOutput(mask=service().partial_restart(run_id, fraction, seed))

    def unmask(
        run_id: RunIdArg,
        mask_id: Annotated[str | None, Field(max_length=64, description="Mask to undo; omit to undo every live mask of the run.")] = None,
    ) -> UnmaskOutput:
        """Undo a partial restart: the hidden iteration records reappear in run_state. Cheap."""
        return UnmaskOutput(reverted=service().unmask(run_id, mask_id))

    def package_run(
        run_id: RunIdArg,
        out_dir: Annotated[str | None, Field(max_length=4096, description="New or empty workspace folder; default 'atrex-package/<run id>'.")] = None,
    ) -> PackageOutput:
        """Package the run's accepted kernel: the output-contract check, then <op>.py and
        manifest.json (hashes, the accepted-iteration chain, the final measured figures) in a new
        or empty workspace folder. Cheap."""
        target = ctx.workspace.output_path(out_dir or f"atrex-package/{run_id}")
        result = service().package(run_id, target, reveal_figures=not policy.benchmark, denied=ctx.workspace.denied)
        return PackageOutput(**result.model_dump())

    for fn, title, read_only, idempotent in (
        (start_run, "Start an optimisation run", False, False),
        (submit_baseline, "Submit a run's baseline kernel", False, False),
        (record_iteration, "Record a verified iteration", False, False),
        (run_state, "Show a run's memory", True, True),
        (partial_restart, "Partial restart (optimisation dropout)", False, False),
        (unmask, "Undo a partial restart", False, True),
        (package_run, "Package a run's accepted kernel", False, False),
    ):
        ctx.add_tool(fn, title=title, read_only=read_only, idempotent=idempotent)
