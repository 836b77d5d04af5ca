"""What each server mode may reveal: the ONE place that decides it.

optimize (default): roofline figures of every shape and the score S of the agent's own
kernels are shown.
benchmark: the agent is being measured, so nothing derived from the evaluator-only files
reaches it: no per-problem roofline/SOL figure, no S or operator score, no production timing,
provenance or weight. A request for one is refused with an error saying it is hidden in
benchmark mode. In both modes production timings, provenance and weights stay on the server.

Tools build their results only through this module's views. As a second line of defence,
benchmark mode also passes every outgoing text (results, error messages, server logs)
through `Redactor`, which withholds text quoting the hidden files and blanks literal hidden
figures, so a candidate kernel that manages to print a hidden file gets nothing back.
"""

from __future__ import annotations

import json
import logging
import math
import re
from functools import cached_property
from typing import Any, TypeVar

from pydantic import BaseModel

from atrex_mcp.catalog import HIDDEN_FILES, WEIGHTS_FILE, Catalog, VisibleProblem
from atrex_mcp.errors import AtrexError
from atrex_mcp.tool_models import Mode, ShapeInfo, ShapeRoofline, ShapeVerdict

HIDDEN = "hidden in benchmark mode"
WITHHELD = f"[withheld: this text quoted evaluator-only data, {HIDDEN}]"
REDACTED = f"[{HIDDEN}]"
# Integrity incidents whose mere presence compares the agent's time with the hidden T_SOL.
SOL_INCIDENTS = frozenset({"faster_than_sol"})
# Keys of the hidden files: a text quoting one as a mapping key ('"t_sol_ms": …') is a dump of them.
_HIDDEN_KEY = re.compile(r"""["'](?:production_us|t_sol_ms|production_note|weight_raw|raw_sum|deviations)["']\s*:""")
# A decimal figure; integers are left alone (shape sizes are visible and common).
_DECIMAL = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?(?![\w.])")
_MIN_SIGNIFICANT_DIGITS = 4  # shorter figures (9.95, 0.5) are too common to blank without hurting honest text
_MIN_PROVENANCE_CHARS = 16

ModelT = TypeVar("ModelT", bound=BaseModel)


def _significant_digits(token: str) -> int:
    mantissa = re.split(r"[eE]", token.lstrip("+-"))[0].replace(".", "").lstrip("0")
    return len(mantissa)


class Redactor:
    """Knows the hidden figures and provenance strings of a catalog and blanks them in text."""

    def __init__(self, catalog: Catalog):
        self._catalog = catalog

    @cached_property
    def _hidden(self) -> tuple[frozenset[float], tuple[str, ...]]:
        """Every decimal figure of the hidden files, also rounded to 4..17 significant digits,
        and their long strings (provenance, notes) that no visible file contains."""
        numbers: set[float] = set()
        strings: set[str] = set()

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)
            elif isinstance(node, float) and math.isfinite(node) and not node.is_integer():
                numbers.update(float(f"{node:.{d}g}") for d in range(_MIN_SIGNIFICANT_DIGITS, 18))
            elif isinstance(node, str) and len(node) >= _MIN_PROVENANCE_CHARS:
                strings.add(node)

        for op in self._catalog.names():
            folder = self._catalog.problem_dir(op)
            for name in HIDDEN_FILES:
                if (folder / name).is_file():
                    walk(json.loads((folder / name).read_text()))
        for root in self._catalog.roots:
            if (root / WEIGHTS_FILE).is_file():
                walk(json.loads((root / WEIGHTS_FILE).read_text()))
        visible = "\n".join(
            self._catalog.visible(op).reference_source + self._catalog.visible(op).shapes_json for op in self._catalog.names()
        )
        return frozenset(numbers), tuple(sorted((s for s in strings if s not in visible), key=len, reverse=True))

    def _blank_number(self, match: re.Match[str]) -> str:
        token = match.group(0)
        if _significant_digits(token) >= _MIN_SIGNIFICANT_DIGITS and float(token) in self._hidden[0]:
            return REDACTED
        return token

    def __call__(self, text: str) -> str:
        if _HIDDEN_KEY.search(text):
            return WITHHELD
        numbers, strings = self._hidden
        for secret in strings:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return _DECIMAL.sub(self._blank_number, text) if numbers else text


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

    def verdict(self, verdict: ShapeVerdict, t_sol_ms: float | None, score: float | None) -> ShapeVerdict:
        """A shape's verdict as this mode may show it."""
        if not self.benchmark:
            return verdict.model_copy(update={"t_sol_ms": t_sol_ms, "score": score})
        update: dict[str, Any] = {"t_sol_ms": None, "score": None}
        if set(verdict.integrity) & SOL_INCIDENTS:
            update["integrity"] = sorted((set(verdict.integrity) - SOL_INCIDENTS) | {"integrity_check_failed"})
        if verdict.category in SOL_INCIDENTS:
            update["category"] = "integrity_check_failed"
            update["message"] = f"The timing failed an integrity check; the details are {HIDDEN}."
        return verdict.model_copy(update=update)

    def operator_score(self, score: float | None) -> float | None:
        return None if self.benchmark else score

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
