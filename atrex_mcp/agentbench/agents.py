"""Agent drivers: how Claude Code, Codex or any command is started on one operator, what it
is told, and what its transcript says (token usage, the step it is on).

Every driver gets a clean environment: PATH, a HOME of its own, the variables its CLI needs
for credentials (listed per driver, plus --agent-env), and nothing else of the caller's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atrex_mcp.agentbench.endpoint import TOKEN_ENV, McpEndpoint
from atrex_mcp.agentbench.isolation import which
from atrex_mcp.agentbench.models import AgentSpec, TokenUsage
from atrex_mcp.agentbench.prompts import SERVER_NAME, SERVER_TOOLS
from atrex_mcp.errors import AtrexError

MCP_CONFIG_FILE = "mcp.json"
PROMPT_FILE = "PROMPT.md"
_BASE_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TERM",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
)
MCP_STARTUP_S = 120  # the server imports torch and the evaluator before it answers


@dataclass
class AgentTask:
    """Everything a driver needs to start an agent on one operator."""

    op: str
    prompt: str
    workspace: Path
    home: Path
    endpoint: McpEndpoint
    tools: tuple[str, ...]
    budget_s: float
    condition: str
    dsl: str


@dataclass
class Invocation:
    argv: list[str]
    env: dict[str, str]
    files: dict[Path, str] = field(default_factory=dict)  # written (owned by the agent) before the start


def _environment(task: AgentTask, spec: AgentSpec, prefixes: tuple[str, ...]) -> dict[str, str]:
    env = {k: os.environ[k] for k in _BASE_ENV if k in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith(prefixes)})
    env.update({k: os.environ[k] for k in spec.pass_env if k in os.environ})
    env.update(
        {
            "HOME": str(task.home),
            "TMPDIR": str(task.home / "tmp"),
            "ATREX_OP": task.op,
            "ATREX_WORKSPACE": str(task.workspace),
        }
    )
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _json_event(line: str) -> dict | None:
    """One transcript line as a JSON object; None for anything else (a transcript mixes in plain text)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _json_lines(path: Path) -> list[dict]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [event for event in map(_json_event, lines) if event is not None]


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ClaudeDriver:
    """Claude Code headless (`claude -p`): only our server (--strict-mcp-config), only the
    condition's tools (the server's others are denied, which also keeps them from the model)
    plus file editing in the workspace; no shell, no web."""

    name = "claude"
    FILE_TOOLS = ("Read", "Write", "Edit", "Glob", "Grep")
    DENIED_TOOLS = ("Bash", "WebFetch", "WebSearch")
    ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_")

    def __init__(self, spec: AgentSpec):
        self.spec = spec

    def executable(self) -> Path | None:
        return Path(self.spec.binary) if self.spec.binary else which("claude")

    def invocation(self, task: AgentTask, executable: Path) -> Invocation:
        config = task.home / MCP_CONFIG_FILE
        allowed = [f"mcp__{SERVER_NAME}__{t}" for t in task.tools] + list(self.FILE_TOOLS)
        denied = list(self.DENIED_TOOLS) + [f"mcp__{SERVER_NAME}__{t}" for t in SERVER_TOOLS if t not in task.tools]
        argv = [
            str(executable),
            "-p",
            task.prompt,
            "--strict-mcp-config",
            "--mcp-config",
            str(config),
            "--allowedTools",
            ",".join(allowed),
            "--disallowedTools",
            ",".join(denied),
            "--output-format",
            "stream-json",
            "--verbose",
        ]
        if self.spec.model:
            argv += ["--model", self.spec.model]
        env = _environment(task, self.spec, self.ENV_PREFIXES)
        env.update(
            {
                "ENABLE_TOOL_SEARCH": "false",  # MCP tools in the first request, not behind a search tool
                "DISABLE_TELEMETRY": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "MCP_TIMEOUT": str(MCP_STARTUP_S * 1000),
                "MCP_TOOL_TIMEOUT": str(int(task.budget_s * 1000)),
            }
        )
        return Invocation(argv + self.spec.extra_args, env, {config: task.endpoint.mcp_config_json()})

    @staticmethod
    def usage(transcript: Path) -> TokenUsage | None:
        results = [e for e in _json_lines(transcript) if e.get("type") == "result"]
        if not results:
            return None
        last = results[-1]
        usage = last.get("usage") or {}
        return TokenUsage(
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            cache_read_tokens=_int(usage.get("cache_read_input_tokens")),
            cache_write_tokens=_int(usage.get("cache_creation_input_tokens")),
            cost_usd=last.get("total_cost_usd"),
            turns=_int(last.get("num_turns")),
            source="claude stream-json result event",
        )

    @staticmethod
    def describe(line: str) -> str | None:
        event = _json_event(line)
        if event is None:
            return None
        if event.get("type") == "assistant":
            for block in (event.get("message") or {}).get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    return "tool " + str(block.get("name", "")).removeprefix(f"mcp__{SERVER_NAME}__")
            return "thinking"
        if event.get("type") == "result":
            return "finished"
        return None


def _toml(value: object) -> str:
    """A TOML value for Codex's `-c key=value` (JSON strings and arrays are valid TOML)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


class CodexDriver:
    """Codex headless (`codex exec --json`): our server only, required at start (Codex drops an
    optional server that is slower than about a second to start), the condition's tools
    approved, shell commands confined to the workspace by Codex's own sandbox."""

    name = "codex"
    ENV_PREFIXES = ("OPENAI_", "CODEX_API_KEY")

    def __init__(self, spec: AgentSpec):
        self.spec = spec

    def executable(self) -> Path | None:
        return Path(self.spec.binary) if self.spec.binary else which("codex")

    def invocation(self, task: AgentTask, executable: Path) -> Invocation:
        key = f"mcp_servers.{SERVER_NAME}"
        ep = task.endpoint
        server: dict[str, Any] = (
            {"command": ep.command[0], "args": ep.command[1:], "env": ep.env}
            if ep.transport == "stdio"
            else {"url": ep.url, "bearer_token_env_var": TOKEN_ENV}
        )
        server.update(
            {
                "required": True,
                "startup_timeout_sec": MCP_STARTUP_S,
                "tool_timeout_sec": int(task.budget_s),
                "default_tools_approval_mode": "approve",
                "enabled_tools": list(task.tools),
            }
        )
        overrides = [f"{key}.{name}={_toml(value)}" for name, value in server.items()]
        argv = [str(executable), "exec", "--skip-git-repo-check", "--json", "-C", str(task.workspace)]
        if not any(a in ("-s", "--sandbox") or a.startswith("--sandbox=") for a in self.spec.extra_args):
            argv += ["--sandbox", "workspace-write"]  # the default; --agent-arg=--sandbox … replaces it
        for item in overrides:
            argv += ["-c", item]
        if self.spec.model:
            argv += ["-m", self.spec.model]
        env = _environment(task, self.spec, self.ENV_PREFIXES)
        env["CODEX_HOME"] = str(task.home / ".codex")
        if ep.transport == "http":
            env[TOKEN_ENV] = ep.token or ""
        files = {task.home / ".codex" / "config.toml": ""}  # the directory must exist; settings come as -c
        return Invocation(argv + self.spec.extra_args + [task.prompt], env, files)

    @staticmethod
    def usage(transcript: Path) -> TokenUsage | None:
        turns = [e.get("usage") or {} for e in _json_lines(transcript) if e.get("type") == "turn.completed"]
        if not turns:
            return None

        def total(name: str) -> int | None:
            values = [_int(u.get(name)) for u in turns]
            return sum(v for v in values if v is not None) if any(v is not None for v in values) else None

        reported, cached = total("input_tokens"), total("cached_input_tokens")
        return TokenUsage(
            input_tokens=None if reported is None else reported - (cached or 0),
            output_tokens=total("output_tokens"),
            cache_read_tokens=cached,
            cache_write_tokens=total("cache_write_input_tokens"),
            turns=len(turns),
            source="codex --json turn.completed events (summed)",
        )

    @staticmethod
    def describe(line: str) -> str | None:
        event = _json_event(line)
        if event is None:
            return None
        item = event.get("item") or {}
        if event.get("type") == "item.started" and item.get("type") == "mcp_tool_call":
            return f"tool {item.get('tool', '')}"
        if event.get("type") == "item.started" and item.get("type") == "command_execution":
            return "shell command"
        if event.get("type") == "turn.completed":
            return "turn done"
        return None


class CommandDriver:
    """Any program, started in the workspace with the task in environment variables:

    ATREX_OP, ATREX_WORKSPACE, ATREX_PROMPT_FILE, ATREX_CONDITION, ATREX_DSL, ATREX_BUDGET_S,
    ATREX_ALLOWED_TOOLS (comma-separated), ATREX_MODEL (when given), ATREX_MCP_CONFIG (a JSON
    file in the `mcpServers` format), ATREX_MCP_TRANSPORT, and either ATREX_MCP_COMMAND (JSON
    argv) + ATREX_MCP_ENV (JSON object) for stdio, or ATREX_MCP_URL + ATREX_MCP_TOKEN for http.
    """

    name = "command"
    ENV_PREFIXES = ("ATREX_AGENT_",)

    def __init__(self, spec: AgentSpec):
        if not spec.command:
            raise AtrexError(
                "input", "empty_agent_command", "The agent command is empty.", 'e.g. --agent "python3 my_agent.py"'
            )
        self.spec = spec

    def executable(self) -> Path | None:
        return which(self.spec.command[0])

    def invocation(self, task: AgentTask, executable: Path) -> Invocation:
        config = task.home / MCP_CONFIG_FILE
        env = _environment(task, self.spec, self.ENV_PREFIXES)
        env.update(task.endpoint.agent_env())
        env.update(
            {
                "ATREX_PROMPT_FILE": str(task.workspace / PROMPT_FILE),
                "ATREX_MCP_CONFIG": str(config),
                "ATREX_CONDITION": task.condition,
                "ATREX_DSL": task.dsl,
                "ATREX_BUDGET_S": f"{task.budget_s:g}",
                "ATREX_ALLOWED_TOOLS": ",".join(task.tools),
            }
        )
        if self.spec.model:
            env["ATREX_MODEL"] = self.spec.model
        return Invocation(
            [str(executable), *self.spec.command[1:], *self.spec.extra_args],
            env,
            {config: task.endpoint.mcp_config_json()},
        )

    @staticmethod
    def usage(transcript: Path) -> TokenUsage | None:
        return None  # a plain command reports no model use

    @staticmethod
    def describe(line: str) -> str | None:
        return _short(line) if line.strip() else None


Driver = ClaudeDriver | CodexDriver | CommandDriver
DRIVERS: dict[str, Callable[[AgentSpec], Driver]] = {
    "claude": ClaudeDriver,
    "codex": CodexDriver,
    "command": CommandDriver,
}


def driver_for(spec: AgentSpec) -> Driver:
    return DRIVERS[spec.kind](spec)
