"""The real agent CLIs for the tests: Claude Code and Codex installed with npm into the user's
cache folder, outside the checkout (ATREX_AGENT_CLI_CACHE, default ~/.cache/atrex-mcp/agent-clis;
see tests/npm_cache.py), at the versions these tests were written against. When npm is missing or the registry cannot be
reached, `installed()` says why, so the test is skipped with that reason."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.npm_cache import npm_prefix

PACKAGES = {"claude": ("@anthropic-ai/claude-code", "2.1.328"), "codex": ("@openai/codex", "0.169.0")}
INSTALL_TIMEOUT_S = 600


def cache_dir() -> Path:
    return npm_prefix("agent-clis", "ATREX_AGENT_CLI_CACHE")


def _installed_version(cache: Path, package: str) -> str | None:
    try:
        return json.loads((cache / "node_modules" / package / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        return None


def installed(name: str) -> tuple[Path | None, str]:
    """(executable, "") or (None, why it is not available)."""
    package, version = PACKAGES[name]
    cache = cache_dir()
    binary = cache / "node_modules" / ".bin" / name
    if binary.exists() and _installed_version(cache, package) == version:
        return binary, ""
    npm = shutil.which("npm")
    if npm is None:
        return None, "npm is not installed"
    cache.mkdir(mode=0o755, parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(cache), f"{package}@{version}"],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None, f"npm install {package}@{version} took longer than {INSTALL_TIMEOUT_S} s (registry unreachable?)"
    if done.returncode != 0 or not binary.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return None, f"npm install {package}@{version} failed: {' '.join(tail)}"
    return binary, ""
