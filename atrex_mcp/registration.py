"""How an MCP client starts this install's server, the blocks that register it with Claude Code
and Codex, and whether a client's saved configuration points at this install.

A client starts the server from its own working directory and PATH, so a registration names the
executable by its absolute path: `atrex-mcp` alone connects only while this venv is on PATH."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SERVER_NAME = "atrex"
# Codex gives a server 10 s to start by default and drops an optional one that misses it; the
# server answers initialize in under a second, the margin covers a cold disk cache.
CODEX_STARTUP_TIMEOUT_S = 60
# validate on every shape of an operator, or a profile, can take minutes on a GPU.
TOOL_TIMEOUT_S = 900

Verdict = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Launch:
    """The command line that starts this install's server."""

    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


def _installed_script() -> Path | None:
    """The `atrex-mcp` script of this install: the one running now, or the one beside this interpreter."""
    running = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if running is not None and running.name == "atrex-mcp" and running.is_file():
        return Path(os.path.abspath(running))
    beside = Path(sys.executable).parent / "atrex-mcp"
    return Path(os.path.abspath(beside)) if beside.is_file() else None


def _package_root() -> Path:
    import atrex_mcp

    return Path(atrex_mcp.__file__).resolve().parent.parent


def this_install(benchmark_mode: bool = False) -> Launch:
    """How to start this install's `serve`: its script by absolute path, or, for a checkout found
    through PYTHONPATH (whose script would import another copy), this interpreter with
    `-m atrex_mcp.cli` and that PYTHONPATH."""
    serve = ["serve", *(["--benchmark-mode"] if benchmark_mode else [])]
    root = str(_package_root())
    through_pythonpath = root in [os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    script = _installed_script()
    if script is not None and not through_pythonpath:
        return Launch(str(script), serve)
    env = {"PYTHONPATH": root} if through_pythonpath else {}
    return Launch(os.path.abspath(sys.executable), ["-m", "atrex_mcp.cli", *serve], env)


def claude_block(launch: Launch, name: str = SERVER_NAME) -> str:
    """A shell command that registers the server with Claude Code (comments aside, ready to run)."""
    env = "".join(f" -e {k}={_sh(v)}" for k, v in launch.env.items())
    entry = {"type": "stdio", "command": launch.command, "args": launch.args, "env": launch.env}
    return "\n".join(
        [
            "# Claude Code, this project (add --scope user for every project); `claude mcp list` then connects to it:",
            f"claude mcp add{env} {name} -- {_sh(launch.command)} {' '.join(_sh(a) for a in launch.args)}",
            "# or, as a project's .mcp.json:",
            "# " + json.dumps({"mcpServers": {name: entry}}),
        ]
    )


def codex_block(launch: Launch, name: str = SERVER_NAME) -> str:
    """The ~/.codex/config.toml table for the server."""
    lines = [
        "# ~/.codex/config.toml",
        f"[mcp_servers.{name}]",
        f"command = {json.dumps(launch.command)}",
        f"args = [{', '.join(json.dumps(a) for a in launch.args)}]",
        f"startup_timeout_sec = {CODEX_STARTUP_TIMEOUT_S}",
        f"tool_timeout_sec = {TOOL_TIMEOUT_S}",
        "required = true                           # fail the session rather than silently run without the server",
        'default_tools_approval_mode = "approve"   # validate/profile_kernel/package are not read-only',
    ]
    if launch.env:
        lines += ["", f"[mcp_servers.{name}.env]", *(f"{k} = {json.dumps(v)}" for k, v in launch.env.items())]
    return "\n".join(lines)


def _sh(text: str) -> str:
    import shlex

    return shlex.quote(text)


# ------------------------------------------------------------------ saved client configurations
@dataclass
class ClientEntry:
    """One server entry in a client's configuration that starts atrex-mcp, and what it is worth."""

    client: Literal["claude", "codex"]
    where: str  # the file, and the scope inside it
    name: str
    command: str
    args: list[str]
    settings: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict = "ok"
    problems: list[str] = field(default_factory=list)


def _ours(name: str, command: str, args: list[str]) -> bool:
    text = " ".join([command, *args])
    return name == SERVER_NAME or "atrex-mcp" in text or "atrex_mcp" in text


def _same_file(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b) or os.path.realpath(a) == os.path.realpath(b)


def judge(entry: ClientEntry, launch: Launch) -> ClientEntry:
    """Does the entry start this install's server from any working directory and PATH?"""
    if not entry.command:
        entry.problems.append("no command (an HTTP entry?): not checked")
        entry.verdict = "warn"
        return entry
    found = entry.command if os.path.isabs(entry.command) else shutil.which(entry.command)
    if not os.path.isabs(entry.command):
        entry.problems.append(
            f"relative command {entry.command!r}: found only while its folder is on the client's PATH"
        )
    if found is None or not os.path.exists(found):
        entry.problems.append(f"{entry.command!r} does not exist here")
        entry.verdict = "fail"
        return entry
    script = launch.args[:1] == ["serve"]
    here = _same_file(found, launch.command) and (script or entry.args[:2] == launch.args[:2])
    if not here:
        entry.problems.append(f"starts {found}, not this install ({launch.command})")
    if "serve" not in entry.args:
        entry.problems.append("its arguments lack `serve`")
        entry.verdict = "fail"
        return entry
    if entry.client == "codex":
        if not entry.settings.get("required"):
            entry.problems.append("no `required = true`: Codex may drop the server silently when it starts slowly")
        if int(entry.settings.get("startup_timeout_sec") or 10) < 20:
            entry.problems.append(f"startup_timeout_sec below 20 s (default 10): set {CODEX_STARTUP_TIMEOUT_S}")
        if int(entry.settings.get("tool_timeout_sec") or 60) < 300:
            entry.problems.append(
                f"tool_timeout_sec below 300 s (default 60): validate on every shape takes longer; set {TOOL_TIMEOUT_S}"
            )
    entry.verdict = "ok" if not entry.problems else "warn"
    return entry


def _servers(table: Any) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in table.items() if isinstance(v, dict)} if isinstance(table, dict) else {}


def _entries(client: Literal["claude", "codex"], where: str, servers: dict[str, dict[str, Any]]) -> list[ClientEntry]:
    found = []
    for name, spec in servers.items():
        command, args = str(spec.get("command") or ""), [str(a) for a in spec.get("args") or []]
        if _ours(name, command, args):
            settings = {k: v for k, v in spec.items() if k not in ("command", "args", "env")}
            found.append(ClientEntry(client, where, name, command, args, settings))
    return found


def _load(path: Path, parse) -> tuple[Any, str | None]:
    try:
        return parse(path.read_bytes()), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path}: cannot be read ({exc})"


def claude_entries(home: Path, project: Path) -> tuple[list[ClientEntry], list[str]]:
    """Claude Code's entries for atrex-mcp: ~/.claude.json (user scope, and local scope of
    `project`) and `project`/.mcp.json; and the files that could not be read."""
    errors: list[str] = []
    entries: list[ClientEntry] = []
    user_file = home / ".claude.json"
    data, error = _load(user_file, json.loads)
    errors += [error] if error else []
    if isinstance(data, dict):
        entries += _entries("claude", f"{user_file} (user scope)", _servers(data.get("mcpServers")))
        local = (data.get("projects") or {}).get(str(project.resolve())) or {}
        entries += _entries("claude", f"{user_file} (local scope of {project})", _servers(local.get("mcpServers")))
    project_file = project / ".mcp.json"
    data, error = _load(project_file, json.loads)
    errors += [error] if error else []
    if isinstance(data, dict):
        entries += _entries("claude", f"{project_file} (project scope)", _servers(data.get("mcpServers")))
    return entries, errors


def codex_config_file(home: Path) -> Path:
    return Path(os.environ.get("CODEX_HOME") or home / ".codex") / "config.toml"


def codex_entries(home: Path) -> tuple[list[ClientEntry], list[str]]:
    """Codex's entries for atrex-mcp in its config.toml ($CODEX_HOME or ~/.codex)."""
    path = codex_config_file(home)
    data, error = _load(path, lambda raw: tomllib.loads(raw.decode()))
    if not isinstance(data, dict):
        return [], [error] if error else []
    return _entries("codex", str(path), _servers(data.get("mcp_servers"))), []
