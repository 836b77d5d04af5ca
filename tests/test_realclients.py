"""Real MCP clients against `atrex-mcp serve` over stdio: the MCP Inspector CLI (tools/list with
its schema-portability check, tools/call in both protocol eras, a real validate) and Claude
Code's `claude mcp list`, which starts and health-checks the server with no API key, both
for a server added with `claude mcp add` and for this repository's `.mcp.json`.

The npm packages are installed once (pinned) into the user's cache folder, outside the checkout
(~/.cache/atrex-mcp/npm or $ATREX_NPM_CACHE; tests/npm_cache.py), with `npm install --no-save`; without
Node/npm or a reachable registry the tests skip and say why.
Everything runs on loopback, each command bounded in time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from atrex_mcp.paths import REPO_ROOT
from tests.npm_cache import npm_prefix

pytestmark = pytest.mark.npm

PACKAGES = {"@modelcontextprotocol/inspector": "2.12.0", "@anthropic-ai/claude-code": "2.1.328"}
CACHE = npm_prefix("npm", "ATREX_NPM_CACHE")
TOOLS = {
    "list_problems",
    "get_problem",
    "validate",
    "profile_kernel",
    "roofline_lookup",
    "wiki_search",
    "wiki_read",
    "package",
}
QUIET_CLAUDE = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


def _installed() -> bool:
    for name, version in PACKAGES.items():
        manifest = CACHE / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text()).get("version") != version:
            return False
    return True


@pytest.fixture(scope="module")
def npm_bin() -> Path:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("Node.js/npm is not installed; the real-client tests need it")
    if not _installed():
        specs = [f"{name}@{version}" for name, version in PACKAGES.items()]
        try:
            probe = subprocess.run([npm, "view", specs[0], "version"], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.skip("the npm registry did not answer within 60 s")
        if probe.returncode != 0:
            pytest.skip(f"the npm registry is unreachable: {probe.stderr.strip()[-300:]}")
        CACHE.mkdir(mode=0o755, parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(CACHE), *specs],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0 or not _installed():
            pytest.skip(f"npm install of {', '.join(specs)} failed: {done.stderr.strip()[-300:]}")
    return CACHE / "node_modules" / ".bin"


@pytest.fixture
def shim(tmp_path) -> Path:
    """An `atrex-mcp` command on PATH that runs this checkout (as `pip install -e .` would)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "atrex-mcp"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={REPO_ROOT} exec {sys.executable} -m atrex_mcp.cli "$@"\n')
    script.chmod(0o755)
    return script


def _run(cmd: list[str], tmp_path: Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    base = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path / "home"), **QUIET_CLAUDE, **env}
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run(cmd, cwd=cwd or tmp_path, env=base, capture_output=True, text=True, timeout=240)


def test_inspector_lists_the_tools_with_portable_schemas(npm_bin, shim, tmp_path):
    listed = _run(
        [
            str(npm_bin / "mcp-inspector"),
            "--cli",
            "--format",
            "json",
            "-q",
            str(shim),
            "serve",
            "--method",
            "tools/list",
        ],
        tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)["result"]["tools"]}
    assert set(tools) >= TOOLS and all(tools[n]["outputSchema"] for n in TOOLS)
    strict = _run(
        [str(npm_bin / "mcp-inspector"), "--cli", "--strict", str(shim), "serve", "--method", "tools/list"], tmp_path
    )
    assert strict.returncode == 0, strict.stderr  # exit 6 would mean an error-severity portability problem


def _inspector_call(
    npm_bin: Path, shim: Path, tmp_path: Path, era: str, tool: str, args: dict
) -> subprocess.CompletedProcess:
    return _run(
        [
            str(npm_bin / "mcp-inspector"),
            "--cli",
            "--protocol-era",
            era,
            "--format",
            "json",
            "-q",
            "--cwd",
            str(tmp_path),
            str(shim),
            "serve",
            "--method",
            "tools/call",
            "--tool-name",
            tool,
            "--tool-args-json",
            json.dumps(args),
        ],
        tmp_path,
        TRITON_INTERPRET="1",
    )


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_calls_a_tool_in_both_eras(npm_bin, shim, tmp_path, era):
    listed = _inspector_call(npm_bin, shim, tmp_path, era, "list_problems", {})
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["result"]["structuredContent"]["problems"]) >= 30


def test_inspector_validates_the_example_and_reports_tool_errors(npm_bin, shim, tmp_path):
    shutil.copy(REPO_ROOT / "examples" / "rms_norm_triton.py", tmp_path / "kernel.py")
    args = {"op": "rms_norm", "path": "kernel.py", "shapes": ["smoke"], "seeds": 1}
    validated = _inspector_call(npm_bin, shim, tmp_path, "legacy", "validate", args)
    assert validated.returncode == 0, validated.stderr
    result = json.loads(validated.stdout)["result"]["structuredContent"]
    assert result["compiled"] and result["passed"] == 1
    refused = _inspector_call(npm_bin, shim, tmp_path, "legacy", "get_problem", {"op": "nope"})
    assert refused.returncode == 5 and "unknown_problem" in refused.stdout + refused.stderr  # 5: an isError result


def test_claude_code_connects_to_a_server_added_with_claude_mcp_add(npm_bin, shim, tmp_path):
    claude = str(npm_bin / "claude")
    added = _run([claude, "mcp", "add", "atrex", "--", str(shim), "serve"], tmp_path)
    assert added.returncode == 0, added.stderr
    listed = _run([claude, "mcp", "list"], tmp_path)
    assert "atrex: " in listed.stdout and "✔ Connected" in listed.stdout, listed.stdout + listed.stderr


def test_claude_code_connects_through_the_project_mcp_json(npm_bin, shim, tmp_path):
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    shutil.copy(REPO_ROOT / ".mcp.json", project / ".mcp.json")
    (project / ".claude" / "settings.local.json").write_text(json.dumps({"enabledMcpjsonServers": ["atrex"]}))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".claude.json").write_text(
        json.dumps({"projects": {str(project): {"hasTrustDialogAccepted": True}}})
    )
    listed = _run([str(npm_bin / "claude"), "mcp", "list"], tmp_path, cwd=project)
    assert "atrex: atrex-mcp serve" in listed.stdout and "✔ Connected" in listed.stdout, listed.stdout + listed.stderr
