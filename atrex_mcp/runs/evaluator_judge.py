"""The judge a server's runs use: the evaluator itself.

* `check`: `atrex_mcp.evaluate.evaluate()` — the full gate (fresh seeds, sandboxed worker,
  integrity checks); with timing it also gives the baseline's absolute times and S.
* `time_pair`: the accepted kernel (A) and the candidate (B), each loaded once in its own
  sandbox worker (the two started side by side) and kept warm for the whole measurement. Per
  shape: both run their correctness seeds (which also JIT-compiles them); the candidate then
  passes one full evaluator timing stage (fresh inputs, L2 flush, side-stream and primitive
  checks, timed outputs compared with the reference), so a kernel that games the timing never
  gets a verdict (nor does one the stage found faster on input sets it had seen: a cache);
  then `rounds` short paired rounds alternate A B, B A, A B, … Each round is one worker `time`
  request: the evaluator's warm-up, then `calls` timed calls each on its own fresh input set
  (fewer where the GPU cannot hold that many sets of the shape) after the 2x L2 flush; its value
  is the median of those calls. No set is timed twice, so an output cache never hits. Round k
  of A and of B form one pair measured back to back, so clock and thermal drift cancel in the
  pair ratio, and many cheap rounds give the acceptance rule's bootstrap a tight interval. Work
  left on another stream is judged once per kernel and shape over all its rounds together
  (`timing_checks.side_stream_pooled`): one round of 24 calls is too small a sample for the
  rule: a single round's gap can exceed the rule's margin for an honest kernel of a few µs.

This is the one interleaved A/B timing loop: the loop's acceptance and the tests both use it.
Each kernel is a `Trial` (atrex_mcp.evaluate.evaluator), driven through its public steps.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import device as eval_device
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.evaluator import LaunchOptions, Trial, evaluate, timing_sets
from atrex_mcp.evaluate.models import EvalRequest, ShapeResult
from atrex_mcp.evaluate.session import Failure, Session
from atrex_mcp.evaluate.timing_checks import side_stream_pooled
from atrex_mcp.evaluate.timing_witness import upper_bound_ok
from atrex_mcp.problemset.catalog import Catalog, Shape
from atrex_mcp.runs.acceptance import PairedSamples
from atrex_mcp.runs.measure import CheckResult, MeasurementFailed, Progress
from atrex_mcp.runs.models import KernelTimes, ShapeCheck
from sandbox.launcher import Cancelled
from sandbox.messages import TimeRequest
from sandbox.timing import flush_bytes_for

ROUNDS = 16  # paired rounds per shape (the rule needs at least 10)
CALLS_PER_ROUND = 24  # timed calls, each on its own fresh input set, whose median is one round's value
CHECK_SEEDS = 3
NAMES = ("accepted kernel", "candidate")


@dataclass
class Round:
    """One short timing round: its value (the median call) and the raw figures the side-stream rule needs."""

    median_ms: float
    times_ms: list[float]
    synced_ms: list[float]
    noop_gap_ms: list[float]


def timing_round(trial: Trial, session: Session, shape: Shape, name: str, calls: int, set_bytes: int) -> Round:
    """One short timing round in a warm worker: `calls` timed calls, each on its own fresh input
    set of `set_bytes` (inputs and output), fewer where the evaluator would hold fewer sets
    (`timing_sets`), so a candidate that keeps each set's output never wins a round on a cache
    hit. Raises MeasurementFailed when the worker fails
    or replaced a timing primitive (the candidate's full timing stage checks these too; a round
    must not hide them)."""
    sets = min(calls, timing_sets(set_bytes, trial.device_info.memory_bytes))
    seeds = [trial.seed() for _ in range(sets + 1)]
    flush = flush_bytes_for(session.worker_device.get("l2_bytes"))
    request = TimeRequest(
        shape=trial.payload_shape(shape),
        warmup_seed=seeds[0],
        seeds=seeds[1:],
        min_calls=sets,
        max_calls=sets,
        flush_bytes=flush,
    )
    t0 = time.perf_counter()
    reply = session.call(request, trial.request.timeout_s)
    wall = time.perf_counter() - t0
    if isinstance(reply, Failure):
        raise MeasurementFailed(f"the {name} on shape {shape.id}: {reply.category}: {reply.message[:500]}")
    if reply.get("replaced"):
        raise MeasurementFailed(f"the {name} replaced timing primitives: {', '.join(reply['replaced'])}")
    if session.forged:
        raise MeasurementFailed(f"the {name} wrote frames on its worker's reply channel: {tx.REPLY_FORGED}")
    if not upper_bound_ok(reply["times_ms"], wall):
        raise MeasurementFailed(
            f"the {name}'s reported calls on shape {shape.id} outlast the judge's wall of the request"
        )
    return Round(statistics.median(reply["times_ms"]), reply["times_ms"], reply["synced_ms"], reply["noop_gap_ms"])


def check_side_streams(name: str, shape_id: str, rounds: list[Round]) -> None:
    """Raises MeasurementFailed when the kernel left work on another stream, judged over all its rounds."""
    verdict = side_stream_pooled([(r.times_ms, r.synced_ms, r.noop_gap_ms) for r in rounds])
    if verdict.detected:
        raise MeasurementFailed(
            f"the {name} left work on another stream on shape {shape_id} "
            f"({verdict.excess_ms:.3f} ms after its end event, median over {len(rounds)} rounds)"
        )


class EvaluatorJudge:
    """Judge backed by atrex_mcp.evaluate (see the module docstring)."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        rounds: int = ROUNDS,
        seeds: int = CHECK_SEEDS,
        calls: int = CALLS_PER_ROUND,
        state_dir: Path | None = None,
    ):
        """`state_dir`: the serving process's state directory, which its workers may not read."""
        self.catalog = catalog
        self.launch = LaunchOptions(state_dir=state_dir)
        self.rounds = rounds
        self.seeds = seeds
        self.calls = calls

    def check(
        self,
        op: str,
        source: str,
        shapes: list[str],
        *,
        hardware: str,
        dsl: str,
        timing: bool,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> CheckResult:
        request = EvalRequest(
            op=op,
            source=source,
            shapes=shapes,
            seeds=self.seeds,
            hardware=hardware,
            timing=timing,
            dsl=dsl,
            measure_dsl=False,
        )
        result = evaluate(request, self.catalog, progress=progress, cancel=cancel, launch=self.launch)
        checks = [
            ShapeCheck(id=s.id, correct=s.correct, category=s.category, message=s.message[:1000]) for s in result.shapes
        ]
        times = KernelTimes(
            time_ms={s.id: s.time_ms for s in result.shapes}, score={s.id: s.score for s in result.shapes}
        )
        return CheckResult(
            compiled=result.compiled,
            checks=checks,
            times=times,
            compile_error=result.compile_error.message[:2000] if result.compile_error else "",
            detail={"device": result.device.name, "integrity": result.integrity},
        )

    def time_pair(
        self,
        op: str,
        accepted_source: str,
        candidate_source: str,
        shapes: list[str],
        *,
        hardware: str,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> dict[str, PairedSamples] | None:
        """Paired samples per shape (see the module docstring); None without a GPU. Raises
        MeasurementFailed when either kernel fails to load, check or time."""
        if not eval_device.has_gpu():
            return None
        report = progress or (lambda message, fraction: None)
        trials = [
            Trial(
                EvalRequest(op=op, source=text, shapes=shapes, seeds=1, hardware=hardware, measure_dsl=False),
                self.catalog,
                None,
                cancel,
                launch=self.launch,
            )
            for text in (accepted_source, candidate_source)
        ]
        samples: dict[str, PairedSamples] = {}
        with ExitStack() as stack:
            scratches = [Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="atrex-pair-"))) for _ in trials]
            sessions = [trial.open_session(scratch) for trial, scratch in zip(trials, scratches)]
            for session in sessions:
                stack.callback(session.stop)
            try:
                with ThreadPoolExecutor(max_workers=2) as pool:
                    failures = list(pool.map(lambda pair: pair[0].load(pair[1]), zip(trials, sessions)))
                for name, failure in zip(NAMES, failures):
                    if failure is not None:
                        raise MeasurementFailed(f"the {name} did not load: {failure.category}: {failure.message[:500]}")
                shape_list = trials[0].shapes
                for i, shape in enumerate(shape_list):

                    def tick(r: int, shape: Shape = shape, i: int = i) -> None:
                        report(
                            f"paired timing: shape {shape.id}, round {r}/{self.rounds}",
                            (i + r / self.rounds) / len(shape_list),
                        )

                    samples[shape.id] = self.pair_rounds(trials, sessions, shape, tick)
            except Cancelled:
                raise AtrexError(
                    "runtime", "cancelled", "The paired timing was cancelled; its workers were killed."
                ) from None
        return samples

    def pair_rounds(
        self, trials: list[Trial], sessions: list[Session], shape: Shape, tick: Callable[[int], None]
    ) -> PairedSamples:
        """One shape of `time_pair`, both kernels loaded in `sessions`: warm both on `shape`, gate
        the candidate with a full timing stage, then alternate rounds (`tick(r)` after round r)."""
        set_bytes = []
        for name, trial, session in zip(NAMES, trials, sessions):
            warm = ShapeResult(id=shape.id, correct=False)
            size = trial.correctness(session, shape, warm)
            if size is None:
                raise MeasurementFailed(f"the {name} failed on shape {shape.id}: {warm.category}: {warm.message[:500]}")
            set_bytes.append(size)
        gate = ShapeResult(id=shape.id, correct=True)
        trials[1].timing(sessions[1], shape, gate, set_bytes[1])
        if gate.time_ms is None:
            why = gate.category or gate.timing_note or "no time"
            raise MeasurementFailed(f"the candidate's timing stage on shape {shape.id}: {why}: {gate.message[:500]}")
        if tx.INPUT_REUSE_SPEEDUP in gate.integrity:
            raise MeasurementFailed(
                f"the candidate's timing stage on shape {shape.id}: {gate.timing_note}; "
                "a kernel that is faster on inputs it has seen is not compared"
            )
        floor = gate.timing.witness_floor_ms if gate.timing is not None else None
        rounds: tuple[list[Round], list[Round]] = ([], [])
        for r in range(self.rounds):
            for k in (0, 1) if r % 2 == 0 else (1, 0):
                if sessions[k].ensure() is not None:
                    raise MeasurementFailed(f"the {NAMES[k]}'s worker could not be restarted on shape {shape.id}")
                rounds[k].append(timing_round(trials[k], sessions[k], shape, NAMES[k], self.calls, set_bytes[k]))
            if floor is not None and rounds[1][-1].median_ms < floor:  # the gate's witness holds for every round
                raise MeasurementFailed(
                    f"the candidate's round {r + 1} on shape {shape.id} reported "
                    f"{rounds[1][-1].median_ms:.4g} ms, below what the judge's clock "
                    f"witnessed in its timing stage ({floor:.4g} ms at least): {tx.TIMING_FORGED}"
                )
            tick(r + 1)
        for name, kernel_rounds in zip(NAMES, rounds):
            check_side_streams(name, shape.id, kernel_rounds)
        return PairedSamples(
            accepted_ms=[r.median_ms for r in rounds[0]], candidate_ms=[r.median_ms for r in rounds[1]]
        )
