"""Shared helpers of the problem-folder tests (tests/test_problems_*.py): load an operator's
reference and input generator through the catalog, compare tensors bit for bit, name the
leaves of a reference's output, and check a result against a float64 value rounded once."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import torch

from atrex_mcp.paths import REPO_ROOT
from atrex_mcp.problemset.catalog import Catalog, Shape

PROBLEMS = REPO_ROOT / "problems"
SHARED_SHAPES = REPO_ROOT.parent / "shared" / "atrex-ops" / "shapes"

BF16, F16, F32, I32 = torch.bfloat16, torch.float16, torch.float32, torch.int32
FN = torch.float8_e4m3fn

HALF_ULP = {BF16: 2.0**-8, F16: 2.0**-11}  # relative bound of one correct rounding
SLACK = 1.0 + 1e-3  # fp32 evaluation error may push a value just past a midpoint


@cache
def catalog() -> Catalog:
    return Catalog(PROBLEMS)


def model(op: str, init: dict[str, Any]) -> torch.nn.Module:
    """A fresh reference Model (the module is imported anew, so patching it stays local)."""
    return catalog().load_reference(op)(**init)


def make_inputs(op: str, seed: int, **shape_inputs: Any) -> dict[str, torch.Tensor]:
    return catalog().load_make_inputs(op)(seed=seed, **shape_inputs)


def smoke(op: str) -> Shape:
    return catalog().visible(op).smoke_shape


def leaves(out: Any) -> list[tuple[Any, torch.Tensor]]:
    """(key, tensor) of each output: key None for a lone tensor, the index in a tuple, the key of a dict."""
    if isinstance(out, torch.Tensor):
        return [(None, out)]
    if isinstance(out, tuple):
        return list(enumerate(out))
    assert isinstance(out, dict), f"output is a {type(out).__name__}"
    return list(out.items())


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor, so that fp8 tensors, -0 and NaN compare bit for bit."""
    return t.detach().contiguous().view(-1).view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def f64(t: torch.Tensor) -> np.ndarray:
    return t.double().numpy()


def assert_one_rounding(actual: torch.Tensor, exact: np.ndarray, *, noise: float) -> None:
    """`actual` (bf16/fp16) is the float64 `exact` rounded once, up to an absolute fp32
    evaluation error `noise` (near a cancellation) and fp32 noise at a midpoint."""
    err = np.abs(f64(actual) - exact)
    bound = HALF_ULP[actual.dtype] * SLACK * np.abs(exact) + noise
    assert (err <= bound).all(), f"max error {err.max():.3g}, worst excess {(err - bound).max():.3g}"
