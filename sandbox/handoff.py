"""How a worker hands an output to the trusted side: raw tensor bytes in a shared memory arena.

The trusted side owns the arena (atrex_mcp.evaluate.transfer.OutputArena): an anonymous memory
file (memfd) it creates and seals against shrinking before any worker starts, and which every
worker inherits as an open descriptor. Before each request that returns an output, the trusted
side grows the arena to hold the reference output and says how large it is; the worker maps
that much and copies each tensor of its output, in C order, to an offset both sides derive from
the manifest (structure, dict keys, dtype and shape per tensor) that travels in the JSON reply.
An output too large for the arena is not copied: its manifest alone shows that it cannot match.

Why shared memory: through raw files, the hand-over cost 0.55 s per GB of output on the H200
(measurements/handoff_cost.py): two host copies at 3-4 GB/s, the worker's write and the trusted side's read. With
the arena registered with CUDA in both processes, the worker's copy and the trusted side's
snapshot are each one DMA over the host link.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import torch

MAX_OUTPUT_TENSORS = 64
ALIGN = 64  # every tensor of an output starts at a multiple of this many bytes in the arena


def output_items(value: Any) -> tuple[str, list[tuple[str | None, Any]]]:
    """(structure, [(dict key or None, tensor-like)]) of an output as returned."""
    if isinstance(value, dict):
        return "dict", list(value.items())
    if isinstance(value, (tuple, list)):
        return "tuple", [(None, v) for v in value]
    return "tensor", [(None, value)]


def output_tensors(value: Any) -> list[Any]:
    """The tensors of an output as returned, in order."""
    return [t for _, t in output_items(value)[1]]


def tensor_sizes(value: Any) -> list[int]:
    """Bytes of each tensor of an output, in order: what the arena must hold for it (see layout)."""
    return [t.numel() * t.element_size() for t in output_tensors(value) if isinstance(t, torch.Tensor)]


def flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes in C order as a 1-D uint8 tensor (a copy only when not contiguous)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def layout(sizes: list[int]) -> tuple[list[int], int]:
    """(offset of each tensor, bytes the output spans) for tensors of `sizes` bytes, each
    starting at a multiple of ALIGN. The span is the sum of the rounded sizes, so it does not
    depend on the tensors' order: an arena that holds one ordering holds every ordering."""
    offsets, end = [], 0
    for n in sizes:
        offsets.append(end)
        end += -(-n // ALIGN) * ALIGN
    return offsets, end


def host_register(view: torch.Tensor) -> bool:
    """Page-lock existing host memory for CUDA (a copy to or from it is then one DMA at link
    speed); False where there is no CUDA or it refuses, and copies stay correct, only slower."""
    if not torch.cuda.is_available():
        return False
    try:
        return int(torch.cuda.cudart().cudaHostRegister(view.data_ptr(), view.numel(), 0)) == 0
    except (RuntimeError, AttributeError):
        return False


class ArenaMapping:
    """One process's view of the arena's first bytes as a uint8 tensor, registered with CUDA
    when `cuda`; both ends hold one and remap it when the arena's size changes."""

    def __init__(self, fd: int, cuda: bool):
        self.fd, self.cuda = fd, cuda
        self.mapping: mmap.mmap | None = None
        self.view: torch.Tensor | None = None
        self.registered = False

    def resize(self, nbytes: int) -> torch.Tensor:
        """The arena's first `nbytes` (mapped again, and registered again, for a new size)."""
        if self.view is None or self.view.numel() != nbytes:
            self.close()
            self.mapping = mmap.mmap(self.fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            self.view = torch.frombuffer(self.mapping, dtype=torch.uint8)
            self.registered = self.cuda and host_register(self.view)
        return self.view

    def close(self) -> None:
        if self.view is not None and self.registered:
            torch.cuda.cudart().cudaHostUnregister(self.view.data_ptr())
        self.view, self.registered = None, False  # the buffer export ends before the mapping closes
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None


class ArenaWriter:
    """The worker's end: copies outputs into the arena it inherited as descriptor `fd`."""

    def __init__(self, fd: int | None, cuda: bool):
        self.mapped = None if fd is None else ArenaMapping(fd, cuda)

    def write(self, value: Any, arena_bytes: int) -> dict[str, Any]:
        """Copy every tensor of a checked output into the first `arena_bytes` of the arena when
        it fits; returns its manifest, whose `written` says whether it did."""
        structure, items = output_items(value)
        entries = [
            {"key": key, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)} for key, t in items
        ]
        offsets, span = layout(tensor_sizes(value))
        written = span <= arena_bytes
        if written and span:
            view = self._map(arena_bytes)
            for (_, t), offset in zip(items, offsets):
                data = flat_bytes(t)
                view[offset : offset + data.numel()].copy_(data)  # synchronous: in the arena after this line
        return {"structure": structure, "tensors": entries, "written": written}

    def _map(self, nbytes: int) -> torch.Tensor:
        if self.mapped is None:
            raise RuntimeError("this worker was started without an output arena")
        held = os.fstat(self.mapped.fd).st_size
        if held < nbytes:  # mapping past the end would fault on the first touch
            raise RuntimeError(f"the output arena holds {held} bytes, not the {nbytes} announced")
        return self.mapped.resize(nbytes)
