"""A second line behind the sandbox: text coming back from a worker (error messages,
tracebacks) is scanned for evaluator-only data before anyone sees it.

The sandbox should make hidden files unreadable; if it ever fails, a candidate could still
try to smuggle their content out through an exception message. The guard knows the hidden
values of the problem (long non-integer numbers and long strings of metadata.json,
roofline.json and the operator's weight, minus anything also written in the visible files) and
redacts any message that contains one: a string anywhere, a number only as a whole number (so
a hidden 0.0123 is not found inside 10.01234). Integers are left out, as `policy.Redactor`
leaves them out: the hidden ones are byte and FLOP counts that follow from the visible shapes,
and such numbers (2147483648, 12582912) are common in honest messages.
"""

from __future__ import annotations

import re
from typing import Any

from atrex_mcp.catalog import Catalog
from atrex_mcp.errors import AtrexError

REDACTED = "[redacted: the text contained evaluator-only data]"
_MIN_NUMBER_CHARS = 6
_MIN_STRING_CHARS = 16
# A number as a whole token: not part of a longer number or name (a sentence's full stop may follow).
FIGURE = re.compile(r"(?<![\w.])\d*\.?\d+(?:[eE][-+]?\d+)?(?![\w]|\.\d)")


def _tokens(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _tokens(v, out)
    elif isinstance(value, list):
        for v in value:
            _tokens(v, out)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, float):
        text = repr(abs(value))
        if len(text.replace("-", "").replace(".", "")) >= _MIN_NUMBER_CHARS - 1 and len(text) >= _MIN_NUMBER_CHARS:
            out.add(text)
    elif isinstance(value, str) and len(value) >= _MIN_STRING_CHARS:
        out.add(value)


class LeakGuard:
    def __init__(self, secrets: set[str]):
        self.secrets = secrets
        self._figures = frozenset(t for t in secrets if FIGURE.fullmatch(t))
        self._strings = tuple(t for t in secrets if t not in self._figures)

    @classmethod
    def for_problem(cls, catalog: Catalog, op: str) -> "LeakGuard":
        tokens: set[str] = set()
        try:
            hidden = catalog.hidden(op)
        except (AtrexError, ImportError, OSError, KeyError, ValueError):
            return cls(tokens)
        _tokens(hidden.metadata, tokens)
        _tokens(hidden.roofline, tokens)
        if hidden.weight:
            _tokens(hidden.weight, tokens)
        visible = catalog.visible(op)
        public = visible.reference_source + visible.input_source + visible.shapes_json
        return cls({t for t in tokens if t not in public})

    def leaks(self, text: str) -> bool:
        return (any(secret in text for secret in self._strings)
                or (bool(self._figures) and any(token in self._figures for token in FIGURE.findall(text))))

    def scrub(self, text: str) -> tuple[str, bool]:
        """(text, False) or (REDACTED, True)."""
        return (REDACTED, True) if text and self.leaks(text) else (text, False)
