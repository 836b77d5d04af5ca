"""profile_kernel: where one shape's time goes, as a stored profile that plans cite by id.

On a GPU with Nsight Compute: the candidate runs in the evaluator's sandbox worker, and ncu
wraps the process that starts it (`--target-processes all`), collecting the Hopper metric set
for the candidate's own DSL kernels only (`--kernel-name`), over a few forward calls; SASS facts
come from the cubins Triton left in the worker's cache. If ncu is missing or fails, the
torch.profiler fallback says so: per-kernel device times from the evaluator's profiled forward,
no counters. On CPU (Triton interpreter) there is no device time at all: only the wall time of
one interpreted call, labelled as such.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from atrex_mcp.catalog import Catalog
from atrex_mcp.errors import AtrexError
from atrex_mcp.profiling import ncu as ncu_mod
from atrex_mcp.profiling.classify import classify
from atrex_mcp.profiling.models import Bottleneck, KernelCounters, ProfileReport
from atrex_mcp.profiling.sass import sass_facts_from_cache

Progress = Callable[[str, float], None]
PROFILED_CALLS = 2
CAPTURE_TIMEOUT_S = 45.0  # a capture that takes longer is not going to finish: fall back and say why
FALLBACK_NOTE_GPU = ("torch.profiler fallback, not Nsight Compute: per-kernel device times of one profiled forward only; "
                     "no hardware counters, so the bottleneck rests on the roofline and kernel durations alone.")
FALLBACK_NOTE_CPU = ("torch.profiler fallback on CPU under the Triton interpreter: no GPU ran, so there are no kernel times and no "
                     "counters; wall_ms is the wall time of one interpreted forward call (input generation included) and says "
                     "nothing about GPU performance.")


def _shape_roofline(catalog: Catalog, op: str, shape: str, hardware: str) -> dict[str, Any] | None:
    from atrex_mcp.runs.roofline_view import run_roofline

    entry = run_roofline(catalog, op, [shape], hardware)["shapes"][shape]
    return entry if entry.get("t_sol_ms") is not None else None


def counters_from_eval(op: str, shape_result: Any, device_kind: str, *, roofline: dict | None, note: str = "") -> ProfileReport:
    """The torch.profiler fallback, built from an evaluator ShapeResult (no extra run)."""
    if device_kind != "cuda":
        wall = shape_result.seconds.get("correctness")
        return ProfileReport(op=op, shape=shape_result.id, tool="torch.profiler", fallback=True, note=FALLBACK_NOTE_CPU,
                             device="cpu (Triton interpreter)", wall_ms=wall * 1e3 if wall is not None else None,
                             bottleneck=Bottleneck(kind="unknown", evidence=["no GPU: nothing was measured on a device"]))
    kernels = [KernelCounters(name=k.name, launches=max(1, k.count), metrics={"duration_ns": k.time_us * 1e3 / max(1, k.count)})
               for k in shape_result.kernels]
    bottleneck = classify(kernels, roofline=roofline)
    return ProfileReport(op=op, shape=shape_result.id, tool="torch.profiler", fallback=True,
                         note=" ".join(filter(None, [note, FALLBACK_NOTE_GPU])), kernels=kernels, bottleneck=bottleneck,
                         roofline=roofline)


def capture_counters(op: str, source: str, shape: str, catalog: Catalog, *, roofline: dict | None,
                     cancel: threading.Event | None = None, ncu: str | None = None,
                     timeout_s: float = CAPTURE_TIMEOUT_S) -> ProfileReport:
    """Nsight Compute on the candidate's own kernels, run in a sandbox worker; AtrexError when
    ncu is absent, fails, or captures none of the candidate's kernels."""
    from atrex_mcp.evaluate.dsl import adapter

    tool = ncu or ncu_mod.ncu_executable()
    if tool is None:
        raise AtrexError("performance", "no_profiler", "Nsight Compute (ncu) is not installed on the server.")
    own = sorted(adapter("triton").own_kernels(source))
    if not own:
        raise AtrexError("performance", "no_dsl_kernel", "The file defines no @triton.jit kernel to profile.")
    with tempfile.TemporaryDirectory(prefix="atrex-ncu-") as tmp:
        work = Path(tmp)
        scratch = work / "worker"
        scratch.mkdir()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # so the job imports this atrex_mcp, checkout or wheel
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH", "")]))
        job = {"op": op, "source": source, "shape": shape, "problems": [str(r) for r in catalog.roots],
               "scratch": str(scratch), "calls": PROFILED_CALLS, "env_before": env}
        (work / "job.json").write_text(json.dumps(job))
        target = [sys.executable, "-m", "atrex_mcp.profiling.capture_job", str(work / "job.json")]
        if cancel is not None and cancel.is_set():
            raise AtrexError("runtime", "cancelled", "The profile was cancelled.")
        # One launch of each own kernel per forward is the common case; more launches are not profiled.
        result = ncu_mod.capture(target, workdir=work, env=env, kernel_regex="^(" + "|".join(map(re.escape, own)) + ")$",
                                 launch_count=PROFILED_CALLS * len(own), timeout_s=timeout_s, ncu=tool)
        outcome = json.loads((work / "job_result.json").read_text()) if (work / "job_result.json").exists() else {}
        if not outcome.get("ok"):
            raise AtrexError("performance", "profiled_run_failed",
                             f"The profiled run did not complete: {outcome.get('error', 'no result')}. ncu said: {result.output_tail[-800:]}")
        if not result.kernels:
            raise AtrexError("performance", "no_kernels_captured",
                             f"ncu captured none of the kernels {', '.join(own)}; its output ended: {result.output_tail[-800:]}")
        sass = sass_facts_from_cache(scratch / ".cache" / "triton")
    calls = int(outcome.get("calls", PROFILED_CALLS))
    kernels = [k.model_copy(update={"launches": max(1, round(k.launches / calls))}) for k in result.kernels]
    return ProfileReport(op=op, shape=shape, tool="ncu", fallback=False, device=outcome.get("device", ""),
                         note=f"Nsight Compute (--clock-control none, kernel replay) over {calls} forward calls, at most "
                              f"{PROFILED_CALLS * len(own)} launches; medians per launch; only the candidate's own Triton "
                              f"kernels ({', '.join(own)}) are profiled; {result.seconds:.0f} s, replay passes per launch "
                              f"{sorted(set(result.passes)) or 'not reported'}.",
                         kernels=kernels, sass=[f for f in sass if f.kernel in own], bottleneck=classify(kernels, roofline=roofline, sass=sass),
                         roofline=roofline, unavailable_metrics=result.unavailable)


def profile_kernel(op: str, source: str, shape: str, catalog: Catalog, *, hardware: str, store: Any | None = None,
                   run_id: str | None = None, reveal_roofline: bool = True, use_ncu: bool = True,
                   ncu_timeout_s: float = CAPTURE_TIMEOUT_S, progress: Progress | None = None,
                   cancel: threading.Event | None = None) -> ProfileReport:
    """Profile one shape of a candidate and store the report (its id goes into plans).

    reveal_roofline=False (benchmark mode): the roofline neither enters the report nor the
    classification's evidence."""
    from atrex_mcp.evaluate import EvalRequest, evaluate
    from atrex_mcp.evaluate.device import has_gpu

    report_progress = progress or (lambda message, fraction: None)
    catalog.visible(op).shape(shape)
    roofline = _shape_roofline(catalog, op, shape, hardware) if reveal_roofline else None
    report: ProfileReport | None = None
    note = ""
    if use_ncu and has_gpu() and ncu_mod.ncu_executable() is not None:
        report_progress("Nsight Compute capture", 0.1)
        try:
            report = capture_counters(op, source, shape, catalog, roofline=roofline, cancel=cancel, timeout_s=ncu_timeout_s)
        except AtrexError as exc:
            note = f"Nsight Compute was tried and failed ({exc.info.category}: {exc.info.message[:1600]})."
    elif use_ncu and has_gpu():
        note = "Nsight Compute (ncu) is not installed on this server."
    if report is None:
        report_progress("torch.profiler fallback", 0.5)
        result = evaluate(EvalRequest(op=op, source=source, shapes=[shape], seeds=1, hardware=hardware, timing=True,
                                      measure_dsl=True), catalog, progress=None, cancel=cancel)
        shape_result = result.shapes[0]
        if not shape_result.correct:
            raise AtrexError("correctness" if result.compiled else "compile", "profile_of_failing_kernel",
                             f"Shape {shape} does not pass ({shape_result.category}): {shape_result.message[:600]}",
                             "Profile a kernel that validates.")
        report = counters_from_eval(op, shape_result, result.device.kind, roofline=roofline, note=note)
        report.device = result.device.name or report.device
    if store is not None:
        import hashlib

        digest = hashlib.sha256(source.encode()).hexdigest()
        report.profile_id = store.save_profile(op=op, shape=shape, source_sha256=digest, tool=report.tool,
                                               report=report.model_dump(mode="json"), run_id=run_id)
    report_progress("done", 1.0)
    return report
