"""Cached GPU memory handed back to the driver, by the two processes that share a GPU.

The judge and the sandbox worker take turns on one GPU, so each hands its caching allocator's
free blocks back before the other runs: the other would run out of memory on blocks kept for
nothing. A hand-back synchronises the device, and the next request pays fresh cudaMalloc calls
for what was handed back, request after request. A process therefore keeps up to `KEEP_BYTES`
of free cached blocks and hands them back only past that: on a GPU of tens of GiB no shape
misses 1 GiB, and the shapes that fill the GPU free far more than that, which goes back.
"""

from __future__ import annotations

import torch

KEEP_BYTES = 1 << 30


def release(keep_bytes: int = KEEP_BYTES) -> bool:
    """Hand this process's free cached GPU blocks back to the driver when they hold more than
    `keep_bytes`; whether it did."""
    if not torch.cuda.is_initialized():
        return False
    if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() <= keep_bytes:
        return False
    torch.cuda.empty_cache()
    return True
