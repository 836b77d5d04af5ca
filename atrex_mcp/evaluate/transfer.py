"""Reading what a worker handed over, as data only.

A candidate output arrives in the output arena (format: sandbox.handoff) plus a manifest in the
worker's reply. Both come from the candidate's process, so neither is trusted: the manifest is
checked against an allow-list of structures and dtypes and a size bound, the offsets are derived
here, and nothing past the size this side gave the arena is read. This side creates the arena
and seals it against shrinking before any worker exists, so no worker can make a read of the
mapping fault (SIGBUS). The bytes are copied once into this process's own memory (one DMA into
GPU memory where there is a GPU) before anything looks at them, so a worker that writes the
arena again later cannot change what is being compared.
"""

from __future__ import annotations

import fcntl
import math
import os
from typing import Any

import torch

from atrex_mcp.evaluate import taxonomy as tx
from sandbox.handoff import MAX_OUTPUT_TENSORS, ArenaMapping, layout, tensor_sizes

MAX_DIMS = 16
_DTYPE_NAMES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint64",
    "uint32",
    "uint16",
    "uint8",
    "bool",
)
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in _DTYPE_NAMES if hasattr(torch, name)}


class OutputRejected(Exception):
    """The worker's output is not a well-formed one; carries a runtime-stage category."""

    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.stage, self.category, self.message = tx.RUNTIME, category, message


def _entries(manifest: Any) -> tuple[str, list[tuple[str | None, torch.dtype, tuple[int, ...]]]]:
    """(structure, [(key, dtype, shape)]) of a manifest that passed every check."""
    if not isinstance(manifest, dict) or manifest.get("structure") not in ("tensor", "tuple", "dict"):
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "The worker's output manifest is malformed.")
    structure, tensors = manifest["structure"], manifest.get("tensors")
    if (
        not isinstance(tensors, list)
        or not 1 <= len(tensors) <= MAX_OUTPUT_TENSORS
        or (structure == "tensor" and len(tensors) != 1)
    ):
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, f"Output must hold 1 to {MAX_OUTPUT_TENSORS} tensors.")
    entries = []
    for entry in tensors:
        key, dtype, shape = (
            (entry.get("key"), entry.get("dtype"), entry.get("shape"))
            if isinstance(entry, dict)
            else (None, None, None)
        )
        if (structure == "dict") != isinstance(key, str):
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output dict keys must be strings (and only dicts have keys).")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, f"Output dtype {str(dtype)[:40]!r} is not a plain tensor dtype.")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_DIMS
            or not all(type(n) is int and 0 <= n < 1 << 40 for n in shape)
        ):
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output shape in the manifest is malformed.")
        entries.append((key, DTYPES[dtype], tuple(shape)))
    if structure == "dict" and len({k for k, _, _ in entries}) != len(entries):
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output dict keys repeat.")
    return structure, entries


def _sizes(entries: list[tuple[str | None, torch.dtype, tuple[int, ...]]]) -> list[int]:
    """Bytes of each tensor a checked manifest describes."""
    return [math.prod(shape) * dtype.itemsize for _, dtype, shape in entries]


class OutputArena:
    """The trusted end of the hand-over: the arena every worker of an evaluation inherits.

    It only grows (by a quarter at least, so a run of slightly larger outputs does not remap
    each time), and where CUDA is present it is registered with CUDA here too: the snapshot of
    an output is then one DMA into GPU memory. On the CPU the snapshot goes into one host buffer
    that is reused and only grown (a fresh multi-GB buffer per output costs more in page faults
    than the copy), so a loaded output's tensors are valid until the next `load`.
    """

    GRANULE = 2 << 20

    def __init__(self, cuda: bool):
        self.fd = os.memfd_create("atrex-outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        self.size = 0
        self.mapped = ArenaMapping(self.fd, cuda)
        self.host = torch.empty(0, dtype=torch.uint8)

    def reserve(self, nbytes: int) -> int:
        """Grow the arena to hold at least `nbytes`; returns its size, which the worker is told."""
        if nbytes > self.size:
            size = -(-max(nbytes, self.size + self.size // 4) // self.GRANULE) * self.GRANULE
            os.ftruncate(self.fd, size)
            self.mapped.resize(size)
            self.size = size
        return self.size

    def load(self, manifest: Any, device: torch.device | str, max_bytes: int) -> tuple[Any, bool]:
        """(the output the manifest describes, whether the worker wrote it). A written output
        comes back as plain contiguous tensors on `device` (a tensor, a tuple of tensors or a
        dict str → tensor, as the manifest says); one that did not fit comes back as meta
        tensors of the announced dtypes and shapes, for compare.check_structure to say why it
        cannot match."""
        structure, entries = _entries(manifest)
        sizes = _sizes(entries)
        if sum(sizes) > max_bytes:
            raise OutputRejected(
                tx.WRONG_SHAPE,
                f"Output of {sum(sizes)} bytes exceeds {max_bytes} (far larger than the reference output).",
            )
        written = manifest.get("written") is True
        offsets, span = layout(sizes)
        if written and span > self.size:
            raise OutputRejected(
                tx.WRONG_SHAPE, f"The worker reports an output of {span} bytes written into an arena of {self.size}."
            )
        if not written:
            tensors = [torch.empty(shape, dtype=dtype, device="meta") for _, dtype, shape in entries]
        else:
            raw = self._snapshot(span, device)
            tensors = [
                raw[offset : offset + size].view(dtype).reshape(shape)
                for (_, dtype, shape), size, offset in zip(entries, sizes, offsets)
            ]
        if structure == "dict":
            value: Any = {key: t for (key, _, _), t in zip(entries, tensors)}
        else:
            value = tuple(tensors) if structure == "tuple" else tensors[0]
        return value, written

    def _snapshot(self, span: int, device: torch.device | str) -> torch.Tensor:
        """The arena's first `span` bytes, copied into memory of this process on `device`."""
        if span == 0:
            return torch.empty(0, dtype=torch.uint8, device=device)
        assert self.mapped.view is not None  # mapped since span (> 0) fits self.size
        source = self.mapped.view[:span]
        if torch.device(device).type != "cpu":
            return torch.empty(span, dtype=torch.uint8, device=device).copy_(source)
        if self.host.numel() < span:
            self.host = torch.empty(0, dtype=torch.uint8)  # the old one goes before the new one is made
            self.host = torch.empty(span, dtype=torch.uint8)
        return self.host[:span].copy_(source)

    def close(self) -> None:
        """Unmap and close; a second call does nothing."""
        self.mapped.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def manifest_bytes(manifest: Any) -> int:
    """Bytes of the output a manifest describes (raises OutputRejected when it is malformed)."""
    return sum(_sizes(_entries(manifest)[1]))


def output_bytes(value: Any) -> int:
    return sum(tensor_sizes(value))


def arena_bytes(reference: Any) -> int:
    """Arena bytes a reference output needs: the span the worker's writer computes for an
    output of the same tensors, so a candidate output that can match it fits."""
    return layout(tensor_sizes(reference))[1]
