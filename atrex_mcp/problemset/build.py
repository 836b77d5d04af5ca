"""Build the hidden files of the shipped problem set from the operator-set source
(../shared/atrex-ops: shapes/<op>.json, weights.json) and the visible files the reference
authors wrote:

  problems/<op>/metadata.json   dtype, phase, weights, output kinds, per-shape description and
                                production timings, deviations (the op's CHANGES.md section)
  problems/<op>/roofline.json   closed-form W/Q (atrex_mcp.problemset.formulas) per scored shape,
                                T_SOL and bound on every hardware profile
  problems/weights.json         raw importance weights and their normalisation to sum 1

The visible shapes.json is cross-checked against the source: same scored ids in the same order
with the same init and inputs, plus one smoke shape. Re-runnable; output is deterministic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atrex_mcp.errors import AtrexError
from atrex_mcp.paths import REPO_ROOT, problems_dir
from atrex_mcp.problemset import formulas as workload_formulas
from atrex_mcp.problemset.catalog import WEIGHTS_FILE, Catalog, VisibleProblem
from atrex_mcp.problemset.files import PRODUCTION_NOTE, describe_output, roofline_document, run_reference, write_json
from atrex_mcp.problemset.hardware import load_all_profiles
from atrex_mcp.problemset.roofline import shape_record

DEFAULT_SOURCE = REPO_ROOT.parent / "shared" / "atrex-ops"
CHANGES_FILE = "CHANGES.md"
COUNTING = "closed-form SPEC §3 (atrex_mcp.problemset.formulas; conventions in docs/roofline.md)"


@dataclass
class BuildReport:
    """What a build did: operators built, source operators without a folder, failures."""

    built: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _read_source(source: Path) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    shapes_dir = source / "shapes"
    if not shapes_dir.is_dir() or not (source / "weights.json").is_file():
        raise AtrexError(
            "input",
            "bad_source",
            f"{source} has no shapes/ folder or weights.json.",
            "Pass --source pointing at the atrex-ops operator set.",
        )
    shared = {p.stem: json.loads(p.read_text()) for p in sorted(shapes_dir.glob("*.json"))}
    return shared, json.loads((source / "weights.json").read_text())


def weights_document(raw: dict[str, float], source: Path) -> dict[str, Any]:
    total = sum(raw.values())
    return {
        "source": f"{source.name}/weights.json: the original importance_score per operator (trace-derived share of "
        "GPU time)",
        "raw_sum": round(total, 6),
        "raw": dict(raw),
        "weights": {op: w / total for op, w in raw.items()},
    }


def changes_sections(path: Path) -> dict[str, list[str]]:
    """`## <op>` sections of CHANGES.md, each as a list of paragraphs (lines joined)."""
    if not path.is_file():
        return {}
    sections: dict[str, list[str]] = {}
    for block in re.split(r"^## ", path.read_text(), flags=re.MULTILINE)[1:]:
        title, _, body = block.partition("\n")
        paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in re.split(r"\n\s*\n", body)]
        sections[title.strip()] = [p for p in paragraphs if p]
    return sections


def cross_check(visible: VisibleProblem, shared: dict[str, Any]) -> None:
    """The visible scored shapes must be the source's, id for id; exactly one smoke shape."""
    ours = [(s.id, s.init, s.inputs) for s in visible.scored_shapes]
    theirs = [(str(s["id"]), dict(s.get("init") or {}), dict(s["inputs"])) for s in shared["shapes"]]
    if [o[0] for o in ours] != [t[0] for t in theirs]:
        raise AtrexError(
            "input",
            "shape_mismatch",
            f"{visible.name}: scored shape ids {[o[0] for o in ours]} differ from the source's "
            f"{[t[0] for t in theirs]}.",
        )
    for (sid, init, inputs), (_, s_init, s_inputs) in zip(ours, theirs):
        if init != s_init or inputs != s_inputs:
            raise AtrexError(
                "input",
                "shape_mismatch",
                f"{visible.name} shape {sid}: init/inputs {init}/{inputs} differ from the source's "
                f"{s_init}/{s_inputs}.",
            )
    smoke = [s.id for s in visible.shapes if s.smoke]
    if len(smoke) != 1:
        raise AtrexError(
            "input", "bad_smoke_shape", f"{visible.name}: expected exactly one smoke shape, found {smoke}."
        )


def operator_roofline(op: str, visible: VisibleProblem) -> dict[str, Any]:
    """roofline.json of a shipped operator: the closed forms per scored shape, SPEC's figure beside ours where
    they differ."""
    profiles = load_all_profiles()
    workloads, extra = {}, {}
    for shape in visible.scored_shapes:
        workloads[shape.id] = workload_formulas.workload(op, shape.init, shape.inputs)
        spec = workload_formulas.spec_figure(op, shape.id, shape.init, shape.inputs)
        if spec is not None:
            extra[shape.id] = {"spec_figure": shape_record(spec, profiles)}
    return roofline_document(op, COUNTING, workloads, note=workload_formulas.NOTES.get(op, ""), extra=extra)


def build_operator(
    catalog: Catalog, op: str, shared: dict[str, Any], weights: dict[str, Any], deviations: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """metadata.json and roofline.json of one shipped operator."""
    visible = catalog.visible(op)
    cross_check(visible, shared)
    output = describe_output(run_reference(catalog, op, visible.smoke_shape))
    metadata = {
        "op": op,
        "dtype": shared["dtype"],
        "phase": shared["phase"],
        "weight_raw": weights["raw"][op],
        "weight": weights["weights"][op],
        "output": output,
        "shapes": {
            str(s["id"]): {"description": s["note"], "production_us": s["production_us"]} for s in shared["shapes"]
        },
        "production_note": PRODUCTION_NOTE,
        "deviations": deviations,
    }
    return metadata, operator_roofline(op, visible)


def build(root: Path | None = None, source: Path = DEFAULT_SOURCE, ops: list[str] | None = None) -> BuildReport:
    """Write weights.json and the hidden files of every (or each named) operator that has a folder."""
    root = Path(root or problems_dir())
    shared, raw_weights = _read_source(Path(source))
    weights = weights_document(raw_weights, Path(source))
    write_json(root / WEIGHTS_FILE, weights)
    catalog = Catalog(root)
    sections = changes_sections(root / CHANGES_FILE)
    report = BuildReport()
    for op in sorted(ops or shared):
        if op not in shared:
            report.errors[op] = "not an operator of the source set"
            continue
        if op not in catalog.names():
            report.missing.append(op)
            continue
        if op not in sections:
            report.warnings.append(f"{op}: no '## {op}' section in {CHANGES_FILE}; deviations left empty")
        try:
            metadata, roofline = build_operator(catalog, op, shared[op], weights, sections.get(op, []))
        except AtrexError as exc:
            report.errors[op] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - a broken reference is reported, the others still build
            report.errors[op] = f"reference failed at the smoke shape: {type(exc).__name__}: {exc}"
            continue
        write_json(catalog.problem_dir(op) / "metadata.json", metadata)
        write_json(catalog.problem_dir(op) / "roofline.json", roofline)
        report.built.append(op)
    return report
