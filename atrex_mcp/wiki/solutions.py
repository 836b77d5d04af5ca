"""Which operators a wiki document solves (`solved_names`), for the general knowledge condition
(atrex_mcp.knowledge): decided conservatively from its files alone.
* a kernel solves the operator its front matter names (`operator = "rms_norm"`);
* an article solves every operator its front matter lists under `operators`, every operator its
  title or tags name as a whole identifier (the recipes' titles end in "(rms_norm)"), and every
  operator whose kernel it links (`kernels/<name>`): an article that points at a served
  operator's kernel hands the answer over as surely as the kernel does;
* a source file of an added root solves every operator its path or text names as an identifier
  (code cannot be told apart from a solution);
* an article whose code blocks hold a complete candidate (a `class Model` beside a
  `@triton.jit` kernel) solves every operator its text names as an identifier.
A document is withheld when one of those names is a served operator. The names are stored in the
index (field `solves`), so a search masks withheld documents before ranking and cannot be used
to tell them apart by their absence from a page of hits.
"""

from __future__ import annotations

import re

from atrex_mcp.errors import AtrexError
from atrex_mcp.wiki.corpus import WikiEntry

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KERNEL_LINK = re.compile(r"\(kernels/([A-Za-z0-9_]+)\)")


def _identifiers(*texts: str) -> set[str]:
    return {name.lower() for text in texts for name in _IDENTIFIER.findall(text)}


def solved_names(entry: WikiEntry) -> set[str]:
    """The (lower-case) names of operators `entry` may solve, by the rule above."""
    named = {o.lower() for o in entry.operators}
    if entry.kind == "kernel":
        return named
    if entry.kind == "doc":
        complete = "class Model" in entry.code and "triton.jit" in entry.code
        return (
            named
            | _identifiers(entry.title, *entry.tags, *([entry.body] if complete else []))
            | {name.lower() for name in _KERNEL_LINK.findall(entry.body)}
        )
    return _identifiers(entry.rel_path, entry.body)


def withheld_error() -> AtrexError:
    return AtrexError(
        "policy",
        "withheld_in_knowledge_condition",
        "This document solves an operator the server is benchmarking, so it is withheld in the general "
        "knowledge condition.",
        "Search for patterns, recipes of other operators and hardware notes instead.",
    )
