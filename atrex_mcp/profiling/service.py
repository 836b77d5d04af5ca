"""profile_kernel: where one shape's time goes, as a stored profile that plans cite by id.

On a GPU with Nsight Compute: ncu wraps the evaluator's sandbox worker itself
(`LaunchOptions(wrapper=[ncu, …])`, so the worker is ncu's application process); the worker
checks the shape (compiles and autotunes outside any range), then runs a few forwards inside
the NVTX range `atrex_forward`, and ncu profiles only the kernels launched in that range (every
kernel of the forward, none of input generation). SASS facts come from the cubins Triton left
in the worker's cache. If ncu is missing or fails, the torch.profiler fallback says so:
per-kernel device times, attribution and DSL share from the evaluator's profiled forward, no
counters. On CPU (Triton interpreter) there is no device time at all: the smoke shape is checked
and its interpreted call's wall time reported, labelled as such; a larger shape is not run (minutes
of interpretation that measure nothing), and its profile says what a GPU one would hold. Each
kernel's origin is the evaluator's DSL attribution.
"""

from __future__ import annotations

import functools
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.problemset.roofline import shape_roofline
from atrex_mcp.profiling import ncu as ncu_mod
from atrex_mcp.profiling.classify import classify, roofline_evidence
from atrex_mcp.profiling.models import Bottleneck, KernelCounters, ProfileReport
from atrex_mcp.profiling.sass import sass_facts_from_cache
from sandbox import scratch as scratch_files

if TYPE_CHECKING:  # handed in by the server, which imports this module
    from atrex_mcp.policy import Policy

Progress = Callable[[str, float], None]
PROFILED_CALLS = 2
MAX_LAUNCHES_PER_FORWARD = (
    8  # --launch-count = PROFILED_CALLS x this; a longer forward is profiled in part (said in the note)
)
CAPTURE_TIMEOUT_S = 45.0  # a capture that takes longer is not going to finish: fall back and say why
FALLBACK_NOTE_GPU = (
    "torch.profiler fallback, not Nsight Compute: per-kernel device times of one profiled forward only; "
    "no hardware counters, so the bottleneck rests on the roofline and kernel durations alone."
)
NCU_NEEDS_UNPRIVILEGED_WORKER = (
    "Nsight Compute was not used: it needs the profiled worker to read the whole file system (protected roots "
    "excepted), which is allowed only when sandbox workers run as an unprivileged uid, and here they cannot (the "
    "interpreter is not reachable by uid 65534, or the server does not run as root)."
)
NOT_RUN_ON_CPU = (
    "No GPU on this server, so shape {shape} was not run: under the Triton interpreter it would "
    "take minutes and measure nothing. The kernel was checked for correctness on the smoke shape "
    "({smoke}) only. On a GPU server this profile holds per-kernel hardware counters (Nsight Compute) "
    "or device times (the torch.profiler fallback), the DSL share and a bottleneck class; here it "
    "holds only the shape's roofline figures, in optimize mode."
)
FALLBACK_NOTE_CPU = (
    "torch.profiler fallback on CPU under the Triton interpreter: no GPU ran, so there are no kernel times and no "
    "counters; wall_ms is the wall time of one interpreted forward call (input generation included) and says "
    "nothing about GPU performance."
)


def _shape_roofline(catalog: Catalog, op: str, shape: str, hardware: str) -> dict[str, Any] | None:
    """The shape's roofline summary (None for a shape without one, e.g. the smoke shape)."""
    hidden = catalog.hidden(op)
    if hidden.roofline_entry(shape) is None:
        return None
    return shape_roofline(hidden, shape, hardware).summary()


def counters_from_eval(
    op: str, shape_result: Any, device_kind: str, *, roofline: dict | None, note: str = ""
) -> ProfileReport:
    """The torch.profiler fallback, built from an evaluator ShapeResult (no extra run): its
    kernels keep the evaluator's attribution (origin) and DSL share."""
    if device_kind != "cuda":
        wall = shape_result.seconds.get("correctness")
        evidence = ["no GPU: nothing was measured on a device"] + (
            [roofline_evidence(roofline, None)] if roofline else []
        )
        return ProfileReport(
            op=op,
            shape=shape_result.id,
            tool="torch.profiler",
            fallback=True,
            note=FALLBACK_NOTE_CPU,
            device="cpu (Triton interpreter)",
            wall_ms=wall * 1e3 if wall is not None else None,
            bottleneck=Bottleneck(kind="unknown", evidence=evidence),
            roofline=roofline,
        )
    kernels = [
        KernelCounters(
            name=k.name,
            launches=max(1, k.count),
            origin=k.origin,
            metrics={"duration_ns": k.time_us * 1e3 / max(1, k.count)},
        )
        for k in shape_result.kernels
    ]
    return ProfileReport(
        op=op,
        shape=shape_result.id,
        tool="torch.profiler",
        fallback=True,
        note=" ".join(filter(None, [note, FALLBACK_NOTE_GPU])),
        kernels=kernels,
        bottleneck=classify(kernels, roofline=roofline),
        roofline=roofline,
        time_ms=shape_result.time_ms,
        dsl_share=shape_result.dsl_share,
    )


def capture_counters(
    op: str,
    source: str,
    shape: str,
    catalog: Catalog,
    *,
    roofline: dict | None,
    hardware: str = "h200",
    cancel: threading.Event | None = None,
    ncu: str | None = None,
    timeout_s: float = CAPTURE_TIMEOUT_S,
    openings: ncu_mod.SandboxOpenings = ncu_mod.NCU_OPENINGS,
    state_dir: Path | None = None,
) -> ProfileReport:
    """Nsight Compute on the forward's kernels, with ncu wrapping the sandbox worker; AtrexError
    when ncu is absent, fails, runs past `timeout_s`, or captures no kernel. `openings`: what
    the worker's Landlock domain leaves open for ncu's injected library; `state_dir`: the serving
    process's state directory, which the worker may not read."""
    from atrex_mcp.evaluate import NVTX_FORWARD, CandidateFailed, LaunchOptions, open_session
    from atrex_mcp.evaluate.dsl import adapter, dsl_share
    from atrex_mcp.evaluate.stop import StopSignal

    tool = ncu or ncu_mod.ncu_executable()
    if tool is None:
        raise AtrexError("performance", "no_profiler", "Nsight Compute (ncu) is not installed on the server.")
    triton = adapter("triton")
    own = triton.own_kernels(source)
    if not own:
        raise AtrexError("performance", "no_dsl_kernel", "The file defines no @triton.jit kernel to profile.")
    limit = PROFILED_CALLS * MAX_LAUNCHES_PER_FORWARD
    device = ""
    with tempfile.TemporaryDirectory(prefix="atrex-ncu-") as tmp:
        scratch = Path(tmp)
        log_name = "tmp/ncu.csv"  # ncu runs as the worker's user: only the scratch dir is writable
        log_file = scratch / log_name

        def attempt(metrics: list[str], left_s: float) -> tuple[list[str], ncu_mod.Attempt]:
            nonlocal device
            scratch_files.unlink(scratch, log_name)
            wrapper = ncu_mod.ncu_command(
                [], metrics, log_file, ncu=tool, nvtx_range=NVTX_FORWARD, launch_count=limit, child_processes=False
            )
            returncode: int | None = 0
            problem = ""
            try:
                with open_session(
                    catalog,
                    op,
                    source,
                    shapes=[shape],
                    hardware=hardware,
                    seeds=1,
                    timeout_s=left_s,
                    launch=LaunchOptions(wrapper=wrapper, state_dir=state_dir, **openings.launch_fields()),
                    scratch=scratch,
                    cancel=StopSignal(cancel, left_s),
                ) as worker:
                    checked = worker.check(shape)
                    if not checked.correct:
                        raise AtrexError(
                            "correctness",
                            "profile_of_failing_kernel",
                            f"Shape {shape} does not pass ({checked.category}): {checked.message[:600]}",
                            "Profile a kernel that validates.",
                        )
                    worker.forwards(shape, calls=PROFILED_CALLS, nvtx=NVTX_FORWARD)
                    device = worker.session.worker_device.get("name", "")
            except CandidateFailed as exc:  # e.g. ncu refused a metric and the worker went with it
                returncode, problem = 1, f"The profiled worker failed: {exc}"
            except AtrexError as exc:
                if exc.info.category == "sandbox_start_failed":  # ncu itself did not start the worker
                    returncode, problem = 1, exc.info.message
                elif exc.info.category == "cancelled" and not (cancel is not None and cancel.is_set()):
                    returncode = None  # our deadline, not the caller's cancel
                else:
                    raise
            log = ncu_mod.read_log(scratch, log_name)
            if returncode == 0 and "==ERROR==" in log:
                returncode = 1
            return wrapper, ncu_mod.Attempt(returncode, ncu_mod.printed_lines(problem, "", log), log)

        result = ncu_mod.run_with_retries(attempt, timeout_s=timeout_s)
        if not result.kernels:
            raise AtrexError(
                "performance",
                "no_kernels_captured",
                f"ncu profiled no kernel inside the NVTX range {NVTX_FORWARD}; its output ended: "
                f"{result.output_tail[-800:]}",
            )
        sass = sass_facts_from_cache(scratch / ".cache" / "triton")
    profiled = sum(k.launches for k in result.kernels)
    kernels = [
        k.model_copy(
            update={"launches": max(1, round(k.launches / PROFILED_CALLS)), "origin": triton.origin(k.name, own)}
        )
        for k in result.kernels
    ]
    share = dsl_share([(k.name, k.metrics.get("duration_ns", 0.0) * k.launches, k.origin) for k in kernels])
    cut = (
        f" The limit of {limit} launches was reached: later launches of the forward were not profiled."
        if profiled >= limit
        else ""
    )
    return ProfileReport(
        op=op,
        shape=shape,
        tool="ncu",
        fallback=False,
        device=device,
        note=f"Nsight Compute (--clock-control none, kernel replay) wrapping the sandboxed worker, over "
        f"{PROFILED_CALLS} forward calls inside the NVTX range {NVTX_FORWARD}: every kernel of the forward "
        f"(input generation, the correctness check and compilation are outside it); medians per launch; "
        f"{result.seconds:.0f} s, replay passes per launch {sorted(set(result.passes)) or 'not reported'}.{cut}",
        kernels=kernels,
        sass=[f for f in sass if f.kernel in own],
        dsl_share=share,
        bottleneck=classify(kernels, roofline=roofline, sass=sass),
        roofline=roofline,
        unavailable_metrics=result.unavailable,
    )


def ncu_refusal(gpu: bool, ncu_found: bool, worker_drops_uid: bool) -> str | None:
    """Why this profile does not use ncu (a note for the fallback), "" when there is nothing to
    say (no GPU, or ncu not asked for), None when ncu is to be used."""
    if not gpu:
        return ""
    if not ncu_found:
        return "Nsight Compute (ncu) is not installed on this server."
    return None if worker_drops_uid else NCU_NEEDS_UNPRIVILEGED_WORKER


def _worker_drops_uid() -> bool:
    """Whether sandbox workers run as an unprivileged uid here (the ncu opening relies on it)."""
    from sandbox.launcher import import_paths, isolation_plan

    return bool(isolation_plan(import_paths())["drop_uid"])


def profile_kernel(
    op: str,
    source: str,
    shape: str,
    catalog: Catalog,
    *,
    hardware: str,
    store: Any | None = None,
    run_id: str | None = None,
    policy: Policy | None = None,
    use_ncu: bool = True,
    ncu_timeout_s: float = CAPTURE_TIMEOUT_S,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    state_dir: Path | None = None,
) -> ProfileReport:
    """Profile one shape of a candidate and store the report (its id goes into plans).
    `state_dir`: the serving process's state directory, which the sandbox worker may not read.

    Whether the shape's roofline enters the report and the classification's evidence is
    `policy.profile_roofline`'s decision (the server passes its policy; without one, the
    operator's own scripts get it)."""
    from atrex_mcp.evaluate import EvalRequest, LaunchOptions, evaluate
    from atrex_mcp.evaluate.device import has_gpu

    report_progress = progress or (lambda message, fraction: None)
    catalog.visible(op).shape(shape)
    figures = functools.partial(_shape_roofline, catalog, op, shape, hardware)
    roofline = policy.profile_roofline(figures) if policy is not None else figures()
    report: ProfileReport | None = None
    gpu_present = has_gpu()
    gpu = use_ncu and gpu_present
    found = gpu and ncu_mod.ncu_executable() is not None
    note = ncu_refusal(gpu, found, found and _worker_drops_uid()) or ""
    if found and not note:
        report_progress("Nsight Compute capture", 0.1)
        try:
            report = capture_counters(
                op,
                source,
                shape,
                catalog,
                roofline=roofline,
                hardware=hardware,
                cancel=cancel,
                timeout_s=ncu_timeout_s,
                state_dir=state_dir,
            )
        except AtrexError as exc:
            note = f"Nsight Compute was tried and failed ({exc.info.category}: {exc.info.message[:1600]})."
    if report is None:
        report_progress("torch.profiler fallback", 0.5)
        # Without a GPU nothing is measured: the smoke shape stands in for the correctness check.
        smoke = None if gpu_present else next((s.id for s in catalog.visible(op).shapes if s.smoke), None)
        run_shape = smoke or shape
        result = evaluate(
            EvalRequest(
                op=op, source=source, shapes=[run_shape], seeds=1, hardware=hardware, timing=True, measure_dsl=True
            ),
            catalog,
            progress=None,
            cancel=cancel,
            launch=LaunchOptions(state_dir=state_dir),
        )
        shape_result = result.shapes[0]
        if not shape_result.correct:
            raise AtrexError(
                "correctness" if result.compiled else "compile",
                "profile_of_failing_kernel",
                f"Shape {run_shape} does not pass ({shape_result.category}): {shape_result.message[:600]}",
                "Profile a kernel that validates.",
            )
        report = counters_from_eval(op, shape_result, result.device.kind, roofline=roofline, note=note)
        if run_shape != shape:
            report = report.model_copy(
                update={"shape": shape, "wall_ms": None, "note": NOT_RUN_ON_CPU.format(shape=shape, smoke=run_shape)}
            )
        if result.device.kind == "cuda":  # on CPU the report keeps the label validate uses, not the machine's arch
            report.device = result.device.name or report.device
    if store is not None:
        save_report(report, store, op=op, shape=shape, source=source, run_id=run_id)
    report_progress("done", 1.0)
    return report


def save_report(
    report: ProfileReport, store: Any, *, op: str, shape: str, source: str, run_id: str | None
) -> ProfileReport:
    """Store `report` (its profile_id is set) so that plans can cite it."""
    import hashlib

    digest = hashlib.sha256(source.encode()).hexdigest()
    report.profile_id = store.save_profile(
        op=op, shape=shape, source_sha256=digest, tool=report.tool, report=report.model_dump(mode="json"), run_id=run_id
    )
    return report
