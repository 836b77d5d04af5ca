"""What each server mode may reveal: the ONE place that decides it.

optimize (default): roofline figures of every shape and the score S of the agent's own
kernels are shown.
benchmark: the agent is being measured, so nothing derived from the evaluator-only files
reaches it: no per-problem roofline/SOL figure, no S or operator score, no production timing,
provenance or weight. A request for one is refused with an error saying it is hidden in
benchmark mode. In both modes production timings, provenance and weights stay on the server.

Tools build their results only through this module's views. As a second line of defence,
benchmark mode also passes every outgoing text (results, error messages, server logs)
through `Redactor`, which withholds any text quoting the hidden files, so a candidate kernel
that manages to print a hidden file gets nothing back.
"""

from __future__ import annotations

import logging
import re
from functools import cached_property
from typing import Any, TypeVar

from pydantic import BaseModel

from atrex_mcp.catalog import Catalog, VisibleProblem
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate.leakguard import FIGURE, LeakGuard
from atrex_mcp.evaluate.models import EvalResult, ShapeResult
from atrex_mcp.tool_models import Mode, ShapeInfo, ShapeRoofline, ShapeVerdict, ValidateResult

HIDDEN = "hidden in benchmark mode"
WITHHELD = f"[withheld: this text quoted evaluator-only data, {HIDDEN}]"
# Integrity incidents whose mere presence compares the agent's time with the hidden T_SOL.
SOL_INCIDENTS = frozenset({"faster_than_sol"})
# Keys of the hidden files: a text quoting one as a mapping key ('"t_sol_ms": …') is a dump of them.
_HIDDEN_KEY = re.compile(r"""["'](?:production_us|t_sol_ms|production_note|weight_raw|raw_sum|deviations)["']\s*:""")

ModelT = TypeVar("ModelT", bound=BaseModel)


class Redactor:
    """Withholds any text that quotes evaluator-only data of any problem of the catalog: the
    hidden figures and provenance strings the evaluator's per-problem leak guards know, plus any
    dump of the hidden files' keys. Figures match as whole numbers, and integers are left out:
    byte and FLOP counts follow from the visible shapes, and numbers like 2147483648 are common
    in honest kernel code."""

    def __init__(self, catalog: Catalog):
        self._catalog = catalog

    @cached_property
    def _secrets(self) -> tuple[frozenset[str], tuple[str, ...]]:
        figures: set[str] = set()
        strings: set[str] = set()
        for op in self._catalog.names():
            for secret in LeakGuard.for_problem(self._catalog, op).secrets:
                if FIGURE.fullmatch(secret.lstrip("-")):
                    if not secret.lstrip("-").isdigit():
                        figures.add(secret.lstrip("-"))
                else:
                    strings.add(secret)
        return frozenset(figures), tuple(strings)

    def __call__(self, text: str) -> str:
        figures, strings = self._secrets
        if (_HIDDEN_KEY.search(text) or any(secret in text for secret in strings)
                or any(token in figures for token in FIGURE.findall(text))):
            return WITHHELD
        return text


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


class Policy:
    """The views of hidden-derived data a mode may show."""

    def __init__(self, mode: Mode, catalog: Catalog):
        self.mode: Mode = mode
        self.catalog = catalog
        self.redactor = Redactor(catalog)

    @property
    def benchmark(self) -> bool:
        return self.mode == "benchmark"

    def refusal(self, what: str, hint: str = "") -> AtrexError:
        return AtrexError(
            "policy",
            "hidden_in_benchmark_mode",
            f"{what} is {HIDDEN}.",
            hint or "Benchmark mode measures you; restart the server without --benchmark-mode to optimise with roofline figures.",
        )

    def require_roofline(self, what: str) -> None:
        """Refuse a request for per-problem roofline figures in benchmark mode."""
        if self.benchmark:
            raise self.refusal(what, "roofline_lookup still works as a calculator: pass your own flops, dtype_path and bytes.")

    # ------------------------------------------------------------ views
    def shape_roofline(self, op: str, shape_id: str, hardware: str) -> ShapeRoofline | None:
        """The shape's speed-of-light figures, or None in benchmark mode."""
        if self.benchmark:
            return None
        from atrex_mcp.hardware import load_profile
        from atrex_mcp.roofline import Workload, arithmetic_intensity, bound, t_sol_ms

        stored = self.catalog.hidden(op).shape_roofline(shape_id)
        workload = Workload(flops=stored["flops"], bytes_read=stored["bytes_read"], bytes_written=stored["bytes_written"])
        profile = load_profile(hardware)
        return ShapeRoofline(
            hardware=hardware,
            flops={k: float(v) for k, v in workload.flops.items()},
            bytes_read=float(workload.bytes_read),
            bytes_written=float(workload.bytes_written),
            arithmetic_intensity=arithmetic_intensity(workload) or 0.0,
            t_sol_ms=t_sol_ms(workload, profile),
            bound=bound(workload, profile),
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
        """Integrity incidents; in benchmark mode without one that compares the time with T_SOL.
        Any trace of it (even a generic 'check failed') would tell the agent on which side of the
        hidden T_SOL its time lies, and a kernel that controls its time could binary-search it; the
        incident stays in the evaluation's own result on the server. The forgery that would make
        such a time is caught by the judge's witness (evaluate.timing_witness), which does not
        depend on T_SOL."""
        if not self.benchmark:
            return list(names)
        return [name for name in names if name not in SOL_INCIDENTS]

    def verdict(self, shape: ShapeResult) -> ShapeVerdict:
        """One shape's evaluator result as this mode may show it: in benchmark mode without
        T_SOL, S, or an incident that compares the time with T_SOL, and identical whichever side
        of T_SOL the time lies on."""
        fields = {name: getattr(shape, name) for name in ShapeVerdict.model_fields if name not in ("t_sol_ms", "score")}
        if not self.benchmark:
            return ShapeVerdict(**fields, t_sol_ms=shape.t_sol_ms, score=shape.score)
        fields["integrity"] = self.incidents(shape.integrity)
        return ShapeVerdict(**fields)

    def validate_result(self, result: EvalResult) -> ValidateResult:
        """A whole evaluation as this mode may show it."""
        verdicts = [self.verdict(s) for s in result.shapes]
        device = f"cuda: {result.device.name}" if result.device.kind == "cuda" else "cpu (Triton interpreter, not timed)"
        return ValidateResult(
            op=result.op,
            mode=self.mode,
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
            isolation_warnings=result.isolation.warnings,
            operator_score=None if self.benchmark else result.operator_score,
        )

    # ------------------------------------------------------------ outgoing text
    def redact(self, text: str) -> str:
        return self.redactor(text) if self.benchmark else text

    def redact_model(self, model: ModelT) -> ModelT:
        """Every string inside a result model, redacted (benchmark mode)."""
        if not self.benchmark:
            return model

        def walk(node: Any) -> Any:
            if isinstance(node, str):
                return self.redactor(node)
            if isinstance(node, dict):
                return {k: walk(v) for k, v in node.items()}
            if isinstance(node, list):
                return [walk(v) for v in node]
            return node

        return type(model).model_validate(walk(model.model_dump()))
