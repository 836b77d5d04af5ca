"""A second line behind the sandbox: text coming back from a worker (error messages,
tracebacks) is scanned for evaluator-only data before anyone sees it.

The sandbox should make hidden files unreadable; if it ever fails, a candidate could still
try to smuggle their content out through an exception message. The guard knows the hidden
values of the problem (long numbers and strings of metadata.json, roofline.json and the
operator's weight, minus anything also written in the visible files) and redacts any
message that contains one verbatim.
"""

from __future__ import annotations

from typing import Any

from atrex_mcp.catalog import Catalog
from atrex_mcp.errors import AtrexError

REDACTED = "[redacted: the text contained evaluator-only data]"
_MIN_NUMBER_CHARS = 6
_MIN_STRING_CHARS = 16


def _tokens(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _tokens(v, out)
    elif isinstance(value, list):
        for v in value:
            _tokens(v, out)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        text = repr(value)
        if len(text.replace("-", "").replace(".", "")) >= _MIN_NUMBER_CHARS - 1 and len(text) >= _MIN_NUMBER_CHARS:
            out.add(text)
    elif isinstance(value, str) and len(value) >= _MIN_STRING_CHARS:
        out.add(value)


class LeakGuard:
    def __init__(self, secrets: set[str]):
        self.secrets = secrets

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
        return any(secret in text for secret in self.secrets)

    def scrub(self, text: str) -> tuple[str, bool]:
        """(text, False) or (REDACTED, True)."""
        return (REDACTED, True) if text and self.leaks(text) else (text, False)
