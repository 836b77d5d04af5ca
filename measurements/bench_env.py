"""Process set-up shared by the bench scripts that launch Triton kernels themselves."""

from __future__ import annotations

import os


def interpret_without_gpu() -> bool:
    """Without a GPU, run Triton kernels in Triton's interpreter (a CPU dry run); must be called
    before triton is imported. Returns whether a GPU is present."""
    import torch

    if torch.cuda.is_available():
        return True
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return False


def write_report(path, report: dict) -> None:
    """Write a result JSON (parents created) and say where."""
    import json
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path}")
