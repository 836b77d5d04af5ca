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
from atrex_mcp.problemset.catalog import Catalog, VisibleProblem
from atrex_mcp.trace.attribution import Attribution, Call, attribute
from atrex_mcp.trace.events import load_trace
from atrex_mcp.trace.models import FusedKernel, Manifest, OperatorRecord, ShapeStats, TraceInput, UnmappedCategory
from atrex_mcp.trace.rules import OTHER, ResolvedShape, Rules
from atrex_mcp.trace.weights import Times, Weights, category_shares, compute_weights, read_app_shares

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
    app_shares = _app_shares(specs, apps_file)
    forced = None if phase == "auto" else phase
    results, inputs = _attribute_traces(specs, rules, templates, forced, threshold)
    device = _single_device(results)
    tally = _Tally.of(results)
    shapes = _shape_aggregates(tally.calls_by_op)
    retained = {op for op in shapes if op in available}
    weights = compute_weights(tally.times, app_shares, retained)
    context = _OperatorContext(rules, tally, shapes, retained, available, str(catalog.roots[-1]))
    manifest = Manifest(
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        tool_version=__version__,
        rules_version=rules.version,
        rules_sha256=_sha256(rules.source),
        phase_mode=phase,
        decode_max_tokens=threshold,
        token_buckets=rules.data.token_buckets.model_dump(),
        device=device,
        inputs=inputs,
        apps=weights.app_shares,
        apps_file={"path": str(apps_file), "sha256": _sha256(apps_file)} if apps_file else None,
        problems_source=str(catalog.roots[-1]),
        unmapped_share=weights.unmapped,
        excluded_share=weights.excluded,
        unmapped_by_app_phase={a: {p: s.get(OTHER, 0.0) for p, s in per.items()} for a, per in weights.shares.items()},
        device_us_by_app_phase={a: {p: sum(v.values()) for p, v in per.items()} for a, per in tally.times.items()},
        unmapped_by_category=_unmapped_by_category(rules, tally, weights.app_shares),
        fused_kernels=sorted(tally.fused.values(), key=lambda f: -f.device_us),
        stacks=rules.data.stacks,
        operators=_operator_records(context),
    )
    weights_doc = _weights_document(rules, len(specs), weights)
    files = _snapshot_files(manifest, weights_doc, visible, shapes, retained)
    return SnapshotContent(manifest=manifest, weights=weights_doc, files=files)


def _weights_document(rules: Rules, traces: int, weights: Weights) -> dict[str, Any]:
    """weights.json: the normalised weights, the raw ones, and where they came from."""
    return {
        "source": f"atrex-mcp trace import (rules {rules.version}): Eq. 2-3 over {traces} trace(s), "
        f"apps {', '.join(f'{a}={c:.4g}' for a, c in weights.app_shares.items())}",
        "raw_sum": sum(weights.raw.values()),
        "raw": weights.raw,
        "weights": weights.normalised,
    }


def _app_shares(specs: list[TraceSpec], apps_file: Path | None) -> dict[str, float]:
    """Each application's card-hour share: from the apps file, else equal; every traced
    application needs one, since the weights are averaged over applications by it."""
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
    return app_shares


def _attribute_traces(
    specs: list[TraceSpec],
    rules: Rules,
    templates: dict[str, tuple[dict[str, Any], dict[str, Any]]],
    forced: str | None,
    threshold: int,
) -> tuple[list[tuple[TraceSpec, Attribution]], list[TraceInput]]:
    """Attribute each trace, keeping only its attribution and its manifest entry: one trace is in
    memory at a time, and any failure still happens before anything is written."""
    results: list[tuple[TraceSpec, Attribution]] = []
    inputs: list[TraceInput] = []
    for spec in specs:
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
    return results, inputs


def _single_device(results: list[tuple[TraceSpec, Attribution]]) -> Literal["gpu", "cpu"]:
    """The one kind of time all traces measured: device time and CPU self time do not mix."""
    devices = {r.device for _, r in results}
    if len(devices) > 1:
        cpu = [str(s.path) for s, r in results if r.device == "cpu"]
        raise AtrexError(
            "input",
            "mixed_devices",
            f"Some traces hold device activity and some are CPU-only ({', '.join(cpu)}).",
            "Import GPU traces and CPU-only traces into separate snapshots: their times are not comparable.",
        )
    return devices.pop()


@dataclass
class _Tally:
    """All traces' attributed time summed per application, phase and operator (and per category
    of unmapped time), with the calls per operator and the fused kernels."""

    times: Times = field(default_factory=dict)
    category_times: Times = field(default_factory=dict)
    category_names: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    fused: dict[str, FusedKernel] = field(default_factory=dict)
    calls_by_op: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, results: list[tuple[TraceSpec, Attribution]]) -> _Tally:
        tally = cls()
        for spec, result in results:
            tally._add_slices(spec.app, result)
            for call in result.calls:
                tally.calls_by_op[call.op].append(call)
            for kernel, record in result.fused.items():
                entry = tally.fused.setdefault(
                    kernel, FusedKernel(kernel=kernel, operators=list(record.ops), launches=0, device_us=0.0)
                )
                entry.launches += record.count
                entry.device_us += record.us
        return tally

    def _add_slices(self, app: str, result: Attribution) -> None:
        per_app = self.times.setdefault(app, {})
        for s in result.slices:
            per_phase = per_app.setdefault(s.phase, {})
            per_phase[s.op] = per_phase.get(s.op, 0.0) + s.us
            if s.op == OTHER and s.category is not None:
                per_category = self.category_times.setdefault(app, {}).setdefault(s.phase, {})
                per_category[s.category] = per_category.get(s.category, 0.0) + s.us
                self.category_names[s.category][s.name or ""] += s.us  # type: ignore[assignment]  # µs in a Counter


def _shape_aggregates(calls_by_op: dict[str, list[Call]]) -> dict[str, dict[str, _ShapeAgg]]:
    """Per operator, its calls with a readable shape grouped by shape id (count, time, phases)."""
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
    return shapes


def _by_time(shapes: dict[str, _ShapeAgg]) -> list[tuple[str, _ShapeAgg]]:
    """Shapes by descending device time, then id: the order of the manifest and of shapes.json."""
    return sorted(shapes.items(), key=lambda kv: (-kv[1].device_us, kv[0]))


def _unmapped_by_category(rules: Rules, tally: _Tally, app_shares: dict[str, float]) -> dict[str, UnmappedCategory]:
    """What the unmapped time is made of, by category, with each category's costliest names."""
    return {
        category: UnmappedCategory(
            label=rules.category_label(category),
            share=share,
            device_us=sum(tally.category_names[category].values()),
            top={n: us for n, us in tally.category_names[category].most_common(5)},
        )
        for category, share in category_shares(tally.times, tally.category_times, app_shares).items()
    }


@dataclass(frozen=True)
class _OperatorContext:
    """What an operator's manifest record is drawn from."""

    rules: Rules
    tally: _Tally
    shapes: dict[str, dict[str, _ShapeAgg]]
    retained: set[str]
    available: set[str]
    problems_source: str


def _operator_records(context: _OperatorContext) -> dict[str, OperatorRecord]:
    """A record for every operator that got time or calls, retained or not, so a reader sees
    what was dropped and why."""
    times = context.tally.times
    mapped_ops = {op for per_app in times.values() for per_phase in per_app.values() for op in per_phase} - {OTHER}
    return {op: _operator_record(op, context) for op in sorted(mapped_ops | set(context.tally.calls_by_op))}


def _operator_record(op: str, context: _OperatorContext) -> OperatorRecord:
    """One operator's calls, device time per phase, shapes, and why it was dropped if it was."""
    calls = context.tally.calls_by_op.get(op, [])
    unresolved = [c for c in calls if c.shape is None]
    reasons = Counter(c.problem or "unknown" for c in unresolved)
    op_us: dict[str, float] = defaultdict(float)
    for per_app in context.tally.times.values():
        for ph, per_op in per_app.items():
            if op in per_op:
                op_us[ph] += per_op[op]
    retained = op in context.retained
    if retained:
        dropped_reason = None
    elif op not in context.available:
        dropped_reason = f"{op} is not in the problem set {context.problems_source}"
    else:
        dropped_reason = "no call's shape could be read from the trace"
    operators = context.rules.data.operators
    return OperatorRecord(
        retained=retained,
        dropped_reason=dropped_reason,
        device_us=dict(sorted(op_us.items())),
        calls=len(calls),
        unresolved_calls=len(unresolved),
        unresolved_us=sum(c.device_us for c in unresolved),
        unresolved_reasons=dict(reasons.most_common(5)),
        shapes={
            sid: ShapeStats(
                count=a.count, device_us=a.device_us, phases=sorted(a.phases), defaulted=list(a.shape.defaulted)
            )
            for sid, a in _by_time(context.shapes.get(op, {}))
        },
        sources=dict(Counter(c.source for c in calls).most_common(8)),
        benchmark=operators[op].benchmark if op in operators else True,
    )


def _snapshot_files(
    manifest: Manifest,
    weights_doc: dict[str, Any],
    visible: dict[str, VisibleProblem],
    shapes: dict[str, dict[str, _ShapeAgg]],
    retained: set[str],
) -> dict[str, str]:
    """Every file's text: the evaluator-only manifest and weights, and per retained operator its
    visible files with the traced shapes plus the shipped smoke shape."""
    files: dict[str, str] = {
        "manifest.json": manifest.model_dump_json(indent=2) + "\n",
        "weights.json": json.dumps(weights_doc, indent=2, sort_keys=True) + "\n",
    }
    for op in sorted(retained):
        v = visible[op]
        rows: list[dict[str, Any]] = [
            {"id": sid, "init": a.shape.init, "inputs": a.shape.inputs} for sid, a in _by_time(shapes[op])
        ]
        smoke = v.smoke_shape
        rows.append({"id": smoke.id, "smoke": True, "init": smoke.init, "inputs": smoke.inputs})
        files[f"{op}/shapes.json"] = _shapes_document(op, rows)
        files[f"{op}/reference.py"] = v.reference_source
        files[f"{op}/input.py"] = v.input_source
    return files


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
