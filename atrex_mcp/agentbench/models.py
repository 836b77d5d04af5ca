"""The JSON edges of a benchmark run: its settings, each operator's state, the collected
submission, token usage and the isolation actually in force. Written to RUN_DIR as JSON."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from atrex_mcp.errors import ErrorInfo
from atrex_mcp.knowledge import Knowledge

AgentKind = Literal["claude", "codex", "command"]
Condition = Literal["vanilla", "optimizer"]
ServerTransport = Literal["stdio", "http"]
OpStatus = Literal["pending", "running", "done", "error", "interrupted"]
Outcome = Literal["submitted", "no_submission", "contract_failed"]


class AgentSpec(BaseModel):
    """Which agent drives the run and how it is started."""

    kind: AgentKind = Field(description="claude (Claude Code), codex (Codex CLI) or command (any program).")
    command: list[str] = Field(default_factory=list, description="For kind=command: the argv, run in the workspace.")
    binary: str | None = Field(default=None, description="Path of the claude/codex executable; null = found on PATH.")
    model: str | None = Field(
        default=None, description="Model name passed to the CLI (--model / -m); null = the CLI's default."
    )
    extra_args: list[str] = Field(
        default_factory=list, description="Extra arguments appended to the CLI's command line."
    )
    pass_env: list[str] = Field(
        default_factory=list,
        description="Environment variables passed through to the agent besides the driver's own list.",
    )


class Isolation(BaseModel):
    """How the agent was kept from the evaluator-only files, as it was actually set up."""

    agent_uid: int = Field(description="uid the agent process runs as.")
    agent_gid: int = Field(description="gid the agent process runs as.")
    server_uid: int = Field(description="uid the MCP server (and the bench runner) runs as.")
    transport: ServerTransport = Field(
        description="stdio: the agent's CLI starts the server; http: the runner starts it, the agent connects with a "
        "token."
    )
    hidden_readable: list[str] | None = Field(
        default=None, description="Evaluator-only files the agent's uid could read (null = not checked, [] = none)."
    )
    warnings: list[str] = Field(
        default_factory=list, description="Why the setup is weaker than the strong one, with the fix."
    )


class RunConfig(BaseModel):
    """A run's settings (RUN_DIR/run.json). A resumed run must use the same ones."""

    name: str = Field(description="Run name shown in reports (default: the directory's name).")
    agent: AgentSpec
    ops: list[str] = Field(description="Operators of the run, in order.")
    dsl: str = Field(description="Target DSL.")
    condition: Condition = Field(
        description="vanilla: one pass; optimizer: the measure-revise loop with wiki, profile and run memory."
    )
    knowledge: Knowledge = Field(
        default="full",
        description=(
            "Knowledge condition of the server (atrex_mcp.knowledge): none, general (no document that solves a "
            "served operator) or full. Runs made before the condition existed had the full wiki."
        ),
    )
    budget_s: float = Field(description="Wall-clock budget per operator, seconds.")
    problems: list[str] = Field(description="Problem roots the server serves (absolute paths).")
    hardware: str = Field(description="Hardware profile of the server and of the scores.")
    server: ServerTransport = Field(description="How the agent reaches the MCP server.")
    isolation: Isolation = Field(description="Isolation of the agent from hidden state, as set up.")
    created_at: str = Field(description="UTC time the run was created, ISO 8601.")
    atrex_mcp_version: str = Field(description="Version of atrex-mcp that created the run.")


class TokenUsage(BaseModel):
    """What the agent's CLI reported about its model use (null where it reports nothing)."""

    input_tokens: int | None = Field(default=None, description="Uncached input tokens.")
    output_tokens: int | None = Field(default=None, description="Output tokens (reasoning included where reported).")
    cache_read_tokens: int | None = Field(default=None, description="Input tokens served from the prompt cache.")
    cache_write_tokens: int | None = Field(default=None, description="Input tokens written to the prompt cache.")
    cost_usd: float | None = Field(default=None, description="Cost the CLI computed, USD.")
    turns: int | None = Field(default=None, description="Model turns.")
    source: str = Field(description="Where the figures come from.")


class Submission(BaseModel):
    """The artifact the agent packaged, as the trusted side collected and re-checked it."""

    outcome: Outcome = Field(
        description="submitted, no_submission (no package found) or contract_failed "
        "(the trusted re-check, or the server's package tool, refused it)."
    )
    found: str | None = Field(default=None, description="Where the package was found in the workspace (relative path).")
    artifact: str | None = Field(
        default=None, description="The trusted copy, relative to RUN_DIR (ops/<op>/submission/<op>.py)."
    )
    sha256: str | None = Field(default=None, description="sha256 of the trusted copy.")
    matches_manifest: bool | None = Field(
        default=None, description="The workspace file still had the hash its package manifest recorded."
    )
    violations: list[str] = Field(
        default_factory=list, description="Output-contract violations, each `rule (line N): message — fix: …`."
    )


class OpState(BaseModel):
    """One operator's progress (RUN_DIR/ops/<op>/state.json). `done` is final: a resumed run
    skips it; `pending`, `running` (a run that died), `interrupted` and `error` run again."""

    op: str
    status: OpStatus = "pending"
    attempts: int = Field(default=0, description="How many times the agent was started for this operator.")
    started_at: str | None = None
    finished_at: str | None = None
    elapsed_s: float | None = Field(default=None, description="Agent wall time, seconds.")
    exit_code: int | None = Field(
        default=None, description="The agent's exit status (negative: killed by that signal)."
    )
    timed_out: bool = Field(default=False, description="The agent was stopped at the budget.")
    usage: TokenUsage | None = None
    submission: Submission | None = None
    error: ErrorInfo | None = Field(default=None, description="Why the agent could not be run (status error).")
    agent_uid: int | None = Field(default=None, description="uid the agent ran as.")
