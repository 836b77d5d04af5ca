"""How a run measures kernels: the two questions it asks the evaluator.

`Judge` is the seam between run memory and the evaluator: correctness (plus absolute figures
for the baseline) through `atrex_mcp.evaluate`, and a paired, interleaved timing of the
accepted kernel against a candidate in one worker session. Tests inject a judge with known
timings; the server uses `EvaluatorJudge` (atrex_mcp.runs.evaluator_judge).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from atrex_mcp.runs.acceptance import PairedSamples
from atrex_mcp.runs.models import KernelTimes, ShapeCheck

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class CheckResult:
    """What the evaluator said about one kernel: compiled?, per-shape correctness, figures."""

    compiled: bool
    checks: list[ShapeCheck] = field(default_factory=list)
    compile_error: str = ""
    times: KernelTimes = field(default_factory=KernelTimes)
    detail: dict = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.compiled and bool(self.checks) and all(c.correct for c in self.checks)

    @property
    def failure(self) -> str:
        if not self.compiled:
            return f"did not compile: {self.compile_error}"
        bad = [c for c in self.checks if not c.correct]
        if not self.checks:
            return "no shape was checked"
        if not bad:
            return ""
        first = bad[0]
        return f"{len(bad)}/{len(self.checks)} shapes wrong; shape {first.id}: {first.category}: {first.message}"


class MeasurementFailed(Exception):
    """The paired timing could not produce figures because of one kernel (e.g. a timed call's
    output was wrong, or it ran past the time budget): recorded as that iteration's failure."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Judge(Protocol):
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
        """Correctness on the given shapes; with timing=True also absolute times and S."""
        ...

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
        """Interleaved timing of the two kernels in one session; None when no GPU can time.
        Raises MeasurementFailed when a kernel breaks during the measurement."""
        ...
