"""Writers of the hidden problem files (metadata.json, roofline.json, weights.json), shared by
the build of the shipped set and the derivation for a user's own problem. Output is
deterministic: sorted keys, fixed indentation, a final newline."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from atrex_mcp.problemset.catalog import Catalog, Shape
from atrex_mcp.problemset.hardware import DEFAULT_PROFILE, load_all_profiles
from atrex_mcp.problemset.roofline import Workload, shape_record

PRODUCTION_NOTE = (
    "production_us['XPU-A'] is the time of the deployed production kernel measured on XPU-A, another "
    "accelerator (a CDNA3-class part, not an NVIDIA GPU); it is context, not a target for an H200 run. "
    "No H20 production timings exist (null)."
)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=False, ensure_ascii=False) + "\n")


def run_reference(catalog: Catalog, op: str, shape: Shape, seed: int = 0) -> Any:
    """The reference output of one shape on CPU tensors."""
    inputs = catalog.load_make_inputs(op)(seed=seed, device="cpu", **shape.inputs)
    with torch.no_grad():
        return catalog.load_reference(op)(**shape.init)(**inputs)


def describe_output(out: Any) -> dict[str, Any]:
    """Container kind and, per output (named as the evaluator's comparison names them), dtype and rank."""
    if isinstance(out, torch.Tensor):
        kind, leaves = "tensor", {"out": out}
    elif isinstance(out, Mapping):
        kind, leaves = "dict", {str(k): v for k, v in out.items()}
    elif isinstance(out, Sequence):
        kind, leaves = "tuple", {f"out[{i}]": v for i, v in enumerate(out)}
    else:
        raise TypeError(f"reference returned a {type(out).__name__}, not a tensor, tuple or dict of tensors")
    entries = [
        {"name": name, "dtype": str(t.dtype).removeprefix("torch."), "ndim": t.dim()} for name, t in leaves.items()
    ]
    return {"kind": kind, "entries": entries}


def roofline_document(
    op: str,
    counting: str,
    workloads: dict[str, Workload],
    *,
    note: str = "",
    extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """roofline.json: per scored shape W, Q, intensity, and T_SOL/bound on every hardware profile.

    `extra` adds keys to a shape's entry (e.g. SPEC's own figure where ours differs).
    """
    profiles = load_all_profiles()
    shapes = {sid: shape_record(w, profiles) | dict((extra or {}).get(sid, {})) for sid, w in workloads.items()}
    doc: dict[str, Any] = {"op": op, "counting": counting, "default_profile": DEFAULT_PROFILE, "shapes": shapes}
    if note:
        doc["note"] = note
    return doc
