"""The npm CLIs the real-client tests drive are cached outside the checkout (tests/npm_cache.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import npm_cache
from tests.fake_models import agent_clis


@pytest.fixture
def home(monkeypatch) -> Iterator[Path]:
    """A home folder other users can enter (pytest's own tmp folders are private to root)."""
    home = Path(tempfile.mkdtemp(prefix="atrex-home-"))
    home.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CACHE_HOME", "ATREX_NPM_CACHE", "ATREX_AGENT_CLI_CACHE"):
        monkeypatch.delenv(var, raising=False)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_default_is_the_users_cache_folder(home):
    assert npm_cache.npm_prefix("npm", "ATREX_NPM_CACHE") == (home / ".cache" / "atrex-mcp" / "npm").resolve()
    assert agent_clis.cache_dir() == (home / ".cache" / "atrex-mcp" / "agent-clis").resolve()


def test_xdg_cache_home_and_the_override_are_honoured(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert npm_cache.npm_prefix("npm", "ATREX_NPM_CACHE") == (tmp_path / "xdg" / "atrex-mcp" / "npm").resolve()
    monkeypatch.setenv("ATREX_AGENT_CLI_CACHE", str(tmp_path / "elsewhere"))
    assert agent_clis.cache_dir() == (tmp_path / "elsewhere").resolve()


@pytest.mark.parametrize("inside", [".cache/agent-clis", ".", "tests/../.cache"])
def test_a_folder_inside_the_checkout_is_refused(home, monkeypatch, inside):
    monkeypatch.setenv("ATREX_AGENT_CLI_CACHE", str(npm_cache.CHECKOUT / inside))
    with pytest.raises(ValueError, match="inside the checkout"):
        agent_clis.cache_dir()


def test_a_symlink_into_the_checkout_is_refused(home, tmp_path, monkeypatch):
    (tmp_path / "link").symlink_to(npm_cache.CHECKOUT)
    monkeypatch.setenv("ATREX_NPM_CACHE", str(tmp_path / "link" / "npm"))
    with pytest.raises(ValueError, match="inside the checkout"):
        npm_cache.npm_prefix("npm", "ATREX_NPM_CACHE")


def test_root_with_a_closed_home_uses_the_system_cache(home, monkeypatch):
    home.chmod(0o700)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert npm_cache.user_cache_root() == Path("/var/cache/atrex-mcp")
    home.chmod(0o755)
    assert npm_cache.user_cache_root() == home / ".cache" / "atrex-mcp"
