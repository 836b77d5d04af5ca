"""Profiler traces made from the benchmark's own references, for tests and the GPU bench.

A model is a list of steps (a prefill or decode forward pass); a step is a list of items: a
reference call (operator, init, make_inputs parameters) or arbitrary other work (a callable,
e.g. a projection GEMM, which no rule should claim). Inputs are drawn before profiling starts,
so only the forward work is in the trace. A reference call appears in one of three forms:

  "named"      the atrex::<op> custom op (reference_ops): a named host op with recorded shapes,
               like a serving framework's custom op
  "range"      the plain reference inside record_function("atrex::<op>"): a named range
  "anonymous"  the plain reference: only its aten ops and kernels (or generated kernels) show
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.trace import reference_ops

Form = Literal["named", "range", "anonymous"]
Compile = Callable[[str, torch.nn.Module], Callable[..., Any]]  # (operator, model) → what runs instead


@dataclass
class OpCall:
    """One call of a benchmark reference."""

    op: str
    inputs: dict[str, Any]
    init: dict[str, Any] = field(default_factory=dict)
    form: Form = "named"


@dataclass
class Step:
    """One forward pass; `phase` names the record_function range around it (None: no range)."""

    phase: str | None
    items: list[OpCall | Callable[[], Any]]


# One model (and one compiled wrapper) per operator, init and compiler for the whole process:
# torch.compile caches per code object and gives up after a few recompilations, so compiling
# a fresh instance for every call of the same operator would silently fall back to eager.
_FORWARDS: dict[tuple[str, str, Compile | None], Callable[..., Any]] = {}
_BODIES: dict[tuple[str, Compile], Callable[[torch.nn.Module], Callable[..., Any]]] = {}


def _forward(catalog: Catalog, op: str, init: dict[str, Any], compile_model: Compile | None) -> Callable[..., Any]:
    key = (op, json.dumps(init, sort_keys=True), compile_model)
    if key not in _FORWARDS:
        model = catalog.load_reference(op)(**init)
        _FORWARDS[key] = compile_model(op, model) if compile_model else model
    return _FORWARDS[key]


def _body(op: str, compile_model: Compile | None) -> Callable[[torch.nn.Module], Callable[..., Any]] | None:
    """A stable body per operator and compiler (reference_ops rebuilds its models when the body changes)."""
    if compile_model is None:
        return None
    if (op, compile_model) not in _BODIES:
        _BODIES[(op, compile_model)] = lambda model: compile_model(op, model)
    return _BODIES[(op, compile_model)]


def _prepared(
    item: OpCall | Callable[[], Any], catalog: Catalog, device: str, seed: int, compile_model: Compile | None
) -> Callable[[], Any]:
    if not isinstance(item, OpCall):
        return item
    tensors = catalog.load_make_inputs(item.op)(seed=seed, device=device, **item.inputs)
    if item.form == "named":
        call = reference_ops.register(item.op, catalog, body=_body(item.op, compile_model))
        return lambda: call(**tensors, **item.init)
    forward = _forward(catalog, item.op, item.init, compile_model)
    if item.form == "range":

        def ranged() -> Any:
            with record_function(f"{reference_ops.NAMESPACE}::{item.op}"):
                return forward(**tensors)

        return ranged
    return lambda: forward(**tensors)


def record_trace(
    steps: list[Step],
    out: Path,
    *,
    device: str = "cpu",
    catalog: Catalog | None = None,
    compile_model: Compile | None = None,
    warmup: int = 1,
    seed: int = 0,
) -> Path:
    """Run the steps (after `warmup` unprofiled rounds) under torch.profiler with record_shapes
    and export a Chrome trace to `out`."""
    catalog = catalog or Catalog()
    plan = [
        (step.phase, [_prepared(item, catalog, device, seed + i, compile_model) for i, item in enumerate(step.items)])
        for step in steps
    ]

    def run_all() -> None:
        for phase, items in plan:
            if phase is None:
                for fn in items:
                    fn()
                continue
            with record_function(phase):
                for fn in items:
                    fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(warmup):
        run_all()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities, record_shapes=True) as prof:
        run_all()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out))
    return out
