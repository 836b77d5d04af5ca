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
