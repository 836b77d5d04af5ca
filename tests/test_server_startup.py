"""The server answers `initialize` quickly because nothing heavy loads before a tool needs it:
Codex drops an optional MCP server that has not started within about a second, and an MCP
client's health check starts one (measurements/serve_initialize_time.py measures the time itself).
The server's result models need no torch: MismatchDetail lives in evaluate.models for that."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from atrex_mcp.paths import REPO_ROOT

HEAVY = ("torch", "triton", "whoosh", "numpy", "matplotlib")

_STARTUP = """
import json, sys
from pathlib import Path
from atrex_mcp.cli import build_parser
from atrex_mcp.server.app import ServerConfig, build_server
build_parser()
build_server(ServerConfig(state_dir=Path(sys.argv[1]), workspaces=[Path(sys.argv[1])]))
print(json.dumps(sorted(m for m in sys.argv[2:] if m in sys.modules)))
"""


def test_starting_the_server_imports_no_heavy_library(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _STARTUP, str(tmp_path), *HEAVY],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == [], "imported while the server starts; defer it to the tool that needs it"
