"""Folders a user adds to the wiki (e.g. a checkout of an upstream project), kept in the
state directory so that every later server or CLI run indexes them too."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.wiki.models import WikiRoot

ROOTS_FILE = "wiki-roots.json"
RESERVED_NAMES = frozenset({"docs", "kernels"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def load_roots(state_dir: Path) -> list[WikiRoot]:
    path = state_dir / ROOTS_FILE
    if not path.is_file():
        return []
    try:
        return [WikiRoot(**r) for r in json.loads(path.read_text())["roots"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AtrexError(
            "input",
            "bad_wiki_roots",
            f"{path} is unreadable: {exc}",
            "Fix or delete the file, then add the roots again.",
        ) from exc


def _save_roots(state_dir: Path, roots: list[WikiRoot]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{ROOTS_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"roots": [r.model_dump() for r in roots]}, indent=2) + "\n")
    tmp.replace(state_dir / ROOTS_FILE)


def add_root(state_dir: Path, path: Path, name: str | None = None) -> WikiRoot:
    """Register a folder; its name (default: the folder's name) prefixes its document ids."""
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise AtrexError("input", "bad_wiki_root", f"{folder} is not a directory.")
    name = name or folder.name
    if not _NAME.match(name) or name in RESERVED_NAMES:
        raise AtrexError(
            "input",
            "bad_wiki_root_name",
            f"Root name {name!r} is not usable.",
            "Use letters, digits, '.', '_' or '-', not 'docs' or 'kernels'; pass another with --name.",
        )
    roots = load_roots(state_dir)
    for r in roots:
        if r.name == name and Path(r.path) != folder:
            raise AtrexError(
                "input",
                "wiki_root_name_taken",
                f"Root name {name!r} already names {r.path}.",
                "Pass another name with --name.",
            )
    root = WikiRoot(name=name, path=str(folder))
    _save_roots(state_dir, [r for r in roots if r.name != name] + [root])
    return root
