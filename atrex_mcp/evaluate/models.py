"""Typed request and result of an evaluation (the JSON edge of the evaluator)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from atrex_mcp.errors import ErrorInfo
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.knowledge import Knowledge

NOT_TIMED_BY_REQUEST = "not timed: timing was not requested"

Baseline = Literal["eager", "torch-compile"]


class EvalRequest(BaseModel):
    """What to evaluate, on which shapes, and how hard."""

    op: str = Field(description="Operator (problem) name.")
    source: str | None = Field(
        default=None,
        description="Candidate file text: one Python file defining `class Model(nn.Module)`. None with a baseline.",
    )
    baseline: Baseline | None = Field(
        default=None, description="Evaluate the reference itself: eager, or wrapped in torch.compile."
    )
    shapes: list[str] | None = Field(
        default=None, description=("Shape ids (a repeated id is judged once); None = every scored (non-smoke) shape.")
    )
    seeds: int = Field(
        default=5, ge=1, le=64, description="Fresh random input seeds per shape for the correctness stage."
    )
    hardware: str = Field(default="h200", description="Hardware profile whose T_SOL scores are computed against.")
    timing: bool = Field(default=True, description="Run the performance stage (GPU only; ignored without a GPU).")
    dsl: str = Field(default="triton", description="Target DSL whose kernels count as the candidate's own.")
    measure_dsl: bool = Field(
        default=True, description="Profile one forward per shape to attribute device time to the DSL."
    )
    timeout_s: float = Field(
        default=120.0, gt=0, description="Wall-clock limit per shape and stage (correctness, timing, profile)."
    )
    compile_timeout_s: float = Field(default=120.0, gt=0, description="Wall-clock limit for importing the candidate.")
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Wall-clock limit for the whole evaluation, from the call. When it passes, the shape in progress is "
            "stopped (its worker killed) and the result comes back partial: finished shapes in full, the rest "
            "not_run/not_run_deadline. None: no limit beyond the per-stage timeouts."
        ),
    )

    @field_validator("shapes")
    @classmethod
    def _once_each(cls, ids: list[str] | None) -> list[str] | None:
        """Each shape is judged once, in the order first named."""
        return None if ids is None else list(dict.fromkeys(ids))


class MismatchDetail(BaseModel):
    """Where and by how much one output tensor differs from the reference."""

    output: str = Field(
        description="Output name: 'out' for a single tensor, 'out[i]' for a tuple entry, the key for a dict."
    )
    rule: str = Field(
        description="Comparison rule used: allclose, exact, fp8_codes or ranked_ids (its rtol: the tie tolerance)."
    )
    atol: float | None = Field(default=None, description="Absolute tolerance actually applied (after the RMS cap).")
    rtol: float | None = Field(default=None, description="Relative tolerance applied.")
    max_abs_error: float = Field(description="Largest |candidate − reference| over elements where both are finite.")
    max_rel_error: float = Field(
        description="Largest |candidate − reference| / |reference| over finite, non-zero reference elements."
    )
    mismatch_fraction: float = Field(description="Share of elements outside the tolerance.")
    mismatches: int = Field(description="Number of elements outside the tolerance.")
    numel: int = Field(description="Number of elements compared.")
    first_bad_index: list[int] | None = Field(
        default=None, description="Index of the first element outside the tolerance (row-major)."
    )
    reference_value: float | None = Field(default=None, description="Reference value at first_bad_index.")
    candidate_value: float | None = Field(default=None, description="Candidate value at first_bad_index.")
    nonfinite_mismatches: int = Field(
        default=0, description="Elements where NaN/inf appears on one side but not identically on the other."
    )


class KernelTime(BaseModel):
    """One device kernel (or copy) seen in the profiled forward."""

    name: str = Field(description="Kernel name as the profiler reports it.")
    time_us: float = Field(description="Device time summed over its launches in one forward, microseconds.")
    count: int = Field(description="Launches in one forward.")
    origin: str = Field(
        description=(
            "candidate_dsl (the candidate's own kernel in the target DSL), generated (torch.compile/Inductor), "
            "library (cuBLAS, cuDNN, flash…), framework (PyTorch/aten, copies)."
        )
    )


class TimingStats(BaseModel):
    """How the time was measured and how noisy it was."""

    median_ms: float = Field(description="Median per-call time.")
    q1_ms: float = Field(description="First quartile.")
    q3_ms: float = Field(description="Third quartile.")
    iqr_ms: float = Field(description="Interquartile range.")
    min_ms: float = Field(description="Fastest call.")
    calls: int = Field(description="Timed calls.")
    planned_calls: int | None = Field(
        default=None,
        description=(
            "Timed calls the worker planned; fewer ran when the median's ~95 % confidence interval came within "
            "±1 % of it first (evaluator.TIMING_STOP_RELATIVE, checked every 10 calls from 20 on)."
        ),
    )
    median_ci_ms: float | None = Field(
        default=None,
        description=(
            "Half-width of the median's distribution-free ~95 % confidence interval over the timed calls "
            "(sandbox.timing.median_ci), computed by the judge from the reported times."
        ),
    )
    warmup_calls: int = Field(description="Untimed warm-up calls before them (on a separate input set).")
    input_sets: int = Field(description="Distinct fresh input sets the timed calls rotated over.")
    flush_bytes: int = Field(description="Bytes written before every timed call to flush L2 (≥ 2× L2).")
    covers_side_streams: bool = Field(description="True when work left on other streams was detected and counted.")
    sync_gap_ms: float = Field(
        description="Median gap a device-wide synchronisation adds after a no-op call (calibration)."
    )
    wall_s: float = Field(description="Wall time of the timed loop as the worker measured it.")
    sm_clock_mhz: int | None = Field(
        default=None, description="Median SM clock sampled during the timing request (NVML, every 2 ms)."
    )
    mem_clock_mhz: int | None = Field(
        default=None, description="Median memory clock sampled during the timing request (NVML)."
    )
    sm_below_max_fraction: float | None = Field(
        default=None, description="Share of those samples with the SM clock below 95 % of its maximum."
    )
    throttle_reasons: list[str] = Field(
        default_factory=list, description="Clock throttle reasons seen during the timing request, idle excluded (NVML)."
    )
    spin_us: float | None = Field(
        default=None, description="Untimed GPU spin queued before each call so host launch latency is not timed."
    )
    host_late_calls: int | None = Field(
        default=None,
        description=(
            "Timed calls whose host side (start event, launch, end event) took longer than the spin: the GPU may "
            "have idled inside their timed region."
        ),
    )
    host_bound: bool | None = Field(
        default=None,
        description=(
            "The host outran the spin on most timed calls: the time includes host launch work (Python, many small "
            "launches) and moves with host load; fewer launches per call (fusion, CUDA graphs) make it GPU-bound."
        ),
    )
    reuse_compared: bool = Field(
        default=False,
        description="Fresh and reused input-set calls were numerous enough to test for an input-reuse speed-up.",
    )
    request_wall_s: float | None = Field(
        default=None,
        description=("The judge's own clock around the timing request: every reported call must fit inside it."),
    )
    witness_ms: float | None = Field(
        default=None,
        description=(
            "The judge's witness: wall per call of a burst of back-to-back forwards on fresh inputs, timed by the "
            "judge, its calibrated overheads taken off (evaluate.timing_witness). None on a GPU where a graph replay "
            "judged alone (the plain bursts run only where it cannot)."
        ),
    )
    witness_floor_ms: float | None = Field(
        default=None,
        description=("The least median the witness allows; a median below it is the integrity failure timing_forged."),
    )
    witness: str | None = Field(
        default=None,
        description=(
            "Which witness judged the time: 'graph' (a CUDA graph of the forwards, timed by the judge), "
            "'uncapturable' (the forward could not be captured: the plain burst alone, see witness_note), 'host' "
            "(CPU: the plain burst)."
        ),
    )
    witness_note: str = Field(
        default="",
        description=(
            "Why no graph replay witnessed the device time, when none did: the forward could not be captured, or "
            "the replay was inconclusive."
        ),
    )
    clock_ms: float | None = Field(
        default=None,
        description=(
            "Where no graph replay witnessed the device time: the judge's own wall per call of the plain burst "
            "(witness_ms), the least time the shape is scored with (time_ms = max(median, clock_ms))."
        ),
    )
    graph_calls: int | None = Field(default=None, description="Forwards in the graph burst (K).")
    graph_witness_ms: float | None = Field(
        default=None,
        description=(
            "Device time per forward the judge's clock saw in the fastest replay of the graph burst, round trip and "
            "fingerprints taken off."
        ),
    )
    graph_floor_ms: float | None = Field(
        default=None,
        description=(
            "The least median the graph burst allows; witness_floor_ms is it where the replay judged alone, else the "
            "larger of it and the plain burst's floor where both judged."
        ),
    )
    graph_subtracted_ms: float | None = Field(
        default=None,
        description=(
            "Per forward, what the judge took off the replay's wall besides the round trip: the input refresh and "
            "the fingerprints, both timed in its own process."
        ),
    )
    graph_slack_ms: float | None = Field(
        default=None,
        description="Per forward, the graph floor's allowance for request noise and calibration error.",
    )


class ShapeResult(BaseModel):
    """The verdict for one shape: the first stage that rejected it, or its time and score."""

    id: str = Field(description="Shape id.")
    correct: bool = Field(description="All correctness seeds (and the checked timed calls) matched the reference.")
    stage: str | None = Field(
        default=None,
        description="Stage that rejected the shape (compile, runtime, correctness, performance); null when passed.",
    )
    category: str | None = Field(
        default=None, description="Failure category (atrex_mcp.evaluate.taxonomy); null when passed."
    )
    message: str = Field(default="", description="What went wrong, or why a figure is missing.")
    time_ms: float | None = Field(default=None, description="Median time per call; null when not timed.")
    iqr_ms: float | None = Field(default=None, description="Interquartile range of the timed calls.")
    timing: TimingStats | None = Field(default=None, description="Timing conditions and spread.")
    timing_note: str = Field(
        default="",
        description=(
            "Why time_ms is null; or, when it is set, which calls it was taken over if not all (only first visits of "
            "an input set, after calls on reused sets ran much faster)."
        ),
    )
    dsl_share: float | None = Field(
        default=None,
        description="Share of device time in the candidate's own target-DSL kernels; null when not measured.",
    )
    kernels: list[KernelTime] = Field(
        default_factory=list, description="Kernels of one profiled forward with their attribution."
    )
    score: float | None = Field(
        default=None,
        description=(
            "S_j = T_SOL / T_cand; above 1 is an evaluation error (see integrity), kept raw here; it enters S_i "
            "clipped at 1."
        ),
    )
    score_note: str = Field(default="", description="Why score is null, when it is.")
    t_sol_ms: float | None = Field(
        default=None,
        description=(
            "Speed-of-light time of this shape on the chosen profile (evaluator-only; policy decides who sees it)."
        ),
    )
    mismatch: list[MismatchDetail] = Field(
        default_factory=list, description="Per-output error detail of the first failing comparison."
    )
    integrity: list[str] = Field(
        default_factory=list, description="Integrity incidents on this shape (taxonomy.INTEGRITY_INCIDENTS)."
    )
    seeds: list[int] = Field(
        default_factory=list, description="Correctness seeds drawn for this evaluation (recorded for reproduction)."
    )
    timing_seeds: list[int] = Field(
        default_factory=list, description="Seeds of the warm-up set and the timed input sets."
    )
    seconds: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Time per stage on this shape: correctness (worker calls incl. JIT), first_call_extra (first call minus "
            "the fastest: JIT compile/autotune), reference_and_compare (the judge's own time in that stage with no "
            "worker call in flight; the two sum to the stage's wall), timing (the worker's timing request), "
            "timed_output_checks (the reference outputs and hand-overs that check three timed calls' outputs), "
            "profile."
        ),
    )

    @property
    def judged(self) -> bool:
        """False for a shape the evaluation stopped before judging (stage not_run)."""
        return self.stage != tx.NOT_RUN

    @property
    def failed(self) -> bool:
        """A judged shape some stage rejected (a passed shape names no stage)."""
        return self.judged and (not self.correct or self.stage is not None)

    @property
    def untimed_pass(self) -> bool:
        """True for a shape that passed correctness in an evaluation that asked for no timing
        (a compile probe): its verdict still lacks the performance stage."""
        return self.correct and self.time_ms is None and self.timing_note == NOT_TIMED_BY_REQUEST


class DeviceInfo(BaseModel):
    """Where the evaluation ran."""

    kind: Literal["cuda", "cpu"] = Field(description="cuda, or cpu (Triton interpreter, not timed).")
    name: str = Field(default="", description="GPU name (NVML or CUDA), or the CPU.")
    sm_count: int | None = Field(default=None, description="Streaming multiprocessors.")
    l2_bytes: int | None = Field(default=None, description="L2 cache size.")
    memory_bytes: int | None = Field(default=None, description="Device memory.")
    driver: str | None = Field(default=None, description="Driver version (NVML).")
    cuda: str | None = Field(default=None, description="CUDA version torch was built with.")
    sm_clock_mhz: int | None = Field(default=None, description="SM clock at the start (NVML).")
    max_sm_clock_mhz: int | None = Field(default=None, description="Maximum SM clock (NVML).")
    mem_clock_mhz: int | None = Field(default=None, description="Memory clock at the start (NVML).")
    throttle_reasons: list[str] = Field(
        default_factory=list, description="Active throttle reasons at the start (NVML)."
    )
    versions: dict[str, str | None] = Field(default_factory=dict, description="python, torch, triton in the worker.")


class Isolation(BaseModel):
    """Which isolation mechanisms held for this evaluation's worker(s)."""

    uid: int | None = Field(default=None, description="uid the worker ran as (65534 = nobody).")
    pid_namespace: bool = Field(default=False, description="Worker ran in its own PID namespace.")
    mount_namespace: bool = Field(
        default=False,
        description=(
            "Worker ran in its own mount namespace: private /proc, protected directories covered by an empty tmpfs."
        ),
    )
    landlock_abi: int = Field(default=0, description="Kernel Landlock ABI (0 = unavailable).")
    landlock_enforced: bool = Field(default=False, description="Landlock file-system restriction in force.")
    landlock_handles: list[str] = Field(
        default_factory=list, description="What Landlock restricted: filesystem, tcp, signals+abstract-unix."
    )
    capabilities_dropped: bool = Field(
        default=False, description="All capabilities dropped (relevant when uid stayed 0)."
    )
    seccomp_enforced: bool = Field(
        default=False,
        description=(
            "Seccomp filter in force: no file metadata changes, no sockets, no large shared memory (sandbox/README.md)."
        ),
    )
    network_namespace: bool = Field(default=False, description="Worker ran in its own network namespace (no way out).")
    task_limit: int | None = Field(default=None, description="Most tasks (threads too) in its PID namespace.")
    scratch_bytes: int | None = Field(
        default=None,
        description="Most bytes the worker could write: a tmpfs, or without one the server's scratch watchdog "
        "(what the worker writes in one polling interval can pass it); None: no limit.",
    )
    memory_cap_bytes: int | None = Field(
        default=None,
        description="Most host memory the worker and its children could hold together (its memory cgroup: private "
        "and shared memory, tmpfs files, page cache); None: no memory cgroup here, the notes say why.",
    )
    memory_peak_bytes: int | None = Field(
        default=None, description="The most host memory a worker's memory cgroup held at once (None: no cgroup)."
    )
    rlimits: dict[str, int] = Field(default_factory=dict, description="Resource limits applied.")
    warnings: list[str] = Field(default_factory=list, description="Mechanisms that could not be applied, and why.")


class Overhead(BaseModel):
    """The evaluator's own cost, kept apart from the per-shape work."""

    worker_start_s: float = Field(
        default=0.0,
        description=(
            "What the evaluation waited for its first worker: process start + imports + CUDA init, or, for a worker "
            "spawned ahead (spawned_ahead_s > 0), what of that was left."
        ),
    )
    spawned_ahead_s: float = Field(
        default=0.0,
        description=(
            "How long before this evaluation started it its first worker had been spawned (a standby worker, started "
            "during the evaluation before this one); 0 when this evaluation spawned it."
        ),
    )
    cuda_init_s: float = Field(default=0.0, description="CUDA context creation inside that.")
    candidate_load_s: float = Field(default=0.0, description="Importing the candidate (its module-level work).")
    restarts: int = Field(default=0, description="Workers restarted after a fault or timeout.")
    restart_s: float = Field(default=0.0, description="Time spent restarting workers.")
    total_s: float = Field(default=0.0, description="Whole evaluation wall time.")


class EvalResult(BaseModel):
    """A whole evaluation: compile verdict, per-shape results, operator score, conditions."""

    op: str = Field(description="Operator name.")
    candidate: str = Field(description="'candidate', or the baseline evaluated: 'eager' / 'torch-compile'.")
    candidate_sha256: str = Field(description="SHA-256 of the evaluated source text.")
    dsl: str = Field(description="Target DSL.")
    hardware: str = Field(description="Hardware profile used for T_SOL.")
    compiled: bool = Field(
        description=(
            "The candidate imported, defines an nn.Module Model with the right signature, and at least one shape got "
            "past the compile stage."
        )
    )
    compile_error: ErrorInfo | None = Field(default=None, description="Why it did not compile.")
    shapes: list[ShapeResult] = Field(default_factory=list, description="One result per requested shape, in order.")
    partial: Literal["deadline", "cancelled", "selection"] | None = Field(
        default=None,
        description=(
            "Why not every shape was judged: 'deadline' (the request's deadline_s passed), 'cancelled' (the caller "
            "cancelled) or 'selection' (results combined from benchmark runs that sampled shapes or fit a budget, so "
            "some shapes were never started). The shapes not judged have stage 'not_run'. null: every shape was "
            "judged."
        ),
    )
    operator_score: float | None = Field(
        default=None,
        description=(
            "S_i: median of min(S_j, 1) over correct shapes, 0 if none is correct; null when correct shapes have no "
            "score (not timed / no roofline). On a partial result, over the judged shapes only (see "
            "operator_score_note); null when none was judged."
        ),
    )
    operator_score_note: str = Field(
        default="", description="Why operator_score is null, when it is; on a partial result, which shapes it covers."
    )
    device: DeviceInfo = Field(description="Device and versions.")
    isolation: Isolation = Field(description="Isolation actually in force.")
    integrity: list[str] = Field(
        default_factory=list,
        description="Evaluation-level incidents (e.g. a shape incident, evaluator-only data found in candidate text).",
    )
    knowledge: Knowledge | None = Field(
        default=None,
        description=(
            "Knowledge condition the candidate was written under (atrex_mcp.knowledge); null when not stated, and "
            "for a baseline."
        ),
    )
    seeds: list[int] = Field(default_factory=list, description="Every seed drawn, in order (correctness and timing).")
    overhead: Overhead = Field(default_factory=Overhead, description="Evaluator overhead split.")
    started_at: str = Field(description="UTC start time, ISO 8601.")
