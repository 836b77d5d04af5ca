"""`trace diff A B`: how two problem sets (a trace snapshot, the shipped set) differ in operators,
normalised weights and scored shapes. Shapes are compared by content (init and inputs), because
shipped ids and snapshot ids are named differently."""

from __future__ import annotations

import json
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import WEIGHTS_FILE, Catalog
from atrex_mcp.trace.models import Manifest, ShapeChanges, SnapshotDiff, WeightChange


def _weights(root: Path, names: list[str]) -> dict[str, float]:
    path = root / WEIGHTS_FILE
    if not path.is_file():
        raise AtrexError(
            "input",
            "no_weights",
            f"{root} has no {WEIGHTS_FILE}.",
            "Both sides must be problem sets with weights (a snapshot or problems/).",
        )
    try:
        raw = json.loads(path.read_text())["weights"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise AtrexError("input", "bad_problem_file", f"{path} is malformed: {exc}.") from exc
    total = sum(float(raw.get(op, 0.0)) for op in names)
    return {op: (float(raw.get(op, 0.0)) / total if total else 0.0) for op in names}


def _unmapped(root: Path) -> float | None:
    path = root / "manifest.json"
    if not path.is_file():
        return None
    try:
        return Manifest.model_validate_json(path.read_bytes()).unmapped_share
    except ValueError as exc:
        raise AtrexError("input", "bad_manifest", f"{path} is not a trace-snapshot manifest: {exc}.") from None


def _shape_keys(catalog: Catalog, op: str) -> dict[str, dict]:
    return {
        json.dumps({"init": s.init, "inputs": s.inputs}, sort_keys=True): {
            "id": s.id,
            "init": s.init,
            "inputs": s.inputs,
        }
        for s in catalog.visible(op).scored_shapes
    }


def diff_problem_sets(a: Path, b: Path) -> SnapshotDiff:
    a, b = Path(a).resolve(), Path(b).resolve()
    ca, cb = Catalog(a), Catalog(b)
    na, nb = ca.names(), cb.names()
    wa, wb = _weights(a, na), _weights(b, nb)
    weights = [
        WeightChange(op=op, a=wa.get(op), b=wb.get(op), delta=wb.get(op, 0.0) - wa.get(op, 0.0))
        for op in sorted(set(na) | set(nb))
    ]
    weights.sort(key=lambda w: (-abs(w.delta), w.op))
    shapes: list[ShapeChanges] = []
    for op in sorted(set(na) & set(nb)):
        ka, kb = _shape_keys(ca, op), _shape_keys(cb, op)
        added = [kb[k] for k in kb if k not in ka]
        removed = [ka[k] for k in ka if k not in kb]
        if added or removed:
            shapes.append(ShapeChanges(op=op, added=added, removed=removed, common=len(set(ka) & set(kb))))
    return SnapshotDiff(
        a=str(a),
        b=str(b),
        operators_added=sorted(set(nb) - set(na)),
        operators_removed=sorted(set(na) - set(nb)),
        weights=weights,
        shapes=shapes,
        unmapped_share={"a": _unmapped(a), "b": _unmapped(b)},
    )


def _compact(inputs: dict) -> str:
    """Shape inputs for one line: a long list (e.g. 130 sequence lengths) as first values and length."""
    shown = {k: (v if not isinstance(v, list) or len(v) <= 6 else f"{v[:3]}…(len {len(v)})") for k, v in inputs.items()}
    return json.dumps(shown)


def render_diff(d: SnapshotDiff) -> str:
    """The diff as text for a terminal."""

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:6.2f}%"

    lines = [f"A: {d.a}", f"B: {d.b}"]
    if d.unmapped_share["a"] is not None or d.unmapped_share["b"] is not None:
        lines.append(
            f"unmapped device-time share: A {pct(d.unmapped_share['a']).strip()}  B "
            f"{pct(d.unmapped_share['b']).strip()}"
        )
    lines.append(f"operators only in B (new): {', '.join(d.operators_added) or 'none'}")
    lines.append(f"operators only in A (removed): {', '.join(d.operators_removed) or 'none'}")
    lines.append("")
    lines.append(f"{'operator':<30} {'weight A':>8} {'weight B':>8} {'change':>9}")
    for w in d.weights:
        lines.append(f"{w.op:<30} {pct(w.a):>8} {pct(w.b):>8} {100 * w.delta:+8.2f}%")
    lines.append("")
    if not d.shapes:
        lines.append("shapes: no changes in operators common to both sets")
    for s in d.shapes:
        lines.append(f"{s.op}: +{len(s.added)} new, -{len(s.removed)} removed, {s.common} common")
        for item in s.added:
            lines.append(f"    + {item['id']:>12}  {_compact(item['inputs'])}")
        for item in s.removed:
            lines.append(f"    - {item['id']:>12}  {_compact(item['inputs'])}")
    return "\n".join(lines)
