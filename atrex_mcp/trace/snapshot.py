"""`trace import`: serving traces → a versioned snapshot that loads as a problem set.

Layout of SNAPSHOT_DIR (docs/trace.md):
  <op>/reference.py, <op>/input.py   copied from the source problem set (visible)
  <op>/shapes.json                   the trace's bucketed shapes + the shipped smoke shape (visible)
  weights.json                       {"source", "raw_sum", "raw", "weights"} (evaluator-only)
  manifest.json                      inputs' hashes, rules version, date, unmapped share, per-shape
                                     counts and device time (evaluator-only)
Everything is computed before anything is written; the directory is assembled under a temporary
name next to its destination and renamed into place at the end, so a failure leaves nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from atrex_mcp import __version__
from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.trace.attribution import Attribution, Call, attribute
from atrex_mcp.trace.events import load_trace
from atrex_mcp.trace.models import FusedKernel, Manifest, OperatorRecord, ShapeStats, TraceInput, UnmappedCategory
from atrex_mcp.trace.rules import OTHER, ResolvedShape, Rules
from atrex_mcp.trace.weights import Times, category_shares, compute_weights, read_app_shares

PhaseMode = Literal["prefill", "decode", "auto"]


@dataclass(frozen=True)
class TraceSpec:
    """A trace file and the application it belongs to."""

    app: str
    path: Path


@dataclass
class _ShapeAgg:
    shape: ResolvedShape
    count: int = 0
    device_us: float = 0.0
    phases: set[str] = field(default_factory=set)


def shape_id(shape: ResolvedShape) -> str:
    """Content-derived, so the same shape keeps its id across refreshes and snapshots."""
    return "t" + hashlib.sha256(shape.key.encode()).hexdigest()[:10]


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _shapes_document(op: str, rows: list[dict[str, Any]]) -> str:
    """shapes.json in the shipped layout: one shape per line."""
    lines = ",\n".join("    " + json.dumps(r) for r in rows)
    return f'{{\n  "op": {json.dumps(op)},\n  "shapes": [\n{lines}\n  ]\n}}\n'


@dataclass(frozen=True)
class SnapshotContent:
    """A snapshot before it is written: its manifest, its weights document and every file's text."""

    manifest: Manifest
    weights: dict[str, Any]
    files: dict[str, str]


def import_traces(
    specs: list[TraceSpec],
    out: Path,
    *,
    phase: PhaseMode = "auto",
    apps_file: Path | None = None,
    problems: Path | None = None,
    rules_path: Path | None = None,
    decode_max_tokens: int | None = None,
) -> Manifest:
    """Build the snapshot for `specs` at `out` (which must not exist yet) and return its manifest."""
    out = Path(out).resolve()
    if out.exists():
        raise AtrexError(
            "input",
            "snapshot_exists",
            f"{out} already exists.",
            "Snapshots are versioned: write each import to a new directory (e.g. snapshots/2026-11-30).",
        )
    content = build_snapshot(
        specs,
        phase=phase,
        apps_file=apps_file,
        problems=problems,
        rules_path=rules_path,
        decode_max_tokens=decode_max_tokens,
    )
    if not content.weights["weights"]:
        reasons: Counter[str] = Counter()
        for rec in content.manifest.operators.values():
            reasons.update(rec.unresolved_reasons if rec.unresolved_reasons else {rec.dropped_reason or "": 1})
        found = ", ".join(content.manifest.operators) or "none"
        raise AtrexError(
            "input",
            "no_operators",
            f"No benchmark operator could be kept (operators found: {found}; "
            f"unmapped share {100 * content.manifest.unmapped_share:.1f}%).",
            "Shapes come from named host operators with recorded arguments (record_shapes=True); most frequent "
            f"reasons: {'; '.join(r for r, _ in reasons.most_common(3)) or 'no operator matched the rules'}. See "
            "docs/trace.md, 'The rules table'.",
        )
    _write_atomically(out, content.files)
    return content.manifest


def build_snapshot(
    specs: list[TraceSpec],
    *,
    phase: PhaseMode = "auto",
    apps_file: Path | None = None,
    problems: Path | None = None,
    rules_path: Path | None = None,
    decode_max_tokens: int | None = None,
) -> SnapshotContent:
    """Everything `import_traces` would write, without writing it (also for reports on traces
    whose operators cannot all be retained)."""
    if not specs:
        raise AtrexError("input", "no_traces", "No trace files given.")
    rules = Rules.load(rules_path)
    catalog = Catalog(problems) if problems else Catalog()
    available = set(catalog.names()) & set(rules.operators)
    visible = {op: catalog.visible(op) for op in sorted(available)}
    templates = {op: (dict(v.smoke_shape.init), dict(v.smoke_shape.inputs)) for op, v in visible.items()}
    threshold = rules.data.decode_max_tokens if decode_max_tokens is None else decode_max_tokens
    app_shares = read_app_shares(apps_file) if apps_file else None
    apps = sorted({s.app for s in specs})
    if app_shares is None:
        app_shares = {a: 1.0 for a in apps}
    missing = [a for a in apps if a not in app_shares]
    if missing:
        raise AtrexError(
            "input",
            "app_without_share",
            f"No card-hour share for application(s) {', '.join(missing)} in {apps_file}.",
            f"Add a line `{missing[0]}: <share>` to the apps file.",
        )

    forced = None if phase == "auto" else phase
    results: list[tuple[TraceSpec, Attribution]] = []
    inputs: list[TraceInput] = []
    for spec in specs:  # one trace in memory at a time; any failure still happens before writing
        trace = load_trace(spec.path)
        result = attribute(trace, rules, templates, forced, threshold)
        results.append((spec, result))
        inputs.append(
            TraceInput(
                path=str(spec.path),
                sha256=trace.sha256,
                app=spec.app,
                device=result.device,
                device_names=trace.device_names,
                attributed_us=sum(s.us for s in result.slices),
                links=dict(result.links),
            )
        )
    devices = {r.device for _, r in results}
    if len(devices) > 1:
        cpu = [str(s.path) for s, r in results if r.device == "cpu"]
        raise AtrexError(
            "input",
            "mixed_devices",
            f"Some traces hold device activity and some are CPU-only ({', '.join(cpu)}).",
            "Import GPU traces and CPU-only traces into separate snapshots: their times are not comparable.",
        )

    times: Times = {}
    category_times: Times = {}
    category_names: dict[str, Counter[str]] = defaultdict(Counter)
    fused: dict[str, FusedKernel] = {}
    calls_by_op: dict[str, list[Call]] = defaultdict(list)
    for spec, result in results:
        per_app = times.setdefault(spec.app, {})
        for s in result.slices:
            per_phase = per_app.setdefault(s.phase, {})
            per_phase[s.op] = per_phase.get(s.op, 0.0) + s.us
            if s.op == OTHER and s.category is not None:
                per_category = category_times.setdefault(spec.app, {}).setdefault(s.phase, {})
                per_category[s.category] = per_category.get(s.category, 0.0) + s.us
                category_names[s.category][s.name or ""] += s.us  # type: ignore[assignment]  # µs in a Counter
        for call in result.calls:
            calls_by_op[call.op].append(call)
        for kernel, record in result.fused.items():
            entry = fused.setdefault(
                kernel, FusedKernel(kernel=kernel, operators=list(record.ops), launches=0, device_us=0.0)
            )
            entry.launches += record.count
            entry.device_us += record.us

    shapes: dict[str, dict[str, _ShapeAgg]] = {}
    ids: dict[str, str] = {}
    for op, calls in calls_by_op.items():
        for call in calls:
            if call.shape is None:
                continue
            sid = ids.get(call.shape.key) or ids.setdefault(call.shape.key, shape_id(call.shape))
            agg = shapes.setdefault(op, {}).setdefault(sid, _ShapeAgg(call.shape))
            agg.count += 1
            agg.device_us += call.device_us
            agg.phases |= call.phases
    retained = {op for op in shapes if op in available}
    weights = compute_weights(times, app_shares, retained)

    operators: dict[str, OperatorRecord] = {}
    mapped_ops = {op for per_app in times.values() for per_phase in per_app.values() for op in per_phase} - {OTHER}
    for op in sorted(mapped_ops | set(calls_by_op)):
        calls = calls_by_op.get(op, [])
        unresolved = [c for c in calls if c.shape is None]
        reasons = Counter(c.problem or "unknown" for c in unresolved)
        op_us: dict[str, float] = defaultdict(float)
        for per_app in times.values():
            for ph, per_op in per_app.items():
                if op in per_op:
                    op_us[ph] += per_op[op]
        ordered = sorted(shapes.get(op, {}).items(), key=lambda kv: (-kv[1].device_us, kv[0]))
        operators[op] = OperatorRecord(
            retained=op in retained,
            dropped_reason=None
            if op in retained
            else (
                f"{op} is not in the problem set {catalog.roots[-1]}"
                if op not in available
                else "no call's shape could be read from the trace"
            ),
            device_us=dict(sorted(op_us.items())),
            calls=len(calls),
            unresolved_calls=len(unresolved),
            unresolved_us=sum(c.device_us for c in unresolved),
            unresolved_reasons=dict(reasons.most_common(5)),
            shapes={
                sid: ShapeStats(
                    count=a.count, device_us=a.device_us, phases=sorted(a.phases), defaulted=list(a.shape.defaulted)
                )
                for sid, a in ordered
            },
            sources=dict(Counter(c.source for c in calls).most_common(8)),
            benchmark=rules.data.operators[op].benchmark if op in rules.data.operators else True,
        )

    manifest = Manifest(
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        tool_version=__version__,
        rules_version=rules.version,
        rules_sha256=_sha256(rules.source),
        phase_mode=phase,
        decode_max_tokens=threshold,
        token_buckets=rules.data.token_buckets.model_dump(),
        device=devices.pop(),
        inputs=inputs,
        apps=weights.app_shares,
        apps_file={"path": str(apps_file), "sha256": _sha256(apps_file)} if apps_file else None,
        problems_source=str(catalog.roots[-1]),
        unmapped_share=weights.unmapped,
        excluded_share=weights.excluded,
        unmapped_by_app_phase={a: {p: s.get(OTHER, 0.0) for p, s in per.items()} for a, per in weights.shares.items()},
        device_us_by_app_phase={a: {p: sum(v.values()) for p, v in per.items()} for a, per in times.items()},
        unmapped_by_category={
            category: UnmappedCategory(
                label=rules.category_label(category),
                share=share,
                device_us=sum(category_names[category].values()),
                top={n: us for n, us in category_names[category].most_common(5)},
            )
            for category, share in category_shares(times, category_times, weights.app_shares).items()
        },
        fused_kernels=sorted(fused.values(), key=lambda f: -f.device_us),
        stacks=rules.data.stacks,
        operators=operators,
    )
    weights_doc = {
        "source": f"atrex-mcp trace import (rules {rules.version}): Eq. 2-3 over {len(specs)} trace(s), "
        f"apps {', '.join(f'{a}={c:.4g}' for a, c in weights.app_shares.items())}",
        "raw_sum": sum(weights.raw.values()),
        "raw": weights.raw,
        "weights": weights.normalised,
    }

    files: dict[str, str] = {
        "manifest.json": manifest.model_dump_json(indent=2) + "\n",
        "weights.json": json.dumps(weights_doc, indent=2, sort_keys=True) + "\n",
    }
    for op in sorted(retained):
        v = visible[op]
        rows: list[dict[str, Any]] = [
            {"id": sid, "init": a.shape.init, "inputs": a.shape.inputs}
            for sid, a in sorted(shapes[op].items(), key=lambda kv: (-kv[1].device_us, kv[0]))
        ]
        smoke = v.smoke_shape
        rows.append({"id": smoke.id, "smoke": True, "init": smoke.init, "inputs": smoke.inputs})
        files[f"{op}/shapes.json"] = _shapes_document(op, rows)
        files[f"{op}/reference.py"] = v.reference_source
        files[f"{op}/input.py"] = v.input_source
    return SnapshotContent(manifest=manifest, weights=weights_doc, files=files)


def _write_atomically(out: Path, files: dict[str, str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; a snapshot is an ordinary directory
        for rel, text in files.items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
