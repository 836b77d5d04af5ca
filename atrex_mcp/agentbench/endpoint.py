"""The benchmark-mode MCP server as one operator's agent reaches it.

* stdio: the agent's CLI starts `atrex-mcp serve --benchmark-mode …` itself (same uid);
* http: the runner starts the server as its own user on 127.0.0.1 with a random bearer token,
  and the agent (another uid) connects to it. Stopped when the operator is done.

Either way the server serves only this operator's workspace and keeps its state (wiki index,
run memory) in a directory of the trusted side.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import atrex_mcp
from atrex_mcp.agentbench.models import RunConfig, ServerTransport
from atrex_mcp.agentbench.prompts import SERVER_NAME
from atrex_mcp.errors import AtrexError

TOKEN_ENV = "ATREX_MCP_TOKEN"
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
_PORT_ATTEMPTS = 3


@dataclass
class McpEndpoint:
    """How an agent reaches the server: a command to start (stdio) or a URL and token (http)."""

    transport: ServerTransport
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    token: str | None = field(default=None, repr=False)

    def mcp_servers_entry(self) -> dict:
        """The server's entry in the common `mcpServers` JSON format (Claude Code, many clients)."""
        if self.transport == "stdio":
            return {"type": "stdio", "command": self.command[0], "args": self.command[1:], "env": self.env}
        return {"type": "http", "url": self.url, "headers": {"Authorization": f"Bearer {self.token}"}}

    def mcp_config_json(self) -> str:
        return json.dumps({"mcpServers": {SERVER_NAME: self.mcp_servers_entry()}}, indent=1)

    def agent_env(self) -> dict[str, str]:
        """The variables that tell a generic agent how to reach the server."""
        if self.transport == "stdio":
            return {
                "ATREX_MCP_TRANSPORT": "stdio",
                "ATREX_MCP_COMMAND": json.dumps(self.command),
                "ATREX_MCP_ENV": json.dumps(self.env),
            }
        return {"ATREX_MCP_TRANSPORT": "http", "ATREX_MCP_URL": self.url or "", TOKEN_ENV: self.token or ""}


def _import_root() -> str:
    """The directory atrex_mcp (and the sandbox package) import from, for the server's PYTHONPATH."""
    return str(Path(atrex_mcp.__file__).resolve().parent.parent)


def server_command(config: RunConfig, workspace: Path, state_dir: Path, *, log_level: str) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "atrex_mcp.cli",
        "serve",
        "--benchmark-mode",
        "--knowledge",
        config.knowledge,
        "--hardware",
        config.hardware,
        "--workspace",
        str(workspace),
        "--state-dir",
        str(state_dir),
        "--log-level",
        log_level,
    ]
    for root in config.problems:
        argv += ["--problems", root]
    return argv


def stdio_endpoint(config: RunConfig, workspace: Path, state_dir: Path) -> McpEndpoint:
    # WARNING: the agent's CLI forwards the server's stderr into its own logs and screen
    return McpEndpoint(
        "stdio",
        command=server_command(config, workspace, state_dir, log_level="WARNING"),
        env={"PYTHONPATH": _import_root()},
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    """The server answers HTTP on `port` (401 without a token is an answer)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/mcp")
        conn.getresponse().read()
        conn.close()
        return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def http_server(config: RunConfig, workspace: Path, state_dir: Path, log_path: Path) -> Iterator[McpEndpoint]:
    """Start the server over loopback HTTP as this process's user; stop it on exit."""
    token = secrets.token_urlsafe(32)
    env = {**os.environ, TOKEN_ENV: token, "PYTHONPATH": _import_root()}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for _attempt in range(_PORT_ATTEMPTS):
        port = _free_port()
        argv = server_command(config, workspace, state_dir, log_level="INFO") + [
            "--transport",
            "http",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--token-env",
            TOKEN_ENV,
        ]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline and not _answers(port):
            time.sleep(0.25)
        if proc.poll() is None and _answers(port):
            try:
                yield McpEndpoint("http", url=f"http://127.0.0.1:{port}/mcp", token=token)
            finally:
                _stop(proc)
            return
        _stop(proc)
        if "address already in use" not in log_path.read_text(errors="replace").lower():
            break
    tail = log_path.read_text(errors="replace")[-1500:]
    raise AtrexError(
        "internal",
        "server_start_failed",
        f"The MCP server did not start on 127.0.0.1: {tail.strip() or 'no output'}",
        f"See {log_path}.",
    )
