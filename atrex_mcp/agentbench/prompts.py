"""The task prompts of the two conditions, and the MCP tools each condition may use.

* vanilla: one pass: read the problem, write the kernel, validate until correct, package.
* optimizer: the measure-revise loop: wiki knowledge, profiles, the server's run memory with
  verified iterations, then package the accepted kernel.

The templates (prompts/*.md) mention nothing evaluator-only: no roofline, score, weight or
production timing. The tool lists are enforced where the agent's CLI allows it (Claude Code's
allowed tools, Codex's enabled_tools), not only asked for.
"""

from __future__ import annotations

import string
from importlib import resources

from atrex_mcp.agentbench.models import Condition
from atrex_mcp.knowledge import Knowledge

SERVER_NAME = "atrex"  # the MCP server's name in every agent config: Claude sees mcp__atrex__<tool>

VANILLA_TOOLS = ("list_problems", "get_problem", "validate", "package")
OPTIMIZER_TOOLS = (
    *VANILLA_TOOLS,
    "profile_kernel",
    "roofline_lookup",
    "wiki_search",
    "wiki_read",
    "start_run",
    "submit_baseline",
    "record_iteration",
    "run_state",
    "partial_restart",
    "unmask",
    "package_run",
)
SERVER_TOOLS = (
    OPTIMIZER_TOOLS  # every tool the benchmark-mode server has; a condition's others are denied where the CLI can
)
CONDITION_TOOLS: dict[str, tuple[str, ...]] = {"vanilla": VANILLA_TOOLS, "optimizer": OPTIMIZER_TOOLS}
DSL_NAMES = {"triton": "Triton"}


WIKI_TOOLS = ("wiki_search", "wiki_read")
NO_WIKI_NOTE = "\n\nThis run has no wiki (knowledge condition `none`): skip every step that uses it.\n"


def allowed_tools(condition: Condition, knowledge: Knowledge = "full") -> tuple[str, ...]:
    """The condition's tools; without the wiki tools when the knowledge condition has no wiki."""
    return tuple(t for t in CONDITION_TOOLS[condition] if knowledge != "none" or t not in WIKI_TOOLS)


def template(condition: Condition) -> str:
    return resources.files("atrex_mcp.agentbench").joinpath("prompts", f"{condition}.md").read_text()


def render_prompt(condition: Condition, op: str, dsl: str, budget_s: float, knowledge: Knowledge = "full") -> str:
    """The prompt for one operator; every placeholder must be filled (a typo fails loudly)."""
    tools = ", ".join(f"`{t}`" for t in allowed_tools(condition, knowledge))
    prompt = string.Template(template(condition)).substitute(
        op=op, dsl_name=DSL_NAMES.get(dsl, dsl), tools=tools, budget_minutes=f"{budget_s / 60:g}"
    )
    uses_wiki = any(t in CONDITION_TOOLS[condition] for t in WIKI_TOOLS)
    return prompt.rstrip("\n") + NO_WIKI_NOTE if knowledge == "none" and uses_wiki else prompt
