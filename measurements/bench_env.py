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


def kernel_report_head(question: str, cuda: bool) -> dict:
    """The head of a result JSON of a script that launches Triton kernels itself: the question,
    the date, the GPU (or that it was a dry run in the interpreter), torch's and Triton's versions."""
    import time

    import torch
    import triton

    return {
        "question": question,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name() if cuda else "none (Triton interpreter on CPU: a dry run)",
        "torch": torch.__version__,
        "triton": triton.__version__,
    }


def write_report(path, report: dict) -> None:
    """Write a result JSON (parents created) and say where."""
    import json
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path}")
