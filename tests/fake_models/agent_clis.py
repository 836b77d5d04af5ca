"""The real agent CLIs for the tests: Claude Code and Codex installed with npm into a cache
folder that git ignores (ATREX_AGENT_CLI_CACHE, default <repo>/.cache/agent-clis), at the
versions these tests were written against. When npm is missing or the registry cannot be
reached, `installed()` says why, so the test is skipped with that reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"claude": ("@anthropic-ai/claude-code", "2.1.328"), "codex": ("@openai/codex", "0.169.0")}
INSTALL_TIMEOUT_S = 600


def cache_dir() -> Path:
    return Path(os.environ.get("ATREX_AGENT_CLI_CACHE") or ROOT / ".cache" / "agent-clis")


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
    cache.mkdir(parents=True, exist_ok=True)
    if cache.parent == ROOT / ".cache":
        (ROOT / ".cache" / ".gitignore").write_text("*\n")  # the whole cache stays out of git
    try:
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(cache), f"{package}@{version}"],
                              capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"npm install {package}@{version} took longer than {INSTALL_TIMEOUT_S} s (registry unreachable?)"
    if done.returncode != 0 or not binary.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return None, f"npm install {package}@{version} failed: {' '.join(tail)}"
    return binary, ""
