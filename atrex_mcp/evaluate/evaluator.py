"""evaluate(): the three-stage gate for one candidate on one operator.

Trusted side (this process): draws fresh seeds, generates inputs and reference outputs,
loads candidate outputs as data, compares, checks timing integrity, attributes kernels,
scores. Untrusted side (sandbox worker): imports the candidate, generates the same inputs
from the same seeds (make_inputs is deterministic per seed and device, and the worker's
inputs are confirmed by exact byte sums), runs, times, profiles. Inputs are therefore never
shipped between processes — only seeds go in and outputs come out, whatever the shape size —
and the worker never receives a reference output.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import secrets
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from atrex_mcp.errors import AtrexError, ErrorInfo
from atrex_mcp.evaluate import device, dsl, graph_witness, reference_graph, scoring, timing_checks, timing_witness
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.baselines import baseline_source
from atrex_mcp.evaluate.compare import CompareResult, check_structure, compare_outputs
from atrex_mcp.evaluate.leakguard import LeakGuard
from atrex_mcp.evaluate.models import (
    NOT_TIMED_BY_REQUEST,
    EvalRequest,
    EvalResult,
    Isolation,
    KernelTime,
    ShapeResult,
    TimingStats,
)
from atrex_mcp.evaluate.session import Failure, Session, protected_roots, source_defines_model
from atrex_mcp.evaluate.standby import Spare, Standby
from atrex_mcp.evaluate.stop import EvaluationCancelled, StopSignal
from atrex_mcp.evaluate.transfer import OutputRejected, arena_bytes, manifest_bytes, output_bytes
from atrex_mcp.problemset.catalog import Catalog, Shape, VisibleProblem
from sandbox import gpu_cache
from sandbox.launcher import Cancelled, LaunchSpec
from sandbox.messages import (
    BurstRequest,
    FetchRequest,
    InitRequest,
    IntegrityRequest,
    KeepRequest,
    LoadRequest,
    ProfileRequest,
    RunRequest,
    ShapePayload,
    TimeRequest,
)
from sandbox.timing import (
    call_order,
    digest,
    flush_bytes_for,
    input_checksums,
    median_ci,
    poison,
    reuse_phase,
)

Progress = Callable[[str, float], None]

CANDIDATE_FILE = "candidate.py"
TIMING_INPUT_BUDGET_BYTES = 2 << 30  # fresh timing input sets kept on the GPU at once
CHECKABLE_SETS = 10  # input sets that let the reuse check decide (sandbox.timing.reuse_checkable) ...
TIMING_MEMORY_SHARE = 0.2  # ... for which the budget grows, up to this share of the GPU's memory
MIN_TIMED_CALLS, MAX_TIMED_CALLS = 20, 200
# The timed calls stop once the median's ~95 % confidence interval is within ±1 % of it (from MIN_TIMED_CALLS
# on, checked every 10 calls; for calls whose MIN_TIMED_CALLS take over 2 s, from 5 on, every 5; runs that
# reuse input sets keep their planned calls): sandbox.timing.plan_calls and time_calls, in the worker.
TIMING_STOP_RELATIVE = 0.01
CHECKED_TIMED_SETS = 3
PINNED_SLACK_BYTES = (
    4 << 30
)  # cached GPU memory this process may keep beside a held reference output (_cache_pins_memory)
# The next seed's reference is made while the worker runs (Trial.correctness) where making one
# seed's takes at most this much memory and this share of the GPU's (Trial._overlaps).
OVERLAP_MAX_BYTES = 1 << 30
OVERLAP_MEMORY_SHARE = 0.01
CPU_FLUSH_BYTES = 1 << 20  # the host-clock loop on CPU (workers.CandidateWorker.time): no device L2 to sweep
CPU_HOST_MEMORY_BYTES = 8 << 30
GPU_HOST_MEMORY_BYTES = 32 << 30


def _flag_forged(result: ShapeResult, median_ms: float, verdict: timing_witness.Witness) -> None:
    """timing_forged on `result` when `median_ms` lies below the floor of the witness that judged it."""
    if verdict.forged:
        kind = "replayed in a CUDA graph" if verdict.graph else "back to back"
        result.integrity.append(tx.TIMING_FORGED)
        result.message = (
            f"The reported median ({median_ms:.4g} ms) lies below what the judge's own clock "
            f"witnessed: {verdict.calls} calls {kind} left {verdict.per_call_ms:.4g} ms per call, "
            f"which allows no median under {verdict.floor_ms:.4g} ms."
        )


def _seed() -> int:
    return secrets.randbelow(2**31 - 1)


def _select_shapes(problem: VisibleProblem, ids: list[str] | None) -> list[Shape]:
    if ids is None:
        return list(problem.scored_shapes)
    return [problem.shape(i) for i in ids]


def timing_sets(set_bytes: int, device_memory_bytes: int | None) -> int:
    """How many input sets a shape's timing loop gets, each holding `set_bytes` (inputs and the
    output the loop keeps per set): as many as TIMING_INPUT_BUDGET_BYTES holds (up to one per
    timed call), and for large inputs at least CHECKABLE_SETS where TIMING_MEMORY_SHARE of the
    GPU holds them, so fewer shapes must give up reusing sets (sandbox.timing.fit_calls_to_sets)."""
    set_bytes = max(set_bytes, 1)
    share = int(TIMING_MEMORY_SHARE * device_memory_bytes) if device_memory_bytes else TIMING_INPUT_BUDGET_BYTES
    budget = max(TIMING_INPUT_BUDGET_BYTES, min(CHECKABLE_SETS * set_bytes, share))
    return int(max(2, min(MAX_TIMED_CALLS, budget // set_bytes)))


def _copy_structure(value: Any, device: torch.device | str | None = None) -> Any:
    """A copy of an output (tensor, tuple or dict of tensors), on `device` (default: where it is)."""

    def copy(t: torch.Tensor) -> torch.Tensor:
        return t.clone() if device is None else t.to(device, copy=True)

    if isinstance(value, dict):
        return {k: copy(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(copy(v) for v in value)
    return copy(value)


def _cache_pins_memory() -> bool:
    """Whether this process, its cache released, still reserves more than PINNED_SLACK_BYTES of
    GPU memory that it does not use. The caching allocator can place a reference output in the
    segment of a larger intermediate freed before it, and empty_cache releases no segment with a
    live block in it; that memory would stay pinned while the worker, which shares the GPU, runs.
    The reference graphs' pools are reserved on purpose and left out (reference_graph.pooled_bytes)."""
    return (
        torch.cuda.is_initialized()
        and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() - reference_graph.pooled_bytes()
        > PINNED_SLACK_BYTES
    )


GRAPH_OUT_OF_MEMORY = "the graph burst's input sets and the judge's copies of them did not fit in GPU memory"


class _HarnessOutOfMemory(Exception):
    """The trusted side ran out of GPU memory judging an output: no verdict on the candidate."""


@contextmanager
def _harness_memory(doing: str) -> Iterator[None]:
    """A CUDA out-of-memory error of this process while `doing` becomes _HarnessOutOfMemory, so
    the shape gets a harness_oom result and the other shapes go on. Its traceback, which holds
    the tensors, is dropped once the caller has handled it."""
    try:
        yield
    except torch.OutOfMemoryError:
        raise _HarnessOutOfMemory(
            f"The harness ran out of GPU memory {doing}; this is no verdict on the candidate."
        ) from None


def _release_cached_gpu_memory() -> None:
    """Hand the caching allocator's free blocks back to the driver, past the little a process
    keeps (sandbox.gpu_cache). Called before the sandbox worker, another process on the same GPU,
    runs: it cannot use blocks cached here. The reference graphs' pools count as kept: empty_cache
    cannot hand them back while the graphs live (reference_graph.pooled_bytes)."""
    gpu_cache.release(gpu_cache.KEEP_BYTES + reference_graph.pooled_bytes())


@dataclass
class SeedReference:
    """One correctness seed's reference output, its input checksums, and the memory this process
    held making them (Trial.seed_reference)."""

    output: Any
    checksums: dict[str, int]
    footprint_bytes: int


class _Ahead:
    """The next seed's reference, made while the worker runs the current seed (Trial.correctness
    passes it to Session.call as `meanwhile`). A failure to make it leaves `made` None, and the
    stage makes it again at its turn, where it fails as it would have without the overlap."""

    def __init__(self, trial: Trial, shape: Shape, seed: int):
        self.trial, self.shape, self.seed = trial, shape, seed
        self.made: SeedReference | None = None

    def __call__(self) -> None:
        try:
            self.made = self.trial.seed_reference(self.shape, self.seed)
        except Exception:  # noqa: BLE001 - any failure is made again in the strict order, where it counts
            self.made = None
        _release_cached_gpu_memory()  # its intermediates: the worker is running


def _fail(result: ShapeResult, failure: Failure | OutputRejected) -> ShapeResult:
    result.correct = False
    result.stage, result.category, result.message = failure.stage, failure.category, failure.message
    return result


def forged_reply(result: ShapeResult) -> None:
    """A worker of this evaluation wrote a reply frame that answered no request: nothing it
    reported is believed, so a shape it passed fails (one it failed keeps its first failure)."""
    if tx.REPLY_FORGED not in result.integrity:
        result.integrity.append(tx.REPLY_FORGED)
    if result.correct:
        result.correct, result.stage, result.category = False, tx.PERFORMANCE, tx.TIMING_TAMPERED
        result.message = (
            "The candidate wrote frames on the worker's reply channel (a forged answer); "
            "its results are void. " + result.message
        ).strip()
        result.time_ms = result.iqr_ms = None
        result.timing_note = "time voided by an integrity failure"


def _late_calls(host_us: list[float] | None, spin_us: float | None) -> int | None:
    """Calls whose host side outlasted the spin queued before them."""
    if host_us is None or spin_us is None:
        return None
    return sum(h > spin_us for h in host_us)


@dataclass
class LaunchOptions:
    """How the worker process is started, beyond what the evaluator always does."""

    extra_env: dict[str, str] = field(default_factory=dict)  # added to the worker's minimal environment (e.g. ncu's)
    wrapper: list[str] = field(
        default_factory=list
    )  # argv placed before the worker's interpreter, e.g. [ncu, --nvtx, …]
    tcp_ports: list[int] = field(default_factory=list)  # TCP ports the wrapper's injected library may still use
    abstract_unix: bool = False  # abstract unix sockets the wrapper's injected library may still reach
    extra_rules: dict[str, int] = field(default_factory=dict)  # Landlock paths (path → rights) the wrapper needs
    # The serving process's state directory, protected like the problem sets (None: paths.default_state_dir()).
    state_dir: Path | None = None


class Trial:
    """One candidate judged on one operator: the judge as an object, and the state of one
    `evaluate()` call. Its public steps, in the order a judge takes them:

    * `open_session(scratch)`: the candidate and the visible problem files in a scratch
      directory, and the worker that will run them (not started);
    * `load(session)`: start that worker and import the candidate (a Failure: it did not load);
    * per shape, `correctness` (fresh seeds, outputs compared here), then on a GPU `timing` (the
      timed loop, its integrity checks and the witness) and `profile` (kernels, DSL share);
      `score` turns the times into S.

    `run()` takes every step as `evaluate()` does. Other judges take the steps they need: the
    optimisation loop's paired timing (atrex_mcp.runs.evaluator_judge) and the worker sessions
    of profilers (atrex_mcp.evaluate.workers)."""

    def __init__(
        self,
        request: EvalRequest,
        catalog: Catalog,
        progress: Progress | None,
        cancel: threading.Event | None,
        standby: Standby | None = None,
        launch: LaunchOptions | None = None,
    ):
        self.request, self.catalog, self.standby = request, catalog, standby
        self.launch = launch or LaunchOptions()
        self.progress = progress or (lambda message, fraction: None)
        self.stop = StopSignal(cancel, request.deadline_s)
        self.in_progress: tuple[int | None, str, float] | None = None  # (shape index, None: the load; stage; start)
        self.adapter = dsl.adapter(request.dsl)
        self.problem = catalog.visible(request.op)
        self.shapes = _select_shapes(self.problem, request.shapes)
        if request.baseline is not None:
            self.source = baseline_source(request.baseline, self.problem)
        elif request.source is not None:
            self.source = request.source
        else:
            raise AtrexError(
                "input",
                "missing_candidate",
                "Neither a candidate source nor a baseline was given.",
                "Pass the candidate file's text, or baseline='eager' / 'torch-compile'.",
            )
        self.cuda = device.has_gpu()
        self.device = "cuda" if self.cuda else "cpu"
        if self.cuda:
            gpu_cache.limit_block_splitting()
        self.device_info = device.describe()
        self.reference = catalog.load_reference(request.op)
        self.make_inputs = catalog.load_make_inputs(request.op)
        self.forward_params = [p for p in inspect.signature(self.reference.forward).parameters if p != "self"]
        self.roofline = scoring.Roofline.load(catalog, request.op, request.hardware)
        self.guard = LeakGuard.for_problem(catalog, request.op)
        self.own_kernels = self.adapter.own_kernels(self.source)
        self.seeds: list[int] = []
        self.references: dict[str, Any] = {}
        # where the reference calls of a shape are replayed from CUDA graphs (reference_output)
        self.reference_graphs = (
            reference_graph.ReferenceGraphs(reference_graph.CudaGraphDevice(), self.device_info.memory_bytes)
            if self.cuda
            else None
        )

    # -- helpers ----------------------------------------------------------------------------
    def seed(self) -> int:
        value = _seed()
        self.seeds.append(value)
        return value

    def inputs(self, shape: Shape, seed: int) -> dict[str, Any]:
        return self.make_inputs(seed=seed, device=self.device, **shape.inputs)

    def reference_output(self, shape: Shape, inputs: dict[str, Any]) -> Any:
        """The visible reference's output on `inputs`: eager, or on a GPU replayed from the CUDA graph
        this shape's first call captured where that gives eager's bits and pays (reference_graph).
        A fresh output either way, which the caller may keep."""
        key = repr(sorted(shape.init.items()))
        if key not in self.references:
            self.references[key] = self.reference(**shape.init).to(self.device).eval()
        with torch.no_grad():
            if self.reference_graphs is None:
                return self.references[key](**inputs)
            return self.reference_graphs.output(shape.id, key, self.references[key], inputs)

    def payload_shape(self, shape: Shape) -> ShapePayload:
        """What the worker learns of a shape: its visible id, init and input arguments."""
        return ShapePayload(id=shape.id, init=shape.init, inputs=shape.inputs)

    def receive(
        self, session: Session, reference: Any, manifest: Any, inputs: Callable[[], dict[str, Any]]
    ) -> tuple[CompareResult, Any]:
        """(verdict, candidate) on the output the worker just handed over for `reference`'s
        inputs (`inputs` makes them again, for a rule that needs them); raises OutputRejected for
        a malformed hand-over. The candidate is copied into this process's memory on the
        reference's device (one DMA where there is a GPU)."""
        candidate, written = session.arena.load(
            manifest, self.device, max_bytes=4 * output_bytes(reference) + (1 << 20)
        )
        if written:
            return compare_outputs(reference, candidate, self.request.op, inputs=inputs), candidate
        structure = check_structure(reference, candidate)
        if structure.ok:  # it would have fitted: the arena was sized for the reference output
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "The worker did not hand over its output.")
        return structure, None

    # -- stages -----------------------------------------------------------------------------
    def correctness(self, session: Session, shape: Shape, result: ShapeResult) -> int | None:
        """K fresh seeds, one at a time: this side makes the seed's inputs and reference output,
        the worker runs the candidate on the same seed and hands its output over, and that output
        is judged before the next seed, so the first wrong seed ends the stage. The worker's calls
        share one budget, request.timeout_s (the first call includes the DSL's JIT compilation).
        Returns the bytes of one input set and its output when every seed matched.

        While the worker runs seed k, this side makes seed k+1's inputs, checksums and reference
        output (`_overlaps` says when): the two processes' work overlaps instead of alternating.
        A reference made ahead changes no verdict: seed k is judged first, so a wrong seed k ends
        the stage as before and the reference made ahead is dropped; one whose making failed is
        made again at its turn, in the order above, where it fails as it would have. Seconds:
        `correctness` is the worker's wall on its calls (send to reply, PendingReply), whatever
        this side did meanwhile; `reference_and_compare` is the rest of the stage's wall, the
        time this side worked with no worker call in flight; their sum is the stage's wall.

        GPU memory of this process: a seed's inputs live until its reference output exists; that
        output is kept while the worker runs (this process's cached blocks are released first),
        then the candidate's copy and the comparison's bounded chunks join it (compare.py:
        whole-output float64 copies of the largest outputs would need tens of GiB). A reference
        made ahead also holds its inputs, intermediates and output while the worker runs, which
        `_overlaps` keeps small."""
        result.seeds = [self.seed() for _ in range(self.request.seeds)]
        t0, worker_s, set_bytes = time.perf_counter(), 0.0, 0
        calls: list[Any] = []  # each call's seconds as the worker reported them
        made: SeedReference | None = None  # the seed's reference when it was made ahead
        ahead: _Ahead | None = None
        ahead_failed = False
        try:
            for k, seed in enumerate(result.seeds):
                try:
                    if made is None:
                        made = self.seed_reference(shape, seed)
                    reference, arena = self.hold_reference(session, made.output)
                    checksums, footprint, made = made.checksums, made.footprint_bytes, None
                    nxt = result.seeds[k + 1] if k + 1 < len(result.seeds) else None
                    ahead = (
                        _Ahead(self, shape, nxt)
                        if nxt is not None and not ahead_failed and self._overlaps(footprint)
                        else None
                    )
                    left = self.request.timeout_s - worker_s
                    run = RunRequest(shape=self.payload_shape(shape), seed=seed, arena_bytes=arena)
                    if left <= 0:
                        reply: dict[str, Any] | Failure = Failure(tx.RUNTIME, tx.TIMEOUT, "")
                    else:
                        reply = session.call(run, left, meanwhile=ahead)
                        worker_s += session.last_call_s
                    if ahead is not None:
                        made, ahead_failed = ahead.made, ahead.made is None
                    if isinstance(reply, Failure):
                        if reply.category == tx.TIMEOUT:
                            reply.message = self._correctness_timeout(len(result.seeds), k)
                        _fail(result, reply)
                        return None
                    calls.append(reply.get("call_s"))
                    if reply.get("checksums") != checksums and tx.INPUT_MISMATCH not in result.integrity:
                        result.integrity.append(tx.INPUT_MISMATCH)
                    with _harness_memory(f"comparing outputs of {output_bytes(reference)} bytes"):
                        verdict, candidate = self.receive(
                            session, reference, reply.get("output"), partial(self.inputs, shape, seed)
                        )
                        del reference, candidate
                except OutputRejected as exc:
                    _fail(result, exc)
                    return None
                except _HarnessOutOfMemory as exc:
                    _fail(result, Failure(tx.CORRECTNESS, tx.HARNESS_OOM, f"seed #{k}: {exc}"))
                    return None
                if not verdict.ok:
                    assert verdict.stage is not None and verdict.category is not None  # a failed verdict names both
                    _fail(result, Failure(verdict.stage, verdict.category, f"seed #{k}: {verdict.message}"))
                    result.mismatch = list(verdict.details)
                    return None
                if k == 0:
                    input_bytes = reply.get("input_bytes")
                    set_bytes = manifest_bytes(reply["output"]) + (
                        input_bytes if type(input_bytes) is int and input_bytes > 0 else 0
                    )
        finally:
            made = ahead = None  # a reference made ahead for a seed the stage did not reach goes before the release
            _release_cached_gpu_memory()
            result.seconds["correctness"] = worker_s
            result.seconds["reference_and_compare"] = time.perf_counter() - t0 - worker_s
        timed = [float(c) for c in calls if type(c) in (int, float)]
        if len(timed) >= 2:  # the first call of a shape pays for JIT compilation (and autotuning)
            result.seconds["first_call_extra"] = max(0.0, timed[0] - min(timed[1:]))
        result.correct = True
        return set_bytes

    def _overlaps(self, footprint_bytes: int) -> bool:
        """Whether the next seed's reference may be made while the worker runs this one, given
        what making one seed's took (`SeedReference.footprint_bytes`). The worker, another process
        on the same GPU, needs its memory: this side's GPU memory is released before it runs
        (`hold_reference`), and a reference made meanwhile takes some back. So only a seed whose
        inputs, intermediates and output take at most OVERLAP_MAX_BYTES, and at most
        OVERLAP_MEMORY_SHARE of the device's memory, is made ahead: of the order of the cached
        blocks this process already keeps while the worker runs (sandbox.gpu_cache.KEEP_BYTES),
        and far from the whole GPU a large shape's worker needs. Larger seeds keep the strict
        order, in which the worker runs with this side holding one reference output only."""
        memory = self.device_info.memory_bytes
        limit = min(OVERLAP_MAX_BYTES, int(OVERLAP_MEMORY_SHARE * memory)) if memory else OVERLAP_MAX_BYTES
        return footprint_bytes <= limit

    def seed_reference(self, shape: Shape, seed: int) -> SeedReference:
        """`seed`'s reference output and input checksums, made here for the worker's run of that
        seed. The inputs are freed once the output exists (an output that aliases an input keeps
        only what it aliases). The footprint is the inputs' and the output's bytes, or on a GPU
        the most this process allocated beyond what it held before, when more (intermediates)."""
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
        with _harness_memory("generating the inputs and the reference output"):
            inputs = self.inputs(shape, seed)
            checksums = input_checksums(inputs)
            reference = self.reference_output(shape, inputs)
        footprint = output_bytes(reference) + output_bytes(inputs)
        del inputs
        if self.cuda:
            footprint = max(footprint, torch.cuda.max_memory_allocated() - held)
        return SeedReference(reference, checksums, footprint)

    def hold_reference(self, session: Session, reference: Any) -> tuple[Any, int]:
        """(reference output, arena bytes) just before the worker runs the reference's seed: the
        arena sized for it and this process's cached blocks released; a reference output that
        would still pin cached memory is moved into fresh GPU memory through the host."""
        arena = session.arena.reserve(arena_bytes(reference))
        _release_cached_gpu_memory()
        if _cache_pins_memory():
            with _harness_memory("moving the reference output out of a fragmented cache"):
                reference = _copy_structure(reference, "cpu")
                _release_cached_gpu_memory()
                reference = _copy_structure(reference, self.device)
        return reference, arena

    def _correctness_timeout(self, seeds: int, stopped_in: int) -> str:
        return (
            f"The candidate's {seeds} correctness calls did not finish within {self.request.timeout_s:.0f} s "
            f"(stopped in seed #{stopped_in}); the worker's process group was killed. The first call of a shape "
            "includes the DSL's JIT compilation."
        )

    def timing(self, session: Session, shape: Shape, result: ShapeResult, set_bytes: int) -> None:
        """The performance stage, after a passed `correctness` (`set_bytes`: what it returned): the
        worker's timed loop on fresh input sets, the checks of its figures against this process's
        clock and of its outputs against the reference, then the witness. Sets `result.time_ms`,
        or fails the shape on an integrity failure."""
        # One fresh set per timed call where memory allows, so no call sees inputs seen before.
        sets = timing_sets(set_bytes, self.device_info.memory_bytes)
        result.timing_seeds = [self.seed() for _ in range(sets + 1)]
        flush_bytes = flush_bytes_for(session.worker_device.get("l2_bytes")) if self.cuda else CPU_FLUSH_BYTES
        t0 = time.perf_counter()
        with device.ClockSampler() as clocks:
            reply = session.call(
                TimeRequest(
                    shape=self.payload_shape(shape),
                    warmup_seed=result.timing_seeds[0],
                    seeds=result.timing_seeds[1:],
                    min_calls=MIN_TIMED_CALLS,
                    max_calls=MAX_TIMED_CALLS,
                    flush_bytes=flush_bytes,
                    fit_to_sets=True,
                    stop_relative=TIMING_STOP_RELATIVE,
                ),
                self.request.timeout_s,
                timeout_category=tx.OVER_TIME_BUDGET,
            )
        request_wall = time.perf_counter() - t0
        result.seconds["timing"] = request_wall
        if isinstance(reply, Failure):
            if reply.category == tx.OVER_TIME_BUDGET:
                result.stage, result.category, result.message = reply.stage, reply.category, reply.message
                result.timing_note = "not timed: over the time budget"
            else:
                _fail(result, reply)
            return
        times, calls = reply["times_ms"], int(reply["calls"])
        side = timing_checks.side_stream(times, reply["synced_ms"], reply["noop_gap_ms"])
        per_call = side.per_call_ms
        if side.detected:
            result.integrity.append(tx.SIDE_STREAM_WORK)
        first_visit, phase = reuse_phase(sets, calls)
        reuse = timing_checks.input_reuse(per_call, first_visit, phase)
        if reuse.detected:  # a cache: its hits are not the kernel's time, so only first visits of a set count
            result.integrity.append(tx.INPUT_REUSE_SPEEDUP)
            per_call = [t for t, fresh in zip(per_call, first_visit) if fresh]
            result.timing_note = (
                f"timed on the {len(per_call)} calls on fresh input sets: calls on reused sets ran "
                f"{reuse.reused_ms:.4g} ms against {reuse.fresh_ms:.4g} ms"
            )
        if calls > sets and not reuse.decided:  # the worker's loop plans by fit_calls_to_sets; this one did not
            result.integrity.append(tx.REUSE_UNCHECKED)
        if reply.get("replaced"):
            result.integrity.append(tx.PRIMITIVES_REPLACED)
            names = [str(name)[:100] for name in reply["replaced"]][:40] if isinstance(reply["replaced"], list) else []
            result.message = f"The candidate replaced harness primitives: {', '.join(names)}."
        if (
            sum(times) / 1e3 > reply["wall_s"] * 1.05 + 1e-3
            or reply["wall_s"] > request_wall
            or not timing_witness.upper_bound_ok(times, request_wall)
        ):
            result.integrity.append(tx.WALL_CLOCK_INCONSISTENT)
        q1, med, q3 = statistics.quantiles(per_call, n=4, method="inclusive")
        ci_low, ci_high = median_ci(per_call)
        planned = reply.get("planned_calls")
        sm, mem, below, throttle = clocks.summary()
        late = _late_calls(reply.get("host_us"), reply.get("spin_us"))
        result.timing = TimingStats(
            median_ms=med,
            q1_ms=q1,
            q3_ms=q3,
            iqr_ms=q3 - q1,
            min_ms=min(per_call),
            calls=calls,
            planned_calls=planned if type(planned) is int else None,
            median_ci_ms=(ci_high - ci_low) / 2,
            warmup_calls=reply["warmup"],
            input_sets=sets,
            flush_bytes=flush_bytes,
            covers_side_streams=side.detected,
            sync_gap_ms=statistics.median(reply["noop_gap_ms"]),
            wall_s=reply["wall_s"],
            sm_clock_mhz=sm,
            mem_clock_mhz=mem,
            sm_below_max_fraction=below,
            throttle_reasons=throttle,
            spin_us=reply.get("spin_us"),
            reuse_compared=reuse.decided,
            host_bound=timing_checks.host_bound(late, calls),
            host_late_calls=late,
            request_wall_s=request_wall,
        )
        order = call_order(sets, calls)
        digests = reply.get("digests") or []
        if len(digests) != calls:
            result.integrity.append(tx.TIMED_OUTPUT_MISMATCH)
            result.message = "The worker did not return a digest for every timed call."
        else:
            t0 = time.perf_counter()
            try:
                self.check_timed_outputs(session, shape, result, reply["kept"], order, digests)
            except _HarnessOutOfMemory as exc:
                _fail(result, Failure(tx.CORRECTNESS, tx.HARNESS_OOM, f"checking the outputs of timed calls: {exc}"))
            finally:
                _release_cached_gpu_memory()
                result.seconds["timed_output_checks"] = time.perf_counter() - t0
        if result.stage is None and not any(i in tx.INTEGRITY_FAILS for i in result.integrity):  # else already void
            # after the checks, which leave the worker holding nothing: the bursts have the memory the timing had
            t0 = time.perf_counter()
            host_ms = timing_witness.host_allowance_ms(reply.get("host_us"), self.cuda, request_wall, calls)
            try:
                burst = timing_witness.witness_calls(med, sets)  # fewer forwards for long calls
                self.witness(session, shape, result, burst, med, host_ms, set_bytes)
            except _HarnessOutOfMemory as exc:
                _fail(result, Failure(tx.CORRECTNESS, tx.HARNESS_OOM, f"checking the witness bursts: {exc}"))
            finally:
                _release_cached_gpu_memory()
                result.seconds["witness"] = time.perf_counter() - t0
        failing = [i for i in result.integrity if i in tx.INTEGRITY_FAILS]
        if failing:
            stage = tx.CORRECTNESS if tx.TIMED_OUTPUT_MISMATCH in failing else tx.PERFORMANCE
            category = tx.TIMED_OUTPUT_MISMATCH if stage == tx.CORRECTNESS else tx.TIMING_TAMPERED
            result.correct = False
            result.stage, result.category = stage, category
            result.message = result.message or f"integrity: {', '.join(failing)}"
            result.timing_note = "time voided by an integrity failure"
            return
        if result.stage is None:  # not when a hand-over or a check above failed the shape
            clock = result.timing.clock_ms if result.timing is not None else None
            result.time_ms, result.iqr_ms = timing_witness.scored_time_ms(med, clock), q3 - q1
            if result.time_ms > med:
                result.timing_note = (
                    f"scored at the judge's own wall per call ({result.time_ms:.4g} ms), above the reported median: "
                    "no CUDA graph replay witnessed the device time"
                )

    def witness(
        self,
        session: Session,
        shape: Shape,
        result: ShapeResult,
        calls: int,
        median_ms: float,
        host_ms: float,
        set_bytes: int = 0,
    ) -> None:
        """The judge's witness of `median_ms` (timing_witness). On a GPU the graph burst runs
        first, and a replay whose input refresh does not dominate it judges alone: its floor is
        device time the worker cannot shrink. Only where it cannot judge (CPU, a forward that
        cannot be captured, a refresh-dominated replay, no memory for the burst) do the plain
        bursts run, and then their wall per call also bounds the time the shape is scored with
        (graph_fallback)."""
        timing = result.timing
        assert timing is not None, "the timing request set it before any witness ran"
        graph: timing_witness.Witness | str | None = None
        if self.cuda:
            graph = self.graph_burst(session, shape, result, median_ms, set_bytes)
            if graph is None:
                return
            if isinstance(graph, timing_witness.Witness):
                timing.witness = timing_witness.GRAPH
                timing.graph_calls, timing.graph_witness_ms = graph.calls, graph.per_call_ms
                timing.graph_floor_ms = graph.floor_ms
                timing.graph_subtracted_ms, timing.graph_slack_ms = graph.subtracted_ms, graph.slack_ms
                if not timing_witness.graph_dominated(graph):
                    timing.witness_floor_ms = graph.floor_ms
                    _flag_forged(result, median_ms, graph)
                    return
        plain = self.plain_witness(session, shape, result, calls, median_ms, host_ms)
        if plain is None:
            return
        timing.witness_ms, timing.witness_floor_ms = plain.per_call_ms, plain.floor_ms
        if not self.cuda:
            timing.witness = timing_witness.HOST
        _flag_forged(result, median_ms, plain if graph is None else self.graph_fallback(timing, graph, plain))

    def plain_witness(
        self, session: Session, shape: Shape, result: ShapeResult, calls: int, median_ms: float, host_ms: float
    ) -> timing_witness.Witness | None:
        """WITNESS_BURSTS bursts of `calls` forwards on fresh input sets, each timed by this
        process's clock; the fastest, less what this process calibrates (a round trip, making the
        input sets, digesting the outputs), is the verdict on the median. Each burst that is the
        fastest so far has one output, chosen after it ran, compared with the reference, so the
        burst that judges did the work. None once the shape has failed."""
        walls: list[float] = []
        seeds: list[int] = []
        checked: Any = None  # the output last checked: the calibration digests outputs of its size
        try:
            for _ in range(timing_witness.WITNESS_BURSTS):
                seeds = [self.seed() for _ in range(calls)]
                burst = BurstRequest(shape=self.payload_shape(shape), seeds=seeds)
                reply, wall = graph_witness.timed_call(session, burst, self.request.timeout_s, warm=self.cuda)
                if isinstance(reply, Failure):
                    _fail(result, reply)
                    return None
                fastest = not walls or wall < min(walls)  # only the fastest burst witnesses: only it needs checking
                walls.append(wall)
                if fastest:
                    checked = self.check_burst_output(session, shape, result, seeds, reply.get("digests"))
                    if checked is None:
                        return None
            calibration = self.calibrate_witness(session, shape, result, seeds, checked)
            del checked
        finally:
            if session.alive:
                session.call(KeepRequest(burst_done=True), self.request.timeout_s)
        if calibration is None:
            return None
        return timing_witness.judge(median_ms, min(walls), calls, calibration, host_ms)

    def graph_burst(
        self, session: Session, shape: Shape, result: ShapeResult, median_ms: float, set_bytes: int
    ) -> timing_witness.Witness | str | None:
        """The graph burst (graph_witness): its Witness; why no replay could run (str: the
        forward could not be captured, or its input sets and the judge's copies of them exceed
        the GPU's memory, which a worker that fills the GPU to cause gains nothing by: it is
        judged as an uncapturable forward); or None once the shape has failed."""
        try:
            with _harness_memory("running the graph burst"):
                outcome = graph_witness.run(self, session, shape, result, median_ms, set_bytes)
        except _HarnessOutOfMemory:
            outcome = GRAPH_OUT_OF_MEMORY
        finally:
            if session.alive:
                session.call(KeepRequest(burst_done=True), self.request.timeout_s)
        if isinstance(outcome, Failure):
            _fail(result, outcome)
            return None
        return outcome

    @staticmethod
    def graph_fallback(
        timing: TimingStats, graph: timing_witness.Witness | str, plain: timing_witness.Witness
    ) -> timing_witness.Witness:
        """The verdict where the graph burst could not judge alone: the plain burst's, whose
        wall per call becomes the least time the shape is scored with (TimingStats.clock_ms: what
        the judge's clock saw, which the worker cannot shrink), unless a refresh-dominated replay
        is still conclusive against the plain burst's figure (timing_witness.graph_conclusive),
        where the larger of the two floors judges."""
        if isinstance(graph, str):
            timing.witness, timing.witness_note = timing_witness.UNCAPTURABLE, graph
            timing.clock_ms = plain.per_call_ms
            return plain
        if not timing_witness.graph_conclusive(graph, plain):
            timing.witness_note = (
                f"graph replay inconclusive: {graph.subtracted_ms:.4g} ms a call of input refresh "
                f"and fingerprints taken off, more than the plain burst's {plain.per_call_ms:.4g} ms "
                f"and {timing_witness.GRAPH_REFRESH_DOMINANCE:g} × the replay's own {graph.per_call_ms:.4g} ms"
            )
            timing.clock_ms = timing_witness.inconclusive_clock_ms(graph, plain)
            return plain
        if graph.floor_ms <= plain.floor_ms:
            return plain
        timing.witness_floor_ms = graph.floor_ms
        return graph

    def check_burst_output(
        self, session: Session, shape: Shape, result: ShapeResult, seeds: list[int], digests: Any
    ) -> Any:
        """One output of a witness burst, chosen after it ran, against the reference and the digest
        the worker reported for it: the burst's calls did the work. Returns that output (this
        process's copy, which matched the reference), or None once the shape has failed."""
        if not isinstance(digests, list) or len(digests) != len(seeds):
            self._timed_mismatch(result, "The worker did not return a digest for every call of the witness burst.", [])
            return None
        chosen = secrets.randbelow(len(seeds))
        what = f"a witness call (burst set {chosen})"
        candidate = self.fetch_checked(session, shape, result, seeds[chosen], chosen, True, what)
        if candidate is None:
            return None
        with _harness_memory(f"digesting {what}'s output"):
            reported = digest(candidate).tolist() == digests[chosen]
        if not reported:
            self._timed_mismatch(
                result, f"Output of {what} is wrong: its digest is not the one the worker reported", []
            )
            return None
        return candidate

    def fetch_checked(
        self,
        session: Session,
        shape: Shape,
        result: ShapeResult,
        seed: int,
        index: int,
        burst: bool,
        what: str,
        inputs: dict[str, Any] | None = None,
        graph: bool = False,
    ) -> Any:
        """The reference output for `seed` (or for `inputs`, where the worker's set was changed
        after it was made), made here, against the output the worker kept for input set `index`
        (of a witness burst with `burst`, of the graph burst with `graph`): the candidate's output
        once it matches, or None once the shape has failed. GPU memory here: that one reference
        and candidate, the reference deleted before returning."""
        with _harness_memory(f"generating {what}'s input set and its reference output"):
            reference = self.reference_output(shape, self.inputs(shape, seed) if inputs is None else inputs)
        size = output_bytes(reference)
        arena = session.arena.reserve(arena_bytes(reference))
        reply = session.call(
            FetchRequest(set=index, arena_bytes=arena, burst=burst, graph=graph), self.request.timeout_s
        )
        if isinstance(reply, Failure):
            _fail(result, reply)
            return None
        with _harness_memory(f"comparing outputs of {size} bytes"):
            verdict, candidate, message = None, None, "the worker did not return it"
            if reply.get("output") is not None:
                try:
                    again = partial(self.inputs, shape, seed) if inputs is None else (lambda: inputs)
                    verdict, candidate = self.receive(session, reference, reply["output"], again)
                except OutputRejected as exc:
                    message = exc.message
            del reference
        if verdict is None or not verdict.ok:
            self._timed_mismatch(
                result,
                f"Output of {what} is wrong: {verdict.message if verdict is not None else message}",
                list(verdict.details) if verdict is not None else [],
            )
            return None
        return candidate

    def calibrate_witness(
        self, session: Session, shape: Shape, result: ShapeResult, seeds: list[int], output: Any
    ) -> timing_witness.Calibration | None:
        """What a burst over `seeds` costs besides its forwards, measured in this process: a round
        trip, making the burst's input sets, and digesting as many outputs the size of `output` (a
        burst output checked against its reference, so no reference forward is made for it)."""
        round_trip = graph_witness.round_trip_s(session, self.request.timeout_s)
        if isinstance(round_trip, Failure):
            _fail(result, round_trip)
            return None
        sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        with _harness_memory("calibrating the witness burst"):
            sync()
            t0 = time.perf_counter()
            for seed in seeds:
                self.inputs(shape, seed)
            sync()
            inputs_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in seeds:
                digest(output).tolist()
            digests_s = time.perf_counter() - t0
        return timing_witness.Calibration(round_trip_s=round_trip, inputs_s=inputs_s, digests_s=digests_s)

    def check_timed_outputs(
        self,
        session: Session,
        shape: Shape,
        result: ShapeResult,
        kept: list[int],
        order: list[int],
        digests: list[list[int]],
    ) -> None:
        """Every timed call: its output's digest (computed in the worker right after the call)
        must not be a poisoned output's nor another input set's output's — a replayed or stale
        output is caught in any call. A few sets, chosen after the run, are compared with the
        reference in full, and their bytes must match the digests the worker reported."""
        pool = sorted(
            {i for i in kept if type(i) is int and 0 <= i < len(result.timing_seeds) - 1}
        )  # the worker's list
        chosen = [pool.pop(secrets.randbelow(len(pool))) for _ in range(min(CHECKED_TIMED_SETS, len(pool)))]
        last_call = {index: i for i, index in enumerate(order)}
        fetched: dict[int, list[int]] = {}
        poisoned: list[int] | None = None
        try:
            reply = session.call(KeepRequest(sets=chosen), self.request.timeout_s) if chosen else {}
            if isinstance(reply, Failure):  # the worker drops the rest before any reference is made here
                _fail(result, reply)
                return
            for index in chosen:
                candidate = self.fetch_checked(
                    session,
                    shape,
                    result,
                    result.timing_seeds[1 + index],
                    index,
                    False,
                    f"a timed call (input set {index})",
                )
                if candidate is None:
                    return
                # GPU memory here: one set's candidate output at a time, and its poisoned copy only briefly
                with _harness_memory("digesting a timed call's output"):
                    fetched[index] = digest(candidate).tolist()
                    if fetched[index] != digests[last_call[index]]:
                        self._timed_mismatch(
                            result,
                            f"The digest the worker reported for input set {index} does not match "
                            "the output it returned.",
                            [],
                        )
                        return
                    if poisoned is None:
                        stale = _copy_structure(candidate)
                        poison(stale, set())
                        poisoned = digest(stale).tolist()
                        del stale
                    del candidate
        finally:
            if session.alive:
                session.call(KeepRequest(sets=[]), self.request.timeout_s)
        seen: dict[tuple[int, ...], int] = {}
        shared: set[tuple[int, ...]] = set()  # outputs confirmed to be legitimately the same for several sets
        for i, (index, d) in enumerate(zip(order, digests)):
            if d == poisoned:
                self._timed_mismatch(result, f"Timed call {i} returned a stale (poisoned) output.", [])
                return
            key = tuple(d)
            other = seen.setdefault(key, index)
            if other != index and key not in shared:
                if not self.same_reference(shape, result, index, other):
                    self._timed_mismatch(
                        result, f"Timed call {i} (input set {index}) returned the output of input set {other}.", []
                    )
                    return
                shared.add(key)

    def same_reference(self, shape: Shape, result: ShapeResult, a: int, b: int) -> bool:
        """Whether two timed input sets legitimately give the same output (their reference
        outputs agree), as for an op that ignores the inputs that were varied."""
        with _harness_memory("comparing the reference outputs of two timed input sets"):
            ref_a, ref_b = (
                self.reference_output(shape, self.inputs(shape, result.timing_seeds[1 + k])) for k in (a, b)
            )
            return compare_outputs(ref_a, ref_b, self.request.op).ok

    @staticmethod
    def _timed_mismatch(result: ShapeResult, message: str, details: list) -> None:
        result.integrity.append(tx.TIMED_OUTPUT_MISMATCH)
        result.message = message
        result.mismatch = details

    def check_primitives(self, session: Session, result: ShapeResult) -> None:
        """Without a timing run, still ask whether the candidate replaced a watched primitive."""
        reply = session.call(IntegrityRequest(), self.request.timeout_s)
        if isinstance(reply, Failure):
            _fail(result, reply)
        elif reply.get("replaced"):
            result.integrity.append(tx.PRIMITIVES_REPLACED)
            _fail(
                result,
                Failure(
                    tx.PERFORMANCE,
                    tx.TIMING_TAMPERED,
                    f"The candidate replaced harness primitives: {', '.join(reply['replaced'])}.",
                ),
            )

    def profile(self, session: Session, shape: Shape, result: ShapeResult) -> None:
        """One profiled forward: the kernels' device times and the DSL's share of them (the
        worker's word, reported and never scored)."""
        t0 = time.perf_counter()
        reply = session.call(ProfileRequest(shape=self.payload_shape(shape), seed=self.seed()), self.request.timeout_s)
        result.seconds["profile"] = time.perf_counter() - t0
        if isinstance(reply, Failure):
            result.message = (
                result.message + "\n" if result.message else ""
            ) + f"DSL share not measured: {reply.category}: {reply.message}"
            return
        if reply.get("replaced") and tx.PRIMITIVES_REPLACED not in result.integrity:
            result.integrity.append(tx.PRIMITIVES_REPLACED)
        kernels = [
            KernelTime(
                name=k["name"][:300],
                time_us=float(k["time_us"]),
                count=int(k["count"]),
                origin=self.adapter.origin(k["name"], self.own_kernels),
            )
            for k in reply["kernels"]
        ]
        result.kernels = sorted(kernels, key=lambda k: -k.time_us)
        result.dsl_share = dsl.dsl_share([(k.name, k.time_us, k.origin) for k in kernels])
        device_us = [k.time_us for k in kernels]
        if result.time_ms is not None and not timing_witness.profile_agrees(result.time_ms, device_us):
            result.integrity.append(tx.PROFILE_DISAGREES)

    def score(self, result: ShapeResult) -> None:
        """S = T_SOL / T for a correct, timed shape (with why not, when it has none)."""
        t_sol, reason = self.roofline.t_sol_ms(result.id)
        result.t_sol_ms = t_sol
        if not result.correct:
            return
        if result.category == tx.OVER_TIME_BUDGET:  # correct, but slower than the budget: T_cand → ∞
            result.score, result.score_note = 0.0, "over the time budget: scored 0"
            return
        if result.time_ms is None:
            result.score_note = result.timing_note or "not timed"
            return
        if t_sol is None:
            result.score_note = reason
            return
        mismatch = scoring.profile_mismatch(self.request.hardware, self.device_info.name)
        if mismatch:
            result.score_note = mismatch
            return
        result.score = scoring.shape_score(t_sol, result.time_ms)
        if result.score is not None and result.score > 1.0:
            result.integrity.append(tx.FASTER_THAN_SOL)
            result.score_note = "S > 1: faster than the speed of light — an evaluation error, reported and not clipped"

    # -- driver -----------------------------------------------------------------------------
    def launch_spec(self, scratch: Path, launch: LaunchOptions | None = None) -> LaunchSpec:
        """How this trial's worker starts in `scratch` (`launch`: this trial's options when None)."""
        launch = launch or self.launch
        protected = protected_roots(self.catalog.roots, launch.state_dir)
        return LaunchSpec(
            scratch=scratch,
            device=self.device,
            protected=protected,
            env={**self.adapter.worker_env(self.cuda), **launch.extra_env},
            host_memory_bytes=GPU_HOST_MEMORY_BYTES if self.cuda else CPU_HOST_MEMORY_BYTES,
            wrapper=list(launch.wrapper),
            tcp_ports=list(launch.tcp_ports),
            abstract_unix=launch.abstract_unix,
            extra_rules=dict(launch.extra_rules),
        )

    def open_session(self, scratch: Path, launch: LaunchOptions | None = None, spare: Spare | None = None) -> Session:
        """Fill `scratch` with the candidate and the visible problem files and describe its
        worker (not started yet; `spare`: one already spawned in `scratch`; `launch`: this
        trial's options when None)."""
        (scratch / "reference.py").write_text(self.problem.reference_source)
        (scratch / "input.py").write_text(self.problem.input_source)
        (scratch / "shapes.json").write_text(self.problem.shapes_json)
        (scratch / CANDIDATE_FILE).write_text(self.source)
        spec = self.launch_spec(scratch, launch)
        rlimits = {"CORE": 0, "FSIZE": spec.file_size_bytes, "DATA_EXTRA": spec.host_memory_bytes, "NOFILE": 4096}
        return Session(
            spec,
            init=InitRequest(device=self.device, input_file="input.py", rlimits=rlimits),
            load=LoadRequest(
                candidate_file=CANDIDATE_FILE,
                init_sets=[s.init for s in self.shapes],
                forward_params=self.forward_params,
            ),
            guard=self.guard,
            compile_timeout_s=self.request.compile_timeout_s,
            cancel=self.stop,
            spare=spare,
            defines_model=source_defines_model(self.source),
        )

    def load(self, session: Session) -> Failure | None:
        """Start the session's first worker and import the candidate there; a Failure says why it
        did not load (a compile-stage category)."""
        return session.start(first=True)

    def run(self) -> EvalResult:
        """Every step on every requested shape: what `evaluate()` returns (see there)."""
        t_start = time.perf_counter()
        started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        result = EvalResult(
            op=self.request.op,
            candidate=self.request.baseline or "candidate",
            candidate_sha256=hashlib.sha256(self.source.encode()).hexdigest(),
            dsl=self.request.dsl,
            hardware=self.request.hardware,
            compiled=False,
            device=self.device_info.model_copy(),
            isolation=Isolation(),
            started_at=started,
        )
        spare = self.standby.take(self.launch_spec(Path("."))) if self.standby is not None else None
        with spare.directory if spare is not None else tempfile.TemporaryDirectory(prefix="atrex-eval-") as tmp:
            session = self.open_session(Path(tmp), spare=spare)
            try:
                self.judge_shapes(session, result)
            except Cancelled:
                result.partial = self.stop.reason
                result.shapes += self.not_run(len(result.shapes))
            finally:
                session.stop()
        self._summarise(result, session, time.perf_counter() - t_start)
        if result.partial is None:
            self.progress("done", 1.0)
            return result
        judged = sum(s.judged for s in result.shapes)
        self.progress(f"stopped ({result.partial}) after {judged} of {len(result.shapes)} shapes", 1.0)
        if result.partial == "cancelled":
            raise EvaluationCancelled(result)
        return result

    def judge_shapes(self, session: Session, result: EvalResult) -> None:
        """Load the candidate, then judge the shapes one after another into `result.shapes`;
        raises Cancelled when the stop signal is set between or during them."""
        self.progress("starting the sandbox worker and loading the candidate", 0.0)
        self.begin(None, "the candidate's load")
        failure = self.load(session)
        if self.standby is not None:  # the next evaluations' workers start while this one runs
            self.standby.refill(session.spec)
        if failure is not None:
            result.compile_error = ErrorInfo(
                stage="compile",
                category=failure.category,
                message=failure.message,
                hint="Fix the candidate file so it imports and defines Model as the reference does.",
            )
            result.shapes = [
                ShapeResult(
                    id=s.id,
                    correct=False,
                    stage=failure.stage,
                    category=failure.category,
                    message="not evaluated: the candidate did not load",
                )
                for s in self.shapes
            ]
            return
        for i, shape in enumerate(self.shapes):
            self.in_progress = None
            if self.stop.is_set():
                raise Cancelled()
            self.progress(f"shape {shape.id}", (i + 0.5) / len(self.shapes))
            result.shapes.append(self.evaluate_shape(session, shape, i))

    def _summarise(self, result: EvalResult, session: Session, total_s: float) -> None:
        """The whole evaluation's figures: isolation, overheads, compiled, operator score, integrity."""
        result.isolation = session.isolation
        result.device.versions = session.versions
        result.overhead = session.overhead
        result.overhead.total_s = total_s
        result.compiled = (
            result.compile_error is None
            and not session.forged
            and any(s.judged and s.stage != tx.COMPILE for s in result.shapes)
        )
        result.operator_score, result.operator_score_note = scoring.shapes_operator_score(result.shapes)
        result.seeds = self.seeds
        result.integrity = sorted(
            {i for s in result.shapes for i in s.integrity}
            | ({tx.HIDDEN_DATA_LEAK} if session.leaked else set())
            | ({tx.REPLY_FORGED} if session.forged else set())
        )

    def begin(self, index: int | None, stage: str) -> None:
        """Note what is running, so a stop can say where it caught the evaluation."""
        self.in_progress = (index, stage, time.perf_counter())

    def not_run(self, done: int) -> list[ShapeResult]:
        """Results for the shapes from `done` on, which the stop left unjudged: the one in
        progress says in which stage and how far in it was stopped."""
        deadline = self.stop.reason == "deadline"
        category = tx.NOT_RUN_DEADLINE if deadline else tx.NOT_RUN_CANCELLED
        why = (
            f"the evaluation's deadline ({self.stop.deadline_s:g} s) passed"
            if deadline
            else "the caller cancelled the evaluation"
        )
        caught, index = "", None
        if self.in_progress is not None:
            index, stage, t0 = self.in_progress
            caught = (
                f"Not judged: {why} during {stage}, {time.perf_counter() - t0:.1f} s into it; the worker was killed"
            )
        results = []
        for i, shape in enumerate(self.shapes[done:], start=done):
            if caught and index in (None, i):
                message = caught + (" (no shape had started)." if index is None else ".")
            else:
                message = f"Not judged: {why} before this shape started."
            results.append(
                ShapeResult(
                    id=shape.id,
                    correct=False,
                    stage=tx.NOT_RUN,
                    category=category,
                    message=message,
                    score_note="not run",
                )
            )
        return results

    def evaluate_shape(self, session: Session, shape: Shape, index: int) -> ShapeResult:
        try:
            return self._evaluate_shape(session, shape, index)
        finally:
            if self.reference_graphs is not None:  # their pools go back with the next cache release
                self.reference_graphs.release()

    def _evaluate_shape(self, session: Session, shape: Shape, index: int) -> ShapeResult:
        result = ShapeResult(id=shape.id, correct=False)
        self.begin(index, "a worker restart")
        failure = session.ensure()
        if failure is not None:
            return _fail(result, failure)
        self.begin(index, "the correctness stage")
        set_bytes = self.correctness(session, shape, result)
        if set_bytes is not None:
            if not self.cuda:
                result.timing_note = "not timed: no GPU"
                self.begin(index, "the integrity check")
                self.check_primitives(session, result)
            elif not self.request.timing:
                result.timing_note = NOT_TIMED_BY_REQUEST
            elif session.ensure() is None:
                self.begin(index, "the timing stage")
                self.timing(session, shape, result, set_bytes)
            if self.cuda and self.request.measure_dsl and result.correct and session.ensure() is None:
                self.begin(index, "the profile")
                self.profile(session, shape, result)
        if session.forged:
            forged_reply(result)
        self.score(result)
        return result


def evaluate(
    request: EvalRequest,
    catalog: Catalog,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    standby: Standby | None = None,
    launch: LaunchOptions | None = None,
) -> EvalResult:
    """Evaluate a candidate (or a baseline) on an operator's shapes; see the module docstring.

    When `request.deadline_s` passes, the shape in progress is stopped (its worker killed) and a
    partial result returns: finished shapes in full, the others not_run (result.partial =
    'deadline'). When `cancel` is set the same happens, but the partial result comes attached to
    the EvaluationCancelled raised (an AtrexError runtime/cancelled), since callers abandon a
    cancelled evaluation's verdict.

    With a `standby` (a series of evaluations), its oldest worker is adopted when its launch
    settings match, and once this evaluation's candidate is loaded the standby is topped up
    there, so the next workers' starts overlap this evaluation (evaluate.standby). `launch`: how the worker
    starts (a server passes its state directory there, so the worker cannot read it)."""
    return Trial(request, catalog, progress, cancel, standby, launch).run()
