"""The knowledge condition: what the wiki may give an agent that is being measured.

* `full`: every document (the setting of agents that may look answers up).
* `general` (the default in benchmark mode): articles and kernels, but none that solves one of
  the operators the server serves, so a score measures kernel writing, not retrieval.
* `none`: no wiki at all. The wiki tools are then not registered, rather than answering an
  error: the tool list a client sees is the knowledge it has, and an agent does not spend turns
  retrying a tool that can only fail.

Every validate result, evaluation and benchmark report carries the condition, so a score is
always stated with the knowledge that produced it. How the wiki tells which documents solve an operator:
atrex_mcp.wiki.solutions.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

Knowledge = Literal["none", "general", "full"]
KNOWLEDGE_CONDITIONS: tuple[Knowledge, ...] = ("none", "general", "full")
KNOWLEDGE_HELP = (
    "what the wiki gives the agent: none (no wiki tools), general (articles and kernels, but none that "
    "solves a served operator; the default in benchmark mode) or full (everything; the default in optimize mode)"
)


def default_knowledge(benchmark: bool) -> Knowledge:
    return "general" if benchmark else "full"


def withheld_operators(knowledge: Knowledge, served: Collection[str]) -> frozenset[str]:
    """The operators whose solutions the wiki must not hand out under `knowledge`."""
    return frozenset(op.lower() for op in served) if knowledge == "general" else frozenset()
