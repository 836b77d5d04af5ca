"""Shared helpers of the server tests: servers in both modes, clients in both protocol eras, and
the hidden figures of a problem to scan results for."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client

from atrex_mcp.paths import problems_dir
from atrex_mcp.server.app import ServerConfig, build_server

ERAS = ("auto", "legacy")  # 2026-07-28 (Claude Code) and the 2025 handshake (Codex speaks 2025-06-18)


def config(tmp_path: Path, mode: str = "optimize", **overrides: Any) -> ServerConfig:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    base = dict(
        mode=mode, problems=[problems_dir()], state_dir=tmp_path / "state", workspaces=[workspace], devices=["cpu"]
    )
    return ServerConfig(**{**base, **overrides})


@asynccontextmanager
async def connect(cfg: ServerConfig, era: str = "auto") -> AsyncIterator[Client]:
    async with Client(build_server(cfg), mode=era) as client:
        yield client


def result_text(result: Any) -> str:
    """Everything a client receives from one call: content texts and structured content."""
    texts = [getattr(c, "text", "") for c in result.content]
    return "\n".join(texts) + "\n" + json.dumps(result.structured_content or {})


def hidden_figures(op: str, root: Path | None = None) -> tuple[set[float], set[str]]:
    """The decimal figures (t_sol, intensity, production timings, weights) and the long strings
    (provenance, notes) of one operator's hidden files."""
    root = root or problems_dir()
    numbers: set[float] = set()
    strings: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, float) and math.isfinite(node) and not node.is_integer():
            numbers.add(node)
        elif isinstance(node, str) and len(node) >= 16:
            strings.add(node)

    for name in ("metadata.json", "roofline.json"):
        walk(json.loads((root / op / name).read_text()))
    weights = json.loads((root / "weights.json").read_text())
    walk({k: v.get(op) if isinstance(v, dict) else v for k, v in weights.items()})
    return numbers, strings


def leaks(text: str, numbers: set[float], strings: set[str]) -> list[str]:
    """Hidden figures found in `text` as whole numbers: each figure as stored (its shortest repr)
    or rounded to 4-16 significant digits; and each hidden string."""
    found = [s for s in strings if s in text]
    tokens = set(re.findall(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?(?![\w]|\.\d)", text))
    for value in numbers:
        forms = {repr(value)} | {f"{value:.{d}g}" for d in range(4, 17)}
        found += sorted(forms & tokens)
    return found


def with_hanging_forward(source: str, seconds: int) -> str:
    """A candidate whose forward sleeps `seconds` before its work: only cancellation ends its
    evaluation early."""
    return re.sub(
        r"(\n    def forward\(self.*\n)", rf"\1        time.sleep({seconds})\n", "import time\n" + source, count=1
    )


def live_children() -> set[int]:
    """Live (non-zombie) processes whose parent is this process: the sandbox workers it started."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    """Until a server process listens on 127.0.0.1:port; fails with its stderr if it exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read() if proc.stderr else ''}") from None
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")
