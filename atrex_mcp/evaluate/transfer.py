"""Reading what a worker wrote, as data only.

Candidate outputs arrive as torch.save files in the scratch directory. They are loaded with
the restricted unpickler (`weights_only=True`: tensors and plain containers, no code), the
file size is bounded, the path must stay inside the scratch directory, and every tensor is
rebuilt as a plain, contiguous torch.Tensor — a subclass that slipped through is rejected
rather than trusted to behave.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from atrex_mcp.evaluate import taxonomy as tx


class OutputRejected(Exception):
    """The file does not hold a well-formed output; carries a runtime-stage category."""

    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.stage, self.category, self.message = tx.RUNTIME, category, message


def _plain(t: Any, device: torch.device | str) -> torch.Tensor:
    if type(t) is not torch.Tensor:
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, f"Output holds a {type(t).__name__}, not a plain torch.Tensor.")
    return t.detach().to(device).contiguous()


def load_output(scratch: Path, name: str, device: torch.device | str, max_bytes: int) -> Any:
    """A candidate output (tensor, tuple of tensors or dict str → tensor) on `device`."""
    path = (scratch / name).resolve()
    if scratch.resolve() not in path.parents:
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output file outside the scratch directory.")
    if not path.is_file() or path.is_symlink():
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output file missing.")
    if path.stat().st_size > max_bytes:
        raise OutputRejected(tx.WRONG_SHAPE, f"Output file of {path.stat().st_size} bytes exceeds {max_bytes} (far larger than the reference output).")
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise OutputRejected(tx.WRONG_OUTPUT_TYPE, f"Output could not be read as plain tensors: {str(exc)[:300]}") from None
    finally:
        path.unlink(missing_ok=True)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise OutputRejected(tx.WRONG_OUTPUT_TYPE, "Output dict keys must be strings.")
        return {k: _plain(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v, device) for v in value)
    return _plain(value, device)


def output_bytes(value: Any) -> int:
    tensors = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else (value,)
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
