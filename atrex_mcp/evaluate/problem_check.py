"""Is a problem able to tell a real kernel from a cheap one? Checked at its smoke shape on CPU:

  finite        no floating output holds NaN (infinities are listed, not failed: top-k
                masking writes -inf by design)
  seed_varies   the reference output changes with the input seed
  trivial candidates must FAIL the evaluator's comparison (atrex_mcp.evaluate.compare):
    zeros       every output zero
    constant    every output filled with one value learnt offline: the mean (floats) or most
                common value (integers) of the same output for another seed
    input       outputs that have an input of the same shape and dtype return that input
                unchanged; the other outputs keep the reference values (skipped when none fits)
    other_seed  the reference output computed from another seed's inputs

and, over every scored shape, that its hidden files agree with the code:
  roofline    the T_SOL and bound stored in roofline.json per profile equal what
              atrex_mcp.problemset.roofline.shape_roofline computes from the stored W/Q today
              (a profile edited after the build makes them stale; not applicable before the
              hidden files exist)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import BaseModel, Field
from torch.utils._pytree import tree_map

from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate.compare import CompareResult, compare_outputs, flatten_outputs
from atrex_mcp.problemset.catalog import Catalog, HiddenProblem
from atrex_mcp.problemset.roofline import shape_roofline

SEED, OTHER_SEED = 0, 1


class CheckResult(BaseModel):
    """One check of one problem."""

    name: str = Field(description="Check name: finite, seed_varies, zeros, constant, input, other_seed, roofline.")
    passed: bool = Field(description="True when the problem behaves as required.")
    detail: str = Field(default="", description="What was seen.")


class ProblemCheck(BaseModel):
    """All checks of one problem at its smoke shape."""

    op: str = Field(description="Operator name.")
    shape_id: str = Field(description="The shape checked (the smoke shape).")
    checks: list[CheckResult] = Field(description="One entry per check.")

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def _run(catalog: Catalog, op: str, seed: int) -> tuple[dict[str, torch.Tensor], Any]:
    shape = catalog.visible(op).smoke_shape
    inputs = catalog.load_make_inputs(op)(seed=seed, device="cpu", **shape.inputs)
    with torch.no_grad():
        return inputs, catalog.load_reference(op)(**shape.init)(**inputs)


def _leaves(out: Any) -> dict[str, Any]:
    """The named output leaves; a reference whose output is not a tensor, tuple or dict is the problem's error."""
    leaves = flatten_outputs(out)
    if isinstance(leaves, CompareResult):
        raise AtrexError(
            "input",
            "bad_reference_output",
            f"The reference's output cannot be checked: {leaves.message}",
            "Return a tensor, a tuple/list of tensors or a dict of tensors from Model.forward.",
        )
    return leaves


def _finite(out: Any) -> CheckResult:
    nan, inf = [], []
    for name, t in _leaves(out).items():
        if t.dtype.is_floating_point:
            wide = t.float()
            if bool(torch.isnan(wide).any()):
                nan.append(name)
            if bool(torch.isinf(wide).any()):
                inf.append(f"{name} ({int(torch.isinf(wide).sum())} infinite)")
    detail = (f"NaN in {nan}. " if nan else "") + (f"Infinities (allowed): {', '.join(inf)}." if inf else "")
    return CheckResult(name="finite", passed=not nan, detail=detail or "all floating outputs finite")


def _seed_varies(out: Any, other: Any) -> CheckResult:
    a, b = _leaves(out), _leaves(other)
    same = [n for n in a if torch.equal(a[n], b[n])]
    changed = len(a) - len(same)
    return CheckResult(
        name="seed_varies",
        passed=changed > 0,
        detail=f"{changed}/{len(a)} outputs change with the seed" + (f"; unchanged: {same}" if same else ""),
    )


def _constant_like(ref: torch.Tensor, learnt_from: torch.Tensor) -> torch.Tensor:
    if ref.dtype.is_floating_point:
        finite = learnt_from.float()[torch.isfinite(learnt_from.float())]
        return torch.full(ref.shape, float(finite.mean()) if finite.numel() else 0.0).to(ref.dtype)
    return torch.full_like(ref, int(torch.mode(learnt_from.reshape(-1).long()).values) if learnt_from.numel() else 0)


def _input_unchanged(out: Any, inputs: dict[str, torch.Tensor]) -> tuple[Any, list[str]]:
    """Each output takes an input of its shape and dtype (the same-named one first), if any."""
    leaves, used = _leaves(out), []
    for name, t in leaves.items():
        fits = [n for n, x in inputs.items() if x.shape == t.shape and x.dtype == t.dtype]
        if fits:
            pick = name if name in fits else fits[0]
            leaves[name] = inputs[pick]
            used.append(pick)
    return _restructure(out, leaves), used


def _must_fail(name: str, reference: Any, candidate: Any, op: str, note: str = "") -> CheckResult:
    verdict = compare_outputs(reference, candidate, op)
    text = "rejected" if not verdict.ok else "ACCEPTED by the comparison"
    return CheckResult(name=name, passed=not verdict.ok, detail=f"{text}{'; ' + note if note else ''}")


def check_problem(catalog: Catalog, op: str) -> ProblemCheck:
    """Run every check on the operator's smoke shape."""
    inputs, out = _run(catalog, op, SEED)
    _, other = _run(catalog, op, OTHER_SEED)
    checks = [_finite(out), _seed_varies(out, other)]
    checks.append(_must_fail("zeros", out, tree_map(torch.zeros_like, out), op))
    other_leaves = _leaves(other)
    constant = {n: _constant_like(t, other_leaves[n]) for n, t in _leaves(out).items()}
    checks.append(_must_fail("constant", out, _restructure(out, constant), op))
    candidate, used = _input_unchanged(out, inputs)
    if used:
        checks.append(_must_fail("input", out, candidate, op, f"returned inputs {used}"))
    else:
        checks.append(
            CheckResult(name="input", passed=True, detail="not applicable: no input has an output's shape and dtype")
        )
    checks.append(_must_fail("other_seed", out, other, op))
    checks.append(_stored_roofline(catalog, op))
    return ProblemCheck(op=op, shape_id=catalog.visible(op).smoke_shape.id, checks=checks)


def _disagrees(hidden: HiddenProblem, shape_id: str, profile: str, entry: dict[str, Any]) -> bool:
    stored_t, stored_bound = entry.get("t_sol_ms", {}).get(profile), (entry.get("bound") or {}).get(profile)
    try:
        point = shape_roofline(hidden, shape_id, profile)
    except AtrexError:  # the profile is gone, or lacks a peak the work needs: stored as null
        return stored_t is not None or stored_bound is not None
    return stored_t is None or not math.isclose(stored_t, point.t_sol_ms, rel_tol=1e-9) or stored_bound != point.bound


def _stored_roofline(catalog: Catalog, op: str) -> CheckResult:
    """roofline.json's stored T_SOL/bound against the one roofline function, every scored shape and stored profile."""
    if not catalog.has_hidden(op):
        return CheckResult(
            name="roofline",
            passed=True,
            detail="not applicable: no hidden files yet (`atrex-mcp problems add` derives them)",
        )
    hidden = catalog.hidden(op)
    stale, pairs = [], 0
    for shape in catalog.visible(op).scored_shapes:
        entry = hidden.roofline_entry(shape.id)
        if entry is None:
            stale.append(f"shape {shape.id} (no entry)")
            continue
        for profile in sorted(entry.get("t_sol_ms") or {}):
            pairs += 1
            if _disagrees(hidden, shape.id, profile, entry):
                stale.append(f"shape {shape.id} on {profile}")
    if stale:
        detail = (
            f"stored T_SOL/bound differ from the roofline function for {len(stale)} of {pairs} shape-profile "
            f"pairs (first: {', '.join(stale[:3])}); rebuild with `atrex-mcp problems build` (shipped set) "
            "or `problems add` (your own problem)"
        )
        return CheckResult(name="roofline", passed=False, detail=detail)
    return CheckResult(
        name="roofline", passed=True, detail=f"stored T_SOL and bound agree on {pairs} shape-profile pairs"
    )


def _restructure(like: Any, leaves: dict[str, torch.Tensor]) -> Any:
    """Put named leaves back into the container kind of `like` (tensor, tuple or dict)."""
    if isinstance(like, torch.Tensor):
        return leaves["out"]
    if isinstance(like, dict):
        return {k: leaves[str(k)] for k in like}
    return type(like)(leaves[f"out[{i}]"] for i in range(len(like)))


def check_problems(catalog: Catalog, ops: list[str] | None = None) -> list[ProblemCheck]:
    return [check_problem(catalog, op) for op in (ops or catalog.names())]
