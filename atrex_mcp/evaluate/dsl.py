"""Target-DSL adapters: which kernels a candidate wrote itself, and what the worker needs.

An adapter answers three questions for its DSL:
* `own_kernels(source)`: the kernel names the candidate defines in that DSL, read from the
  source on the trusted side (never from what the worker claims);
* `origin(kernel_name, own)`: candidate_dsl, generated (torch.compile/Inductor), library
  (cuBLAS, cuDNN, CUTLASS, flash…) or framework (aten and copies);
* `worker_env(cuda)`: environment the worker needs (Triton's interpreter without a GPU).

Only candidate_dsl time counts towards the DSL share. Triton is the shipped adapter; a CUDA
C++ (torch.utils.cpp_extension) or CuTe DSL adapter implements the same three methods.
"""

from __future__ import annotations

import ast
import re
from typing import Protocol

from atrex_mcp.errors import unknown_choice

CANDIDATE_DSL, GENERATED, LIBRARY, FRAMEWORK = "candidate_dsl", "generated", "library", "framework"

_LIBRARY = re.compile(
    r"gemm|cublas|cutlass|cudnn|xmma|nvjet|flash|fmha|sm\d+_|ampere_|hopper_|volta_|turing_|cusparse|cufft|nccl",
    re.IGNORECASE,
)
_INDUCTOR = re.compile(r"^triton_(poi|red|per|tem|for|spl|mm|bmm|)_?")


class DslAdapter(Protocol):
    name: str

    def own_kernels(self, source: str) -> set[str]: ...

    def origin(self, kernel: str, own: set[str]) -> str: ...

    def worker_env(self, cuda: bool) -> dict[str, str]: ...


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


class TritonAdapter:
    """Kernels are functions decorated with triton.jit (possibly under autotune/heuristics)."""

    name = "triton"

    def own_kernels(self, source: str) -> set[str]:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return set()
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                _dotted(d).split(".")[-1] == "jit" for d in node.decorator_list
            ):
                names.add(node.name)
        return names

    def origin(self, kernel: str, own: set[str]) -> str:
        # Triton names a compiled kernel after its function; old releases appended a
        # signature suffix such as `_0d1d2de`.
        base = re.sub(r"_\d+[a-z\d]*$", "", kernel)
        if kernel in own or base in own:
            return CANDIDATE_DSL
        if _INDUCTOR.match(kernel):
            return GENERATED
        if _LIBRARY.search(kernel):
            return LIBRARY
        return FRAMEWORK

    def worker_env(self, cuda: bool) -> dict[str, str]:
        return {} if cuda else {"TRITON_INTERPRET": "1"}


ADAPTERS: dict[str, DslAdapter] = {"triton": TritonAdapter()}


def adapter(name: str) -> DslAdapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise unknown_choice("dsl", name, sorted(ADAPTERS)) from None


def dsl_share(kernels: list[tuple[str, float, str]]) -> float | None:
    """Share of device time in candidate_dsl kernels; None when no device time was seen."""
    total = sum(t for _, t, _ in kernels)
    if total <= 0:
        return None
    return sum(t for _, t, origin in kernels if origin == CANDIDATE_DSL) / total
