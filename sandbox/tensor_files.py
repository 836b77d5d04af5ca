"""How a worker hands an output to the trusted side: raw tensor bytes, one file per tensor.

An output (a tensor, a tuple/list of tensors, or a dict str → tensor) becomes one file per
tensor, `io/<stem>_<part>.bin`, holding exactly the tensor's bytes in C order, plus a small
manifest (structure, dict keys, dtype and shape per tensor) that travels in the JSON reply.
The trusted side chooses `stem`, derives every file name itself and reads each file into its
own memory (atrex_mcp.evaluate.transfer), so nothing the worker names or pickles is trusted.

Why not torch.save: its zip container checksums and copies every byte twice more; on the H200
the file transfer was the largest part of the judge's time (1843 s predicted for the eager set,
719 s of it per-shape traffic). Raw bytes through a pinned staging buffer cost one GPU→host copy
and one write here, one read on the trusted side.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

IO_DIR = "io"
MAX_OUTPUT_TENSORS = 64
STAGING_BYTES = 64 << 20  # pinned host buffer a GPU output is copied through, chunk by chunk


def file_name(stem: str, part: int) -> str:
    return f"{stem}_{part}.bin"


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


def flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes in C order as a 1-D uint8 tensor (a copy only when not contiguous)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


class TensorWriter:
    """Writes outputs into `directory`; on a GPU it reuses one pinned staging buffer."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.staging: torch.Tensor | None = None

    def write(self, value: Any, stem: str) -> dict[str, Any]:
        """Write every tensor of a checked output; returns its manifest."""
        structure, items = output_items(value)
        entries = []
        for part, (key, t) in enumerate(items):
            self._write_tensor(t, self.directory / file_name(stem, part))
            entries.append({"key": key, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)})
        return {"structure": structure, "tensors": entries}

    def _write_tensor(self, t: torch.Tensor, path: Path) -> None:
        data = flat_bytes(t)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if data.device.type == "cpu":
                _write_all(fd, memoryview(data.numpy()))
                return
            if self.staging is None:
                self.staging = _staging_buffer()
            for offset in range(0, data.numel(), STAGING_BYTES):
                chunk = data[offset:offset + STAGING_BYTES]
                stage = self.staging[:chunk.numel()]
                stage.copy_(chunk)  # synchronous into pinned memory: the bytes are on the host after this line
                _write_all(fd, memoryview(stage.numpy()))
        finally:
            os.close(fd)


def _staging_buffer() -> torch.Tensor:
    """Pinned where the driver allows it (a copy into pinned memory runs at full link speed),
    pageable otherwise: slower, never wrong."""
    try:
        return torch.empty(STAGING_BYTES, dtype=torch.uint8, pin_memory=True)
    except RuntimeError:
        return torch.empty(STAGING_BYTES, dtype=torch.uint8)


def _write_all(fd: int, view: memoryview) -> None:
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]
