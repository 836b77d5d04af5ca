"""What the wiki stamp reads, converted to one structure: a measurements/wiki_kernels_gpu.py report
here, or a `bench eval` run directory in which the wiki kernels were judged as one candidate set
(atrex_mcp.agentbench.wiki_stamp, which reads runs with agentbench's loaders).

Both become `Measured` items (one per kernel: the measured entry, the conditions, whether the
input claims every scored shape, and for a run the text that was judged) that
atrex_mcp.wiki.stamp checks and writes the same way. Only ids, correctness, failure stage and
category, and times are carried over: never a per-shape score or speed-of-light figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atrex_mcp.errors import AtrexError


@dataclass(frozen=True)
class Measured:
    """One kernel's figures as the stamp consumes them.

    entry: operator, shapes (id, correct, time_ms, stage, category), shapes_correct,
    operator_score, median_time_ms, median_dsl_share. meta: date, gpu, versions, and where known
    seeds, label (short, for validated_shapes) and source (for the [h200] table)."""

    name: str
    entry: dict[str, Any]
    meta: dict[str, Any]
    claims_all: bool
    judged_source: str | None = None  # the text a run judged; the kernel must be it (bar the stamped figures)


@dataclass
class Inputs:
    measured: list[Measured] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # name -> one-line reason
    not_judged: list[str] = field(default_factory=list)
    stamped: list[str] = field(default_factory=list)


def selected(names: list[str], only: list[str] | None, where: str) -> list[str]:
    if only is None:
        return names
    unknown = [n for n in only if n not in names]
    if unknown:
        raise AtrexError(
            "input",
            "unknown_kernel",
            f"--ops names {', '.join(unknown)}, which {where} does not hold.",
            f"Choose among: {', '.join(names)}.",
        )
    return [n for n in names if n in only]


def from_report(path: Path, only: list[str] | None = None) -> Inputs:
    """A report of measurements/wiki_kernels_gpu.py (its kernels that ran without a harness error)."""
    try:
        report = json.loads(path.read_text())
        meta, kernels = report["meta"], report["kernels"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AtrexError(
            "input",
            "bad_wiki_report",
            f"{path} is not a wiki_kernels_gpu.py report: {exc}",
            "Pass the JSON that measurements/wiki_kernels_gpu.py wrote, or a bench eval run directory.",
        ) from None
    claims_all = meta.get("shapes", "all scored") == "all scored"
    seeds = meta.get("seeds")
    conditions = {
        **meta,
        "label": f"{seeds} seeds" if seeds else None,
        "source": "measurements/wiki_kernels_gpu.py" + (f", {seeds} seeds per shape" if seeds else ""),
    }
    out = Inputs()
    for name in selected(sorted(kernels), only, str(path)):
        entry = kernels[name]
        if "error" not in entry and entry.get("shapes"):
            out.measured.append(Measured(name, entry, conditions, claims_all))
    return out
