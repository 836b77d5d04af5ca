"""Stamp the wiki's reference kernels from a `bench eval` run in which they were judged as one
candidate set: the run's results, read with agentbench's loaders, become the wiki stamp's
`Measured` items (atrex_mcp.wiki.stamp_inputs), which atrex_mcp.wiki.stamp checks and writes.

    python3 -m atrex_mcp.agentbench.wiki_stamp RUN_DIR [--ops fused_moe,rms_norm] [--kernels DIR]

An operator is stamped only when its judged submission is the wiki kernel (the same text, bar
the stamped table and line), judged on an H200 against the h200 profile with the run's seeds;
another is refused with its reason and left untouched. Exit status as atrex_mcp.wiki.stamp.
"""

from __future__ import annotations

import hashlib
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atrex_mcp.agentbench.evaluation import SETTINGS_FILE, StoredSettings, result_path
from atrex_mcp.agentbench.layout import RunLayout, RunStore
from atrex_mcp.agentbench.models import RunConfig
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import scoring
from atrex_mcp.evaluate.models import EvalResult
from atrex_mcp.wiki.stamp import run_command
from atrex_mcp.wiki.stamp_inputs import Inputs, Measured, selected

PROFILE = "h200"


def _settings(layout: RunLayout) -> StoredSettings:
    path = layout.eval_dir / SETTINGS_FILE
    try:
        return StoredSettings.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise AtrexError(
            "input",
            "not_evaluated",
            f"{layout.root} has no {path.relative_to(layout.root)}: it was never judged.",
            f"Run `atrex-mcp bench eval {layout.root}` first.",
        ) from None
    except (ValidationError, ValueError) as exc:
        raise AtrexError("input", "bad_eval_settings", f"{path} is not valid eval settings: {exc}") from None


def _entry(result: EvalResult) -> dict[str, Any]:
    judged = [s for s in result.shapes if s.judged]
    times = [s.time_ms for s in judged if s.correct and s.time_ms is not None]
    shares = [s.dsl_share for s in judged if s.dsl_share is not None]
    return {
        "operator": result.op,
        "shapes": [
            {"id": s.id, "correct": s.correct, "time_ms": s.time_ms, "stage": s.stage, "category": s.category}
            for s in judged
        ],
        "shapes_correct": sum(s.correct for s in judged),
        "operator_score": result.operator_score,
        "median_time_ms": statistics.median(times) if times else None,
        "median_dsl_share": statistics.median(shares) if shares else None,
    }


def _judgement(config: RunConfig, settings: StoredSettings, wiki_ops: set[str]) -> tuple[str, str]:
    """(label, source): the wiki set judged as one candidate set, with how many seeds."""
    whole = wiki_ops <= set(config.ops)
    label = f"{'full-set' if whole else f'{len(config.ops)}-kernel set'} bench eval, {settings.seeds} seeds"
    what = "the full wiki kernel set" if whole else "a set of wiki kernels"
    source = (
        f"bench eval of run '{config.name}': {what} ({len(config.ops)} operators) judged as one "
        f"candidate set, {settings.seeds} seeds per shape, shapes '{settings.shapes}'"
    )
    return label, source


def _refusal(result: EvalResult, op: str, settings: StoredSettings) -> str | None:
    """Why a result cannot stand as this kernel's H200 figures (None when it can)."""
    if result.op != op or result.candidate != "candidate":
        return f"eval/{op}.json holds {result.candidate} {result.op}, not the candidate for {op}"
    if result.device.kind != "cuda":
        return "judged on the CPU (nothing timed); the [h200] table holds GPU figures"
    mismatch = scoring.profile_mismatch(PROFILE, result.device.name)
    if mismatch:
        return f"judged on {result.device.name!r}, not an H200"
    if scoring.profile_family(result.hardware) != PROFILE:
        return f"scored against profile {result.hardware!r}, not {PROFILE}"
    if not any(s.judged for s in result.shapes):
        return f"no shape was judged ({result.partial or 'empty result'})"
    drawn = {len(s.seeds) for s in result.shapes if s.correct}
    if drawn - {settings.seeds}:
        return f"its correct shapes drew {sorted(drawn)} seeds, not the {settings.seeds} of eval/{SETTINGS_FILE}"
    return None


def from_run(run_dir: Path, kernels_dir: Path, only: list[str] | None = None) -> Inputs:
    """The operators of a bench eval run that have an evaluation result. Each is kept with the
    submission text it judged (whose sha256 must be the result's), for the stamp to compare with
    the wiki kernel; what cannot stand is refused with its reason."""
    layout = RunLayout(run_dir)
    store = RunStore(layout)
    config = store.load_config()
    settings = _settings(layout)
    wiki_ops = {p.stem for p in kernels_dir.glob("*.py") if not p.name.startswith("_")}
    label, source = _judgement(config, settings, wiki_ops)
    out = Inputs()
    for op in selected(config.ops, only, f"run {layout.root}"):
        path = result_path(layout, op)
        if not path.is_file():
            if only is None:
                out.not_judged.append(op)
            else:
                out.refused[op] = f"no eval/{op}.json: not judged in this run"
            continue
        try:
            result = EvalResult.model_validate_json(path.read_text())
        except (OSError, ValidationError, ValueError):
            out.refused[op] = f"eval/{op}.json is not a valid evaluation result"
            continue
        reason = _refusal(result, op, settings)
        submission = store.load_state(op).submission
        if reason is None and (submission is None or submission.artifact is None):
            reason = "the run holds no collected submission for it"
        if reason is None:
            assert submission is not None and submission.artifact is not None
            try:
                text = (layout.root / submission.artifact).read_text()
            except (OSError, UnicodeDecodeError):
                out.refused[op] = f"its submission {submission.artifact} cannot be read"
                continue
            sha = hashlib.sha256(text.encode()).hexdigest()
            if sha != result.candidate_sha256:
                reason = (
                    f"eval/{op}.json judged sha256 {result.candidate_sha256[:12]}, not the collected submission "
                    f"({sha[:12]}); re-run bench eval"
                )
        if reason is not None:
            out.refused[op] = reason
            continue
        meta = {
            "date": datetime.fromisoformat(result.started_at).date().isoformat(),
            "gpu": result.device.name,
            "versions": result.device.versions,
            "seeds": settings.seeds,
            "label": label,
            "source": source,
        }
        claims_all = settings.shapes == "all" and result.partial is None
        out.measured.append(Measured(op, _entry(result), meta, claims_all, judged_source=text))
    return out


def read_run(run_dir: Path, kernels_dir: Path, only: list[str] | None) -> Inputs:
    """This command's input: a bench eval run directory."""
    if not run_dir.is_dir():
        raise AtrexError(
            "input",
            "not_a_run",
            f"{run_dir} is not a directory.",
            "Pass the directory of a bench run that bench eval judged.",
        )
    return from_run(run_dir, kernels_dir, only)


def main(argv: list[str] | None = None) -> int:
    return run_command(argv, __doc__.split("\n")[0], "a bench eval run directory (RUN_DIR)", read_run)


if __name__ == "__main__":
    sys.exit(main())
