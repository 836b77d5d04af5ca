"""Reading what a worker wrote, as data only.

A candidate output arrives as raw tensor files in the scratch directory's `io/` plus a
manifest in the worker's reply (format: sandbox.tensor_files). Both come from the
candidate's process, so neither is trusted: the manifest is checked against an allow-list of
structures and dtypes and a size bound; the file names are derived here from a stem this side
chose; each file is opened without following links, through a descriptor of `io/` opened
here, and must be a regular file with one link (a hard link to a file elsewhere is refused)
whose size is exactly what the manifest's dtype and shape imply. The bytes are read into this
process's own memory, never mapped, so a worker that rewrites or truncates a file later
cannot change or fault what is being compared.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import torch

from atrex_mcp.evaluate import taxonomy as tx
from sandbox.tensor_files import IO_DIR, MAX_OUTPUT_TENSORS, file_name, output_tensors

STEM = re.compile(r"[0-9a-f]{8,32}(_[0-9]{1,6})?")
MAX_DIMS = 16
ALIGN = 64  # every tensor of an output starts at a multiple of this many bytes in the reader's buffer
_DTYPE_NAMES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                "float8_e5m2fnuz", "float8_e8m0fnu", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16",
                "uint8", "bool")
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
    if not isinstance(tensors, list) or not 1 <= len(tensors) <= MAX_OUTPUT_TENSORS or (structure == "tensor" and len(tensors) != 1):
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, f"Output must hold 1 to {MAX_OUTPUT_TENSORS} tensors.")
    entries = []
    for entry in tensors:
        key, dtype, shape = (entry.get("key"), entry.get("dtype"), entry.get("shape")) if isinstance(entry, dict) else (None, None, None)
        if (structure == "dict") != isinstance(key, str):
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output dict keys must be strings (and only dicts have keys).")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, f"Output dtype {str(dtype)[:40]!r} is not a plain tensor dtype.")
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(type(n) is int and 0 <= n < 1 << 40 for n in shape)):
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output shape in the manifest is malformed.")
        entries.append((key, DTYPES[dtype], tuple(shape)))
    if structure == "dict" and len({k for k, _, _ in entries}) != len(entries):
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output dict keys repeat.")
    return structure, entries


def _sizes(entries: list[tuple[str | None, torch.dtype, tuple[int, ...]]]) -> list[int]:
    """Bytes of each tensor a checked manifest describes."""
    return [math.prod(shape) * dtype.itemsize for _, dtype, shape in entries]


def _read_exactly(directory: int, name: str, into: torch.Tensor) -> None:
    """Fill `into` (uint8) with the whole file, which must be exactly that long."""
    nbytes = into.numel()
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output file missing or not a plain file.") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output file is not a plain file of its own.")
        if info.st_size != nbytes:
            raise OutputRejected(tx.WRONG_SHAPE, f"Output file holds {info.st_size} bytes; its dtype and shape need {nbytes}.")
        view, got = memoryview(into.numpy()), 0
        with open(fd, "rb", buffering=0, closefd=False) as stream:
            while got < nbytes and (n := stream.readinto(view[got:])):
                got += n
        if got != nbytes:
            raise OutputRejected(tx.WRONG_SHAPE, f"Output file shrank while it was read ({got} of {nbytes} bytes).")
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=directory)


class OutputReader:
    """Reads a worker's outputs into one host buffer that is reused and only ever grown.

    A fresh multi-GB buffer per output costs more in page faults than the read itself (1 GiB:
    0.73 s into fresh memory, 0.18 s into a reused buffer, on the development machine's CPU).
    Where CUDA is present the buffer is pinned, so the comparison's chunked uploads run at link
    speed. A loaded output's tensors are views of this buffer when `device` is the CPU: they
    are valid until the next `load`.
    """

    def __init__(self, scratch: Path, pinned: bool = False):
        self.scratch = scratch
        self.pinned = pinned
        self.buffer = torch.empty(0, dtype=torch.uint8)

    def _arena(self, nbytes: int) -> torch.Tensor:
        if self.buffer.numel() < nbytes:
            self.buffer = torch.empty(0, dtype=torch.uint8)  # the old one goes before the new one is made
            try:
                self.buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pinned)
            except RuntimeError:  # pinning refused: pageable is slower, never wrong
                self.buffer = torch.empty(nbytes, dtype=torch.uint8)
        return self.buffer

    def load(self, stem: str, manifest: Any, device: torch.device | str, max_bytes: int) -> Any:
        """The output the worker wrote under `stem`, as plain contiguous tensors on `device`
        (a tensor, a tuple of tensors or a dict str → tensor, as the manifest says)."""
        if not STEM.fullmatch(stem):
            raise ValueError(f"bad stem {stem!r}")  # chosen by this side: a bug here, not the candidate's
        structure, entries = _entries(manifest)
        sizes = _sizes(entries)
        if sum(sizes) > max_bytes:
            raise OutputRejected(tx.WRONG_SHAPE, f"Output of {sum(sizes)} bytes exceeds {max_bytes} (far larger than the reference output).")
        offsets = [sum(-(-n // ALIGN) * ALIGN for n in sizes[:i]) for i in range(len(sizes))]
        arena = self._arena(offsets[-1] + sizes[-1])
        try:
            directory = os.open(self.scratch / IO_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, f"The scratch directory's {IO_DIR}/ is gone or no longer a directory.") from None
        tensors = []
        try:
            for part, ((_, dtype, shape), size, offset) in enumerate(zip(entries, sizes, offsets)):
                raw = arena[offset:offset + size]
                _read_exactly(directory, file_name(stem, part), raw)
                tensors.append(raw.view(dtype).reshape(shape).to(device))
        finally:
            os.close(directory)
        if structure == "dict":
            return {key: t for (key, _, _), t in zip(entries, tensors)}
        return tuple(tensors) if structure == "tuple" else tensors[0]


def manifest_bytes(manifest: Any) -> int:
    """Bytes of the output a manifest describes (raises OutputRejected when it is malformed)."""
    return sum(_sizes(_entries(manifest)[1]))


def output_bytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in output_tensors(value) if isinstance(t, torch.Tensor))
