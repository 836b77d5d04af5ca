"""Where the tests install the npm CLIs they drive (MCP Inspector, Claude Code, Codex): a cache
folder outside the checkout, shared by every checkout of the user, so a clone stays small and
the 760 MB are downloaded once.

`$<override>` when set; else `$XDG_CACHE_HOME/atrex-mcp/<name>` or `~/.cache/atrex-mcp/<name>`;
for root whose home other users cannot enter, `/var/cache/atrex-mcp/<name>`, so that an agent CLI
run as uid 65534 (the strong setup the bench tests exercise as root) can still be executed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
SYSTEM_CACHE = Path("/var/cache")


def _others_can_enter(path: Path) -> bool:
    try:
        return all(p.stat().st_mode & stat.S_IXOTH for p in [*reversed(path.parents), path] if p.exists())
    except OSError:
        return False


def user_cache_root() -> Path:
    """The user's cache folder (XDG base directories), or the system's for root with a closed home."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    if os.geteuid() == 0 and not xdg and not _others_can_enter(Path.home()):
        root = SYSTEM_CACHE
    return root / "atrex-mcp"


def npm_prefix(name: str, override: str) -> Path:
    """The npm --prefix for one set of pinned packages; refuses a folder inside the checkout."""
    path = Path(os.environ.get(override) or user_cache_root() / name).resolve()
    if path == CHECKOUT or CHECKOUT in path.parents:
        raise ValueError(
            f"{override}={path} lies inside the checkout {CHECKOUT}; npm packages are cached outside it "
            "(unset it to use the user cache folder)"
        )
    return path
