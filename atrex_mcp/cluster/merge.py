"""One EvalResult per operator from the results of its shards.

A shape is taken once: from the first result (in the order given: the order the shards
completed) that judged it; a copy that was not judged (stopped at a deadline) counts only when
no result judged the shape. So a shard that ran twice (its first worker lost after it had
finished, or a resumed run that re-planned its shards) never judges a shape twice into the
operator's result.
"""

from __future__ import annotations

from collections.abc import Sequence

from atrex_mcp.evaluate import scoring
from atrex_mcp.evaluate.models import EvalResult, ShapeResult


def first_complete(parts: Sequence[EvalResult]) -> dict[str, ShapeResult]:
    """Shape id -> the shape's result from the first part that judged it (else the first seen)."""
    chosen: dict[str, ShapeResult] = {}
    for part in parts:
        for shape in part.shapes:
            held = chosen.get(shape.id)
            if held is None or (not held.judged and shape.judged):
                chosen[shape.id] = shape
    return chosen


def merge_results(parts: Sequence[EvalResult], shape_order: Sequence[str]) -> EvalResult:
    """Shapes in `shape_order` (the request's order; first complete wins), S_i recomputed over all of them (partial
    when a part was stopped before judging all its shapes), overhead and seeds summed up."""
    if not parts:
        raise ValueError("merge_results needs at least one result")
    earliest = min(parts, key=lambda p: p.started_at)
    merged = earliest.model_copy(deep=True)
    rank = {sid: i for i, sid in enumerate(shape_order)}
    shapes = first_complete(parts)
    merged.shapes = sorted(shapes.values(), key=lambda s: (rank.get(s.id, len(rank)), s.id))
    merged.compiled = any(p.compiled for p in parts)
    merged.compile_error = None if merged.compiled else earliest.compile_error
    merged.partial = next(
        (p.partial for p in parts if p.partial and any(not s.judged for s in p.shapes if shapes[s.id] is s)), None
    )
    merged.operator_score, merged.operator_score_note = scoring.shapes_operator_score(merged.shapes)
    merged.integrity = sorted({i for p in parts for i in p.integrity})
    merged.seeds = [seed for p in sorted(parts, key=lambda p: p.started_at) for seed in p.seeds]
    merged.isolation.warnings = sorted({w for p in parts for w in p.isolation.warnings})
    for name in type(merged.overhead).model_fields:
        setattr(merged.overhead, name, sum(getattr(p.overhead, name) for p in parts))
    return merged
