"""The real launch path: `atrex-mcp serve` as a subprocess speaking stdio with nothing but
`serve` on its command line; and `atrex-mcp demo` end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mcp import Client, StdioServerParameters

from atrex_mcp.paths import REPO_ROOT

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _env(tmp_path) -> dict[str, str]:
    # A fresh HOME: the default state directory (wiki index) is built from nothing.
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}


@pytest.mark.slow
async def test_serve_over_stdio_with_no_options(tmp_path):
    """(Both protocol eras are covered in memory, over HTTP and by the Inspector; stdio once.)"""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "atrex_mcp.cli", "serve"], env=_env(tmp_path), cwd=str(tmp_path)
    )
    async with Client(params) as client:
        assert client.server_info.name == "atrex-mcp"
        assert "list_problems" in {t.name for t in (await client.list_tools()).tools}
        listed = (await client.call_tool("list_problems", {})).structured_content
        found = (await client.call_tool("wiki_search", {"query": "rms norm kernel"})).structured_content
    assert listed["mode"] == "optimize" and len(listed["problems"]) >= 30
    assert found["hits"]


@pytest.mark.slow
def test_demo_validates_the_example_kernel(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "atrex_mcp.cli", "demo"],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "list_problems: 30 problems" in done.stdout or "problems in optimize mode" in done.stdout
    assert "compiled=True, 1 passed, 0 failed" in done.stdout
    assert "evaluate rms_norm: done" in done.stderr  # progress notifications reached the client
