"""The lint, format and type-check gates CI runs through the test command: ruff and mypy over the checkout,
configured in pyproject.toml ([tool.ruff], [tool.mypy])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHOWN = 40  # lines of a failing tool's report in the assertion message


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _first_lines(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    more = f"\n... {len(lines) - SHOWN} more lines" if len(lines) > SHOWN else ""
    return "\n".join(lines[:SHOWN]) + more


def test_ruff_check_passes():
    proc = _run("ruff", "check", "--output-format", "concise", ".", timeout=120)
    assert proc.returncode == 0, f"ruff check . found problems (--fix fixes the safe ones):\n{_first_lines(proc)}"


def test_ruff_format_would_change_nothing():
    proc = _run("ruff", "format", "--check", ".", timeout=120)
    assert proc.returncode == 0, f"ruff format --check . would reformat files (ruff format .):\n{_first_lines(proc)}"


@pytest.mark.slow
def test_mypy_passes():
    proc = _run("mypy", timeout=600)
    assert proc.returncode == 0, f"mypy (files and settings in pyproject.toml) found type errors:\n{_first_lines(proc)}"
