"""Where the embedded data (problems, wiki, tools) lives, for a wheel and for a checkout."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_EMBEDDED = _PACKAGE / "_embedded"
REPO_ROOT = _PACKAGE.parent


def _data_dir(name: str) -> Path:
    """A wheel carries the data under atrex_mcp/_embedded; a checkout keeps it at the top level."""
    embedded = _EMBEDDED / name
    return embedded if embedded.is_dir() else REPO_ROOT / name


def problems_dir() -> Path:
    """The default problem set; ATREX_PROBLEMS overrides it."""
    return Path(os.environ.get("ATREX_PROBLEMS") or _data_dir("problems")).resolve()


def wiki_dir() -> Path:
    return _data_dir("gpu_wiki").resolve()


def examples_dir() -> Path:
    """Example candidate kernels and the scripted agent (the demo validates one of them)."""
    return _data_dir("examples").resolve()


def tools_dir() -> Path:
    return _data_dir("tools").resolve()


def sandbox_dir() -> Path:
    """The sandbox package (the worker entry point), importable as `sandbox`."""
    import sandbox

    return Path(sandbox.__file__).resolve().parent


def default_state_dir() -> Path:
    return Path(os.environ.get("ATREX_STATE_DIR") or Path.home() / ".local" / "state" / "atrex-mcp")
