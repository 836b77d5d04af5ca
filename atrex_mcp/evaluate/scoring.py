"""The paper's scores, computed on the trusted side only.

* S_j = T_SOL / T_cand per shape. T_SOL is atrex_mcp.problemset.roofline.shape_roofline's: the
  hidden W/Q of problems/<op>/roofline.json on the profile's peaks. S_j > 1 means the candidate beat
  the physical bound: an evaluation error, reported as an integrity incident; S_j itself is never
  clipped.
* S_i = median of min(S_j, 1) over the operator's correct shapes (`aggregate_shape_score`:
  a time below T_SOL, forged or mismeasured, raises no aggregate above the physical bound);
  0 when no shape is correct; null when shapes are correct but none has a score (not timed, or
  no roofline for the profile).
  A partial evaluation (deadline or cancel) gives S_i over its judged shapes only, marked so.
* S_agg = Σ w_i · S_i over every operator of the catalog with weights normalised to sum 1;
  an operator without a result counts 0.

Times are only ever divided by the T_SOL of the accelerator that produced them: a profile
whose family (h200, h100, h20, xpu-a…) is not in the measured GPU's name gives no score, so an
H200 time is never scored against XPU-A (whose production figures are another machine's).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog, HiddenProblem
from atrex_mcp.problemset.roofline import shape_roofline


class Roofline:
    """Per-shape T_SOL of one operator on one profile, or the reason there is none."""

    def __init__(self, hidden: HiddenProblem | None, profile: str, reason: str = ""):
        self.profile, self.reason = profile, reason
        self._hidden = hidden

    @classmethod
    def load(cls, catalog: Catalog, op: str, profile: str) -> Roofline:
        try:
            return cls(catalog.hidden(op), profile)
        except (AtrexError, ImportError, OSError, KeyError, ValueError) as exc:
            return cls(None, profile, f"no roofline for {op}: {exc}")

    def t_sol_ms(self, shape_id: str) -> tuple[float | None, str]:
        """(T_SOL in ms, reason when None)."""
        if self.reason or self._hidden is None:
            return None, self.reason
        if self._hidden.roofline_entry(shape_id) is None:
            return None, f"roofline has no shape {shape_id}"
        try:
            return shape_roofline(self._hidden, shape_id, self.profile).t_sol_ms, ""
        except AtrexError as exc:
            why = " ".join(filter(None, [exc.info.message, exc.info.hint]))
            return None, f"no T_SOL for shape {shape_id} on profile {self.profile!r}: {why}"


def profile_family(profile: str) -> str:
    """'h200-measured' -> 'h200', 'h100-sxm' -> 'h100', 'xpu-a' -> 'xpu-a'."""
    head = profile.lower().split("-")[0]
    return profile.lower() if re.fullmatch(r"[a-z]+", head) else head


def profile_mismatch(profile: str, device_name: str) -> str:
    """Why a profile cannot score times measured on `device_name` ('' when it can)."""
    family = profile_family(profile)
    if re.search(rf"(?<![a-z0-9]){re.escape(family)}(?![a-z0-9])", device_name.lower()):
        return ""
    return (
        f"profile {profile!r} describes another accelerator than the one measured ({device_name!r}); "
        "a time is only scored against the T_SOL of the device that produced it"
    )


def shape_score(t_sol_ms: float | None, time_ms: float | None) -> float | None:
    if t_sol_ms is None or time_ms is None or time_ms <= 0:
        return None
    return t_sol_ms / time_ms


def floor_aware_score(t_sol_ms: float | None, t_floor_ms: float, time_ms: float | None) -> float | None:
    """S_floor_j = max(T_SOL, T_floor) / T_cand: a second score reported beside S_j, never
    instead of it. T_floor is the smallest time the timing loop can report for one launch
    (measurements/launch_floor.py), so a shape whose T_SOL is below one launch does not score near 0
    for every possible kernel; where T_SOL ≥ T_floor it equals S_j. Not clipped."""
    if t_sol_ms is None:
        return None
    return shape_score(max(t_sol_ms, t_floor_ms), time_ms)


def aggregate_shape_score(score: float) -> float:
    """S_j as it enters S_i (and so S_agg): a time below T_SOL counts as T_SOL."""
    return min(score, 1.0)


def operator_score(shapes: Iterable[tuple[bool, float | None]]) -> tuple[float | None, str]:
    """S_i from (correct, S_j) pairs: (score, note when None)."""
    shapes = list(shapes)
    correct = [s for ok, s in shapes if ok]
    if not correct:
        return 0.0, ""
    scored = [s for s in correct if s is not None]
    if not scored:
        return None, "correct shapes have no score (not timed, or no roofline for this profile)"
    return statistics.median(aggregate_shape_score(s) for s in scored), ""


def judged_operator_score(judged: Iterable[tuple[bool, float | None]], not_run: int) -> tuple[float | None, str]:
    """S_i over the shapes judged when `not_run` others were not (a partial evaluation): the
    figure is kept, but its note says it covers only part of the operator, and with no shape
    judged there is no S_i at all (not the 0 of an operator with no correct shape). With
    nothing missing it is `operator_score` itself."""
    judged = list(judged)
    if not not_run:
        return operator_score(judged)
    if not judged:
        return None, f"partial: no shape was judged ({not_run} not run)"
    score, note = operator_score(judged)
    return score, "; ".join(
        filter(None, [f"partial: over the {len(judged)} judged shapes only, {not_run} not run", note])
    )


def shapes_operator_score(shapes: Iterable[Any]) -> tuple[float | None, str]:
    """`judged_operator_score` of an evaluation's ShapeResults (their own S_j, unjudged ones counted)."""
    shapes = list(shapes)
    return judged_operator_score(((s.correct, s.score) for s in shapes if s.judged), sum(not s.judged for s in shapes))


def aggregate(
    operator_scores: Mapping[str, float | None], weights: Mapping[str, float]
) -> tuple[float | None, list[str]]:
    """S_agg over `weights` (normalised here); (score, operators counted as 0 for lack of a result).
    None when some operator has a result without a score."""
    total = sum(weights.values())
    if total <= 0:
        return None, []
    missing = [op for op in weights if op not in operator_scores]
    if any(operator_scores.get(op) is None for op in weights if op in operator_scores):
        return None, missing
    return sum(w / total * (operator_scores.get(op) or 0.0) for op, w in weights.items()), missing
