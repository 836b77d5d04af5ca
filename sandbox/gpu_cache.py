"""Cached GPU memory handed back to the driver, by the two processes that share a GPU.

The judge and the sandbox worker take turns on one GPU, so each hands its caching allocator's
free blocks back before the other runs: the other would run out of memory on blocks kept for
nothing. A hand-back synchronises the device, and the next request pays fresh cudaMalloc calls
for what was handed back, request after request. A process therefore keeps up to `KEEP_BYTES`
of free cached blocks and hands them back only past that: on a GPU of tens of GiB no shape
misses 1 GiB, and the shapes that fill the GPU free far more than that, which goes back.
A CUDA-graph capture that fails can stop every later hand-back of the process: every capture
goes through `graph_capture`, which cleans a failed one up (`end_failed_capture`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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


# torch's own bindings of the caching allocator's routing into a CUDA graph's pool, newest name first
END_ROUTING_BINDINGS = ("_cuda_endAllocateToPool", "_cuda_endAllocateCurrentStreamToPool")


def end_failed_capture(pool: tuple[int, int]) -> bool:
    """After a CUDA-graph capture into `pool` (a torch.cuda.graph_pool_handle()) raised, on the
    current device: end the caching allocator's routing into the graph's pool where torch left it
    on, and release the pool. Whether it did.

    A capture that a host synchronisation invalidates (`.item()`, `.tolist()`, `nonzero` in the
    forward) makes torch's CUDAGraph.capture_end raise before it ends that routing, in the
    torch releases that check cudaStreamEndCapture first, and its reset then never releases the
    pool. The allocator goes on believing a capture is underway for the rest of the process, and
    while it does, empty_cache hands back none of its cached blocks (an allocation that runs
    short frees only blocks of SPLIT_LIMIT_MB and more): every later `release` is void, and the
    process's reserved memory grows, taking the GPU from the other process that shares it. Where
    torch ended the routing itself, the pool is left to it: releasing it here as well would drop
    a reference that torch's reset drops too, where it does."""
    names = [getattr(torch._C, name, None) for name in END_ROUTING_BINDINGS]
    end = next((fn for fn in names if callable(fn)), None)
    release_pool = getattr(torch._C, "_cuda_releasePool", None)
    if end is None or release_pool is None:
        return False
    device = torch.cuda.current_device()
    try:
        end(device, pool)
    except (RuntimeError, TypeError):  # "not currently recording to mempool_id": torch ended it before raising
        return False
    try:
        release_pool(device, pool)  # the one reference the capture's start took, which torch's reset will not drop
    except RuntimeError:  # the routing is ended, which is what keeps the releases working
        pass
    return True


@contextmanager
def graph_capture(graph: Any, **kwargs: Any) -> Iterator[None]:
    """`torch.cuda.graph(graph, **kwargs)` into a pool of its own; where the capture raises, the
    caching allocator's routing into that pool is ended and the pool released (end_failed_capture)
    before the error goes on to the caller."""
    pool = torch.cuda.graph_pool_handle()
    try:
        with torch.cuda.graph(graph, pool=pool, **kwargs):
            yield
    except BaseException:
        end_failed_capture(pool)
        raise
