"""What each server mode may reveal: the ONE place that decides it.

Services (evaluator, profiler, run memory, packager) return the server's full objects; every
tool's result is one of this module's views of them (`validate_view`, `iteration_view`,
`run_state_view`, `run_roofline_view`, `profile_view`, `package_view`), and benchmark-mode
logs pass `log_redactor`. Where a hidden figure must not even be computed or written (a
profile's roofline, a run package's scores), the service is handed the `Policy` and asks it
(`profile_roofline`, `package_figures`).

optimize (default): roofline figures of every shape and the score S of the agent's own
kernels are shown.
benchmark: the agent is being measured, so nothing derived from the evaluator-only files
reaches it: no per-problem roofline/SOL figure, no S or operator score, no production timing,
provenance or weight. A request for one is refused with an error saying it is hidden in
benchmark mode. In both modes production timings, provenance and weights stay on the server.

No oracle: what a tool returns is built from an allow-list of typed fields (the views below),
never from free text derived from the hidden files, and nothing outgoing is ever filtered by
comparing it with a hidden value. Such a filter answers differently when a caller's guess is a
hidden figure, which turns it into a yes/no oracle; so errors never echo a caller's argument, and
the only text filter left (`Redactor`, for benchmark-mode logs) is value-independent: it masks every
decimal figure and any dump of the hidden files' keys, whatever the values. Text a candidate's
worker sends back is masked the same way (atrex_mcp.evaluate.leakguard); whether it quoted hidden
data is recorded on the trusted side only and shown by no tool.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection
from typing import Any

from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate.leakguard import mask_figures
from atrex_mcp.evaluate.models import EvalResult, ShapeResult
from atrex_mcp.knowledge import Knowledge, default_knowledge
from atrex_mcp.package import PackageResult
from atrex_mcp.problemset import roofline
from atrex_mcp.problemset.catalog import Catalog, VisibleProblem
from atrex_mcp.profiling.models import ProfileReport
from atrex_mcp.runs.models import IterationRecord, KernelTimes, KernelView, RunState
from atrex_mcp.views import (
    Mode,
    PackageOutput,
    ProfileResult,
    ShapeInfo,
    ShapeRoofline,
    ShapeVerdict,
    ValidateResult,
)

HIDDEN = "hidden in benchmark mode"
WITHHELD = f"[withheld: this text quoted evaluator-only data, {HIDDEN}]"
# Integrity incidents whose mere presence compares the agent's time with the hidden T_SOL.
SOL_INCIDENTS = frozenset({"faster_than_sol"})
# Incidents decided by comparing text with hidden values: shown in no mode (an oracle otherwise).
HIDDEN_MATCH_INCIDENTS = frozenset({"hidden_data_leak"})
# Keys of the hidden files: a text quoting one as a mapping key ('"t_sol_ms": …') is a dump of them.
_HIDDEN_KEY = re.compile(r"""["'](?:production_us|t_sol_ms|production_note|weight_raw|raw_sum|deviations)["']\s*:""")


class Redactor:
    """Value-independent masking for text bound where an agent may read it (benchmark-mode server
    logs): every decimal figure becomes `<num>`, and a text quoting the hidden files' keys as a
    mapping is withheld. It never looks at a hidden value, so its answer to a text that quotes a
    hidden figure and to one that quotes any other number is the same."""

    def __call__(self, text: str) -> str:
        return WITHHELD if _HIDDEN_KEY.search(text) else mask_figures(text)


class RedactingFilter(logging.Filter):
    """Applies the redactor to every server log record (stderr reaches the client's logs)."""

    def __init__(self, redact: Redactor):
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._redact(record.getMessage())
        record.args = None
        if record.exc_info:
            record.msg += "\n" + self._redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
            record.exc_text = None
        return True


def log_redactor(mode: Mode) -> Redactor | None:
    """The filter for server log text in `mode`: the `Redactor` in benchmark mode, none otherwise.
    A function of the mode alone, so the `serve` command can install it before any catalog is read."""
    return Redactor() if mode == "benchmark" else None


class Policy:
    """The views of hidden-derived data a mode may show."""

    def __init__(self, mode: Mode, catalog: Catalog, *, knowledge: Knowledge | None = None):
        self.mode: Mode = mode
        self.catalog = catalog
        self.knowledge: Knowledge = knowledge or default_knowledge(mode == "benchmark")
        self.redactor = log_redactor(mode)

    @property
    def benchmark(self) -> bool:
        return self.mode == "benchmark"

    def refusal(self, what: str, hint: str = "") -> AtrexError:
        return AtrexError(
            "policy",
            "hidden_in_benchmark_mode",
            f"{what} is {HIDDEN}.",
            hint
            or "Benchmark mode measures you; restart the server without --benchmark-mode to optimise with roofline "
            "figures.",
        )

    def require_roofline(self, what: str) -> None:
        """Refuse a request for per-problem roofline figures in benchmark mode."""
        if self.benchmark:
            raise self.refusal(
                what, "roofline_lookup still works as a calculator: pass your own flops, dtype_path and bytes."
            )

    # ------------------------------------------------------------ views
    def shape_figures(self, op: str, shape_id: str, hardware: str) -> roofline.ShapeRoofline | None:
        """The shape's trusted figures (atrex_mcp.problemset.roofline.shape_roofline); None in benchmark mode."""
        if self.benchmark:
            return None
        return roofline.shape_roofline(self.catalog.hidden(op), shape_id, hardware)

    def shape_roofline(self, op: str, shape_id: str, hardware: str) -> ShapeRoofline | None:
        """The shape's speed-of-light figures, or None in benchmark mode."""
        figures = self.shape_figures(op, shape_id, hardware)
        if figures is None:
            return None
        return ShapeRoofline(
            hardware=hardware,
            flops={k: float(v) for k, v in figures.flops.items()},
            bytes_read=float(figures.bytes_read),
            bytes_written=float(figures.bytes_written),
            arithmetic_intensity=figures.arithmetic_intensity or 0.0,
            t_sol_ms=figures.t_sol_ms,
            bound=figures.bound,
        )

    def shapes(self, problem: VisibleProblem, hardware: str) -> list[ShapeInfo]:
        return [
            ShapeInfo(
                id=s.id,
                smoke=s.smoke,
                init=s.init,
                inputs=s.inputs,
                roofline=None if s.smoke else self.shape_roofline(problem.name, s.id, hardware),
            )
            for s in problem.shapes
        ]

    def incidents(self, names: list[str]) -> list[str]:
        """Integrity incidents as this mode may show them: never one found by matching text with
        hidden values, and in benchmark mode none that compares the time with T_SOL (its mere
        presence would tell a kernel that controls its own time where T_SOL lies)."""
        dropped = HIDDEN_MATCH_INCIDENTS | (SOL_INCIDENTS if self.benchmark else frozenset())
        return [name for name in names if name not in dropped]

    def verdict(self, shape: ShapeResult) -> ShapeVerdict:
        """One shape's evaluator result as this mode may show it: in benchmark mode without
        T_SOL, S, or an incident that compares the time with T_SOL, and identical whichever side
        of T_SOL the time lies on."""
        fields = {name: getattr(shape, name) for name in ShapeVerdict.model_fields if name not in ("t_sol_ms", "score")}
        if not self.benchmark:
            return ShapeVerdict(
                **{**fields, "integrity": self.incidents(shape.integrity)}, t_sol_ms=shape.t_sol_ms, score=shape.score
            )
        fields["integrity"] = self.incidents(shape.integrity)
        return ShapeVerdict(**fields)

    def validate_view(self, result: EvalResult, *, warnings_shown: Collection[str] = ()) -> ValidateResult:
        """A whole evaluation as this mode may show it. Isolation warnings in `warnings_shown`
        (already in an earlier answer to this caller) are left out: they are the operator's to
        act on, not the agent's, and repeating them on every call is noise."""
        verdicts = [self.verdict(s) for s in result.shapes]
        device = (
            f"cuda: {result.device.name}" if result.device.kind == "cuda" else "cpu (Triton interpreter, not timed)"
        )
        return ValidateResult(
            op=result.op,
            mode=self.mode,
            knowledge=self.knowledge,
            candidate_sha256=result.candidate_sha256,
            compiled=result.compiled,
            compile_error=result.compile_error,
            device=device,
            timed=any(s.time_ms is not None for s in result.shapes),
            seeds=result.seeds,
            passed=sum(v.correct for v in verdicts),
            failed=sum(not v.correct for v in verdicts),
            shapes=verdicts,
            integrity=self.incidents(result.integrity),
            isolation_warnings=[w for w in result.isolation.warnings if w not in warnings_shown],
            operator_score=None if self.benchmark else result.operator_score,
        )

    # ------------------------------------------------------------ run memory
    def _times(self, times: KernelTimes) -> KernelTimes:
        """A kernel's figures: in benchmark mode its own times only, without S."""
        return KernelTimes(time_ms=times.time_ms) if self.benchmark else times

    def iteration_view(self, record: IterationRecord) -> IterationRecord:
        """One stored iteration as this mode may show it."""
        return record.model_copy(update={"times": self._times(record.times)}) if self.benchmark else record

    def run_roofline_view(self, roofline: dict[str, Any] | None) -> dict[str, Any] | None:
        """A run's per-shape roofline (T_SOL, bound, intensity): None in benchmark mode."""
        return None if self.benchmark else roofline

    def run_state_view(self, state: RunState) -> RunState:
        """The run memory as this mode may show it: in benchmark mode without the roofline and
        without S of the baseline, the accepted kernel and every iteration."""
        if not self.benchmark:
            return state

        def kernel(view: KernelView | None) -> KernelView | None:
            return None if view is None else view.model_copy(update={"times": self._times(view.times)})

        return state.model_copy(
            update={
                "roofline": self.run_roofline_view(state.roofline),
                "baseline": kernel(state.baseline),
                "accepted": kernel(state.accepted),
                "iterations": [self.iteration_view(it) for it in state.iterations],
            }
        )

    def package_figures(self, figures: dict[str, Any], scores: dict[str, Any]) -> dict[str, Any]:
        """The measured figures a run's package manifest may carry: `scores` (S of the accepted
        kernel and the baseline) join them in optimize mode only. Asked before the manifest is
        written, since a written file is the deliverable itself."""
        return figures if self.benchmark else {**figures, **scores}

    # ------------------------------------------------------------ profiles and packages
    def profile_roofline(self, figures: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
        """The roofline a profile may carry and classify with: `figures()` is called in optimize
        mode only, so in benchmark mode T_SOL shapes neither the report nor its bottleneck evidence."""
        return None if self.benchmark else figures()

    def profile_view(self, report: ProfileReport) -> ProfileResult:
        """A stored profile as this mode may show it (its roofline only in optimize mode)."""
        data = report.model_dump()
        if self.benchmark:
            data["roofline"] = None
        return ProfileResult(**data, mode=self.mode)

    def package_view(self, result: PackageResult) -> PackageOutput:
        """A written package: paths, hashes and the contract report, which hold no hidden figure;
        what the manifest itself holds was decided by `package_figures` before it was written."""
        return PackageOutput(**result.model_dump())

    # ------------------------------------------------------------ outgoing text
    def log_redactor(self) -> Redactor | None:
        """The filter for this server's log text (see `log_redactor`)."""
        return log_redactor(self.mode)

    def redact(self, text: str) -> str:
        """Benchmark-mode log text through the value-independent `Redactor`."""
        return self.redactor(text) if self.redactor is not None else text
