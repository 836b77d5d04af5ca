"""`problems init`: a working three-file problem (reference.py, input.py, shapes.json) to edit
into one's own, copied from the package's template with the operator's name filled in."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import VISIBLE_FILES

NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def write_template(name: str, parent: Path) -> Path:
    """Write parent/name/{reference.py, input.py, shapes.json}; refuse a bad name or an existing folder."""
    if not NAME.fullmatch(name):
        raise AtrexError(
            "input",
            "bad_problem_name",
            f"Problem name {name!r} is not a lower-case identifier.",
            "Use lower case letters, digits and _, starting with a letter, e.g. my_rms_norm.",
        )
    target = Path(parent) / name
    if target.exists():
        raise AtrexError("input", "problem_exists", f"{target} already exists.", "Choose another NAME or --dir.")
    template = resources.files("atrex_mcp") / "templates" / "problem"
    target.mkdir(parents=True)
    for file in VISIBLE_FILES:
        (target / file).write_text((template / file).read_text().replace("{name}", name))
    return target
