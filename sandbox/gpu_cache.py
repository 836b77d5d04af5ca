"""Cached GPU memory handed back to the driver, by the two processes that share a GPU.

The judge and the sandbox worker take turns on one GPU, so each hands its caching allocator's
free blocks back before the other runs: the other would run out of memory on blocks kept for
nothing. A hand-back synchronises the device, and the next request pays fresh cudaMalloc calls
for what was handed back, request after request. A process therefore keeps up to `KEEP_BYTES`
of free cached blocks and hands them back only past that: on a GPU of tens of GiB no shape
misses 1 GiB, and the shapes that fill the GPU free far more than that, which goes back.
"""

from __future__ import annotations

import warnings

import torch

KEEP_BYTES = 1 << 30
# Cached blocks at least this large are never split (the caching allocator's max_split_size_mb).
SPLIT_LIMIT_MB = 256


def limit_block_splitting() -> None:
    """Keep the caching allocator from carving small blocks out of large cached ones, in this
    process, from now on. A split leaves a large segment pinned by whatever small block lives in
    it: empty_cache cannot hand it back, the other process on the GPU runs short, and the judge
    moves each reference output through the host to free it (Trial.hold_reference). A block of
    SPLIT_LIMIT_MB or more now serves one allocation of about its size; smaller requests take
    smaller segments."""
    with warnings.catch_warnings():  # renamed in later torch releases; the setting is the same
        warnings.simplefilter("ignore", FutureWarning)
        torch.cuda.memory._set_allocator_settings(f"max_split_size_mb:{SPLIT_LIMIT_MB}")


def release(keep_bytes: int = KEEP_BYTES) -> bool:
    """Hand this process's free cached GPU blocks back to the driver when they hold more than
    `keep_bytes`; whether it did."""
    if not torch.cuda.is_initialized():
        return False
    if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() <= keep_bytes:
        return False
    torch.cuda.empty_cache()
    return True
