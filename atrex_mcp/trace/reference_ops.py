"""The benchmark's reference Models as named custom operators, `atrex::<op>`.

A serving framework's kernels reach the profiler as named host operators with recorded argument
shapes (`_C::rms_norm`, `vllm::unified_attention`, …). Registering each reference through
torch.library gives a model built from the references exactly that look, so traces produced
in tests and on the GPU exercise the same path as production traces. The schema is the
reference's forward arguments (tensors) followed by its __init__ parameters (scalars), which is
the argument order the `atrex::` rules in rules.json expect.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import torch

from atrex_mcp.problemset.catalog import Catalog

NAMESPACE = "atrex"
_LIBRARY: torch.library.Library | None = None
_REGISTERED: dict[str, _Registered] = {}


def _scalar_type(annotation: Any, default: Any) -> str:
    """Schema type of an __init__ parameter, from its annotation (a string under postponed evaluation)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    optional = "None" in text or default is None
    base = re.sub(r"\s*\|\s*None|None\s*\|\s*", "", text).strip()
    if base.startswith(("list[int]", "tuple[int")):
        kind = "int[]"
    elif base in ("int", "float", "bool", "str"):
        kind = base
    else:
        raise TypeError(f"unsupported __init__ parameter type {text!r}")
    return kind + ("?" if optional else "")


def _flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [out[k] for k in sorted(out)]
    return list(out)


def schema_arguments(model_cls: type[Any]) -> tuple[list[str], list[str]]:
    """(forward argument names, __init__ parameter names) in schema order."""
    forward = list(inspect.signature(model_cls.forward).parameters)[1:]
    init = list(inspect.signature(model_cls.__init__).parameters)[1:]
    return forward, init


def _unaliased(outputs: list[torch.Tensor], inputs: tuple[Any, ...]) -> list[torch.Tensor]:
    """A custom op may not return (views of) its inputs: copy any output sharing an input's storage."""
    storages = {a.untyped_storage().data_ptr() for a in inputs if isinstance(a, torch.Tensor)}
    return [t.clone() if t.untyped_storage().data_ptr() in storages else t for t in outputs]


class _Registered:
    """One registered operator: its reference class, argument names, and the current body."""

    def __init__(self, model_cls: type[Any]):
        self.model_cls = model_cls
        self.forward, self.init = schema_arguments(model_cls)
        self.init_sig = inspect.signature(model_cls.__init__).parameters
        self.body: Callable[[torch.nn.Module], Callable[..., Any]] | None = None
        self.models: dict[tuple, Callable[..., Any]] = {}

    def run(self, *args: Any) -> list[torch.Tensor]:
        tensor_args, init_args = args[: len(self.forward)], args[len(self.forward) :]
        key = tuple(tuple(v) if isinstance(v, list) else v for v in init_args)
        if key not in self.models:
            model = self.model_cls(**dict(zip(self.init, init_args)))
            self.models[key] = self.body(model) if self.body else model
        return _unaliased(_flatten(self.models[key](**dict(zip(self.forward, tensor_args)))), tensor_args)

    def positional(self, kwargs: dict[str, Any]) -> list[Any]:
        defaults = {n: p.default for n, p in self.init_sig.items() if p.default is not inspect.Parameter.empty}
        merged = {**defaults, **kwargs}
        return [merged.get(n) for n in self.forward] + [
            list(merged[n]) if isinstance(merged[n], tuple) else merged[n] for n in self.init
        ]


def register(
    op: str, catalog: Catalog | None = None, *, body: Callable[[torch.nn.Module], Callable[..., Any]] | None = None
) -> Callable[..., list[torch.Tensor]]:
    """Register `atrex::<op>` (the schema once per process) and return a caller taking the forward
    inputs and the init parameters as keywords. The op returns the reference's outputs as a list
    of tensors (a dict's values in sorted-key order). `body(model)` swaps the eager forward for
    another callable, e.g. a torch.compile'd model, so the compiled kernels run inside the named
    op; registering again with another body replaces it (the schema stays)."""
    global _LIBRARY
    if op not in _REGISTERED:
        entry = _Registered((catalog or Catalog()).load_reference(op))
        forward_sig = inspect.signature(entry.model_cls.forward).parameters
        tensors = [f"Tensor{'?' if forward_sig[n].default is None else ''} {n}" for n in entry.forward]
        scalars = [f"{_scalar_type(entry.init_sig[n].annotation, entry.init_sig[n].default)} {n}" for n in entry.init]
        if _LIBRARY is None:
            _LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
        _LIBRARY.define(f"{op}({', '.join(tensors + scalars)}) -> Tensor[]")
        _LIBRARY.impl(op, entry.run, "CompositeExplicitAutograd")
        _REGISTERED[op] = entry
    entry = _REGISTERED[op]
    if entry.body is not body:
        entry.body, entry.models = body, {}
    operator = getattr(getattr(torch.ops, NAMESPACE), op)
    return lambda **kwargs: operator(*entry.positional(kwargs))
