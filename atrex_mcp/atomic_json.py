"""A JSON file replaced atomically, so a reader never sees half of it: the state of an agent
benchmark run (atrex_mcp.agentbench.layout) and the shard files and record of a cluster
evaluation (atrex_mcp.cluster.dispatch) are written this way."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import BaseModel


def write_json_atomic(path: Path, model: BaseModel) -> None:
    """Write `model` as JSON so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(model.model_dump_json(indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
