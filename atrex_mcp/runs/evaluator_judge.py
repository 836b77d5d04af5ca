"""The judge a server's runs use: the evaluator itself.

* `check`: `atrex_mcp.evaluate.evaluate()` — the full gate (fresh seeds, sandboxed worker,
  integrity checks); with timing it also gives the baseline's absolute times and S.
* `time_pair`: the accepted kernel and the candidate, each in its own sandbox worker, timed
  on the same GPU in alternating rounds (A B, B A, A B, …). Every round is the evaluator's own
  timing stage (L2 flush, fresh rotating inputs, side-stream and primitive checks, timed
  outputs compared with the reference), so a round's median is exactly what `evaluate` would
  report; round k of A and round k of B form one pair, measured back to back.

The evaluator exposes `evaluate()` only; the pair builds on its `_Evaluation` stages and
`Session`, and `open_session` below repeats the few lines of `_Evaluation.run()` that set up a
worker's scratch directory (see docs/runs.md: a public `time_interleaved` in the evaluator
would replace it).
"""

from __future__ import annotations

import tempfile
import threading
from contextlib import ExitStack
from pathlib import Path

from atrex_mcp.catalog import Catalog
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import device as eval_device
from atrex_mcp.evaluate.evaluator import (
    CANDIDATE_FILE,
    CPU_HOST_MEMORY_BYTES,
    GPU_HOST_MEMORY_BYTES,
    _Evaluation,
    evaluate,
)
from atrex_mcp.evaluate.models import EvalRequest, ShapeResult
from atrex_mcp.evaluate.session import Session, protected_roots
from atrex_mcp.runs.acceptance import PairedSamples
from atrex_mcp.runs.measure import CheckResult, MeasurementFailed, Progress
from atrex_mcp.runs.models import KernelTimes, ShapeCheck
from sandbox.launcher import Cancelled, LaunchSpec

ROUNDS = 10
CHECK_SEEDS = 3


def open_session(evaluation: _Evaluation, scratch: Path, extra_env: dict[str, str] | None = None) -> Session:
    """A sandbox worker session for `evaluation`'s candidate in `scratch`, set up as evaluate() does."""
    problem = evaluation.problem
    (scratch / "io").mkdir(exist_ok=True)
    (scratch / "reference.py").write_text(problem.reference_source)
    (scratch / "input.py").write_text(problem.input_source)
    (scratch / "shapes.json").write_text(problem.shapes_json)
    (scratch / CANDIDATE_FILE).write_text(evaluation.source)
    spec = LaunchSpec(scratch=scratch, device=evaluation.device, protected=protected_roots(evaluation.catalog.roots, []),
                      env={**evaluation.adapter.worker_env(evaluation.cuda), **(extra_env or {})},
                      host_memory_bytes=GPU_HOST_MEMORY_BYTES if evaluation.cuda else CPU_HOST_MEMORY_BYTES)
    rlimits = {"CORE": 0, "FSIZE": spec.file_size_bytes, "DATA_EXTRA": spec.host_memory_bytes, "NOFILE": 4096}
    return Session(spec, init={"device": evaluation.device, "input_file": "input.py", "rlimits": rlimits},
                   load={"candidate_file": CANDIDATE_FILE, "init_sets": [s.init for s in evaluation.shapes],
                         "forward_params": evaluation.forward_params},
                   guard=evaluation.guard, compile_timeout_s=evaluation.request.compile_timeout_s, cancel=evaluation.cancel)


class EvaluatorJudge:
    """Judge backed by atrex_mcp.evaluate (see the module docstring)."""

    def __init__(self, catalog: Catalog, *, rounds: int = ROUNDS, seeds: int = CHECK_SEEDS):
        self.catalog = catalog
        self.rounds = rounds
        self.seeds = seeds

    def check(self, op: str, source: str, shapes: list[str], *, hardware: str, dsl: str, timing: bool,
              progress: Progress | None = None, cancel: threading.Event | None = None) -> CheckResult:
        request = EvalRequest(op=op, source=source, shapes=shapes, seeds=self.seeds, hardware=hardware, timing=timing,
                              dsl=dsl, measure_dsl=False)
        result = evaluate(request, self.catalog, progress=progress, cancel=cancel)
        checks = [ShapeCheck(id=s.id, correct=s.correct, category=s.category, message=s.message[:1000]) for s in result.shapes]
        times = KernelTimes(time_ms={s.id: s.time_ms for s in result.shapes}, score={s.id: s.score for s in result.shapes})
        return CheckResult(compiled=result.compiled, checks=checks, times=times,
                           compile_error=result.compile_error.message[:2000] if result.compile_error else "",
                           detail={"device": result.device.name, "integrity": result.integrity})

    def time_pair(self, op: str, accepted_source: str, candidate_source: str, shapes: list[str], *, hardware: str,
                  progress: Progress | None = None, cancel: threading.Event | None = None) -> dict[str, PairedSamples] | None:
        if not eval_device.has_gpu():
            return None
        report = progress or (lambda message, fraction: None)
        evaluations = [_Evaluation(EvalRequest(op=op, source=text, shapes=shapes, seeds=1, hardware=hardware, measure_dsl=False),
                                   self.catalog, None, cancel) for text in (accepted_source, candidate_source)]
        names = ("accepted kernel", "candidate")
        samples: dict[str, PairedSamples] = {}
        with ExitStack() as stack:
            scratches = [Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="atrex-pair-"))) for _ in evaluations]
            sessions = [open_session(ev, scratch) for ev, scratch in zip(evaluations, scratches)]
            for session in sessions:
                stack.callback(session.stop)
            try:
                for name, session in zip(names, sessions):
                    failure = session.start(first=True)
                    if failure is not None:
                        raise MeasurementFailed(f"the {name} did not load: {failure.category}: {failure.message[:500]}")
                shape_list = evaluations[0].shapes
                for i, shape in enumerate(shape_list):
                    input_bytes = []
                    for name, ev, session, scratch in zip(names, evaluations, sessions, scratches):
                        warm = ShapeResult(id=shape.id, correct=False)
                        size = ev.correctness(session, scratch, shape, warm)  # also compiles its kernels before timing
                        if size is None:
                            raise MeasurementFailed(f"the {name} failed on shape {shape.id}: {warm.category}: {warm.message[:500]}")
                        input_bytes.append(size)
                    times: tuple[list[float], list[float]] = ([], [])
                    for r in range(self.rounds):
                        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                            if sessions[k].ensure() is not None:
                                raise MeasurementFailed(f"the {names[k]}'s worker could not be restarted on shape {shape.id}")
                            timed = ShapeResult(id=shape.id, correct=True)
                            evaluations[k].timing(sessions[k], scratches[k], shape, timed, input_bytes[k])
                            if timed.time_ms is None:
                                why = timed.category or timed.timing_note or "no time"
                                raise MeasurementFailed(f"the {names[k]} on shape {shape.id}, round {r + 1}: {why}: {timed.message[:500]}")
                            times[k].append(timed.time_ms)
                        report(f"paired timing: shape {shape.id}, round {r + 1}/{self.rounds}",
                               (i + (r + 1) / self.rounds) / len(shape_list))
                    samples[shape.id] = PairedSamples(accepted_ms=times[0], candidate_ms=times[1])
            except Cancelled:
                raise AtrexError("runtime", "cancelled", "The paired timing was cancelled; its workers were killed.") from None
        return samples
