"""Text from a worker (error messages, tracebacks) on its way out, and the trusted-side record
of whether it quoted evaluator-only data.

The sandbox keeps the hidden files unreadable; this is the line behind it, built so that it is
no oracle. What goes out never depends on a hidden value: `mask_figures` replaces EVERY decimal
figure standing as a number (any rounding, notation or unit) by `<num>`, whatever its value, so a
candidate that prints a guess learns nothing from the answer, and a candidate that somehow read a
figure cannot print it in plain notation. Whether the text quoted hidden data is decided
separately (`LeakGuard.leaks`, matching hidden figures in any rounding to 3+ significant digits,
in any power-of-1000 unit, reversed, or as digits inside a name, and the hidden strings) and goes
only into the trusted result (`hidden_data_leak`), which no tool shows (atrex_mcp.policy).
Encodings (base64, arithmetic) defeat any matcher; against those only the sandbox helps, which
is why nothing outgoing is made to depend on matching.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog

MASK = "<num>"
_MIN_NUMBER_CHARS = 6
_MIN_STRING_CHARS = 16
_MIN_SIGNIFICANT = 3
_MIN_ANY_POWER_SIGNIFICANT = 5
_MIN_INTEGER_SIGNIFICANT = 6
_MAX_SCANNED_CHARS = 1 << 20  # a worker's message is capped far below this; the record needs no more
# Any number with a fraction or an exponent that is not part of a word: inside one, digits are a
# name, a hex digest or an escape ('\\u00a73.2'), and masking them would garble the text.
DECIMAL = re.compile(r"(?<![\w\\.])(?:\d*\.\d+(?:[eE][-+]?\d+)?|\d+\.?[eE][-+]?\d+)(?!\w|\.\d)")
_DIGITS = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_UNIT_EXPONENTS = range(-12, 13, 3)


def mask_figures(text: str) -> str:
    """Every decimal figure replaced by `<num>`: the same answer whatever the values were."""
    return DECIMAL.sub(MASK, text)


def _tokens(value: Any, figures: set[float], strings: set[str]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _tokens(v, figures, strings)
    elif isinstance(value, list):
        for v in value:
            _tokens(v, figures, strings)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, float):
        if math.isfinite(value) and not value.is_integer() and len(repr(abs(value))) >= _MIN_NUMBER_CHARS:
            figures.add(abs(value))
    elif isinstance(value, str) and len(value) >= _MIN_STRING_CHARS:
        strings.add(value)


def _mantissa(value: float) -> str:
    """The significant digits of a value, 15 of them (no sign, point or exponent)."""
    return f"{value:.14e}".split("e")[0].replace(".", "")


def _candidates(text: str) -> set[tuple[float, int, bool]]:
    """Every number in the text, read as written and with its digits reversed: its value, the
    significant digits it was written with, and whether it was written as a bare integer."""
    found: set[tuple[float, int, bool]] = set()
    for token in _DIGITS.findall(text[:_MAX_SCANNED_CHARS]):
        for form in (token, token[::-1]):
            digits = len(re.split(r"[eE]", form)[0].replace(".", "").lstrip("0").rstrip("0"))
            try:
                value = abs(float(form))
            except ValueError:
                continue
            if math.isfinite(value) and value > 0 and digits >= _MIN_SIGNIFICANT:
                found.add((value, digits, form.isdigit()))
    return found


def _same_figure(number: float, digits: int, integer: bool, figure: float) -> bool:
    """`number`, written with `digits` significant digits, is `figure` rounded or truncated to
    them: a decimal in some power-of-1000 unit (3+ digits) or any power of ten (5+ digits); a
    bare integer, as digits inside a name are, at any power of ten with 6+ digits (fewer would
    match line numbers and sizes by chance)."""
    if integer and digits < _MIN_INTEGER_SIGNIFICANT:
        return False
    any_power = integer or digits >= _MIN_ANY_POWER_SIGNIFICANT
    for exponent in range(-15, 16) if any_power else _UNIT_EXPONENTS:
        scaled = figure * 10.0**exponent
        if not 0.5 < number / scaled < 2.0:
            continue
        rounded = float(f"{scaled:.{digits - 1}e}")
        truncated = _mantissa(scaled)[:digits]
        if math.isclose(number, rounded, rel_tol=1e-9) or (
            _mantissa(number)[:digits] == truncated and math.floor(math.log10(number)) == math.floor(math.log10(scaled))
        ):
            return True
    return False


class LeakGuard:
    """The hidden figures and strings of one problem, to tell whether a text quoted them."""

    def __init__(self, figures: set[float], strings: Iterable[str] = ()):
        self.figures = frozenset(figures)
        self.strings = tuple(strings)
        # By leading digits (truncated and rounded), which no unit or power of ten changes: a
        # number is compared only with the few figures it could be, so a long text costs little.
        self._by_prefix: dict[str, list[float]] = {}
        for figure in self.figures:
            for key in {
                _mantissa(figure)[:_MIN_SIGNIFICANT],
                _mantissa(float(f"{figure:.{_MIN_SIGNIFICANT - 1}e}"))[:_MIN_SIGNIFICANT],
            }:
                self._by_prefix.setdefault(key, []).append(figure)

    @classmethod
    def for_problem(cls, catalog: Catalog, op: str) -> LeakGuard:
        figures: set[float] = set()
        strings: set[str] = set()
        try:
            hidden = catalog.hidden(op)
        except (AtrexError, ImportError, OSError, KeyError, ValueError):
            return cls(figures, strings)
        _tokens(hidden.metadata, figures, strings)
        _tokens(hidden.roofline, figures, strings)
        if hidden.weight:
            _tokens(hidden.weight, figures, strings)
        visible = catalog.visible(op)
        public = visible.reference_source + visible.input_source + visible.shapes_json
        return cls({f for f in figures if repr(f) not in public}, {s for s in strings if s not in public})

    def leaks(self, text: str) -> bool:
        """Trusted side only: does `text` quote a hidden string, or a hidden figure in any rounding
        to 3+ significant digits, any power-of-1000 unit, reversed, or inside a name?"""
        if any(secret in text for secret in self.strings):
            return True
        return any(
            _same_figure(n, d, i, f)
            for n, d, i in _candidates(text)
            for f in self._by_prefix.get(_mantissa(n)[:_MIN_SIGNIFICANT], ())
        )

    def scrub(self, text: str) -> tuple[str, bool]:
        """(the text with every decimal figure masked, whether it quoted hidden data). The text
        does not depend on the hidden values; the flag is for the trusted record only."""
        return (mask_figures(text), self.leaks(text)) if text else (text, False)
