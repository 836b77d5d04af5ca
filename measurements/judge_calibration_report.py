#!/usr/bin/env python3
"""One summary (markdown + JSON) of what measurements/judge_calibration_gpu.sh measured, read from its work
directory; every part that is missing says so instead of disappearing.

    python3 measurements/judge_calibration_report.py WORK_DIR  # writes WORK_DIR/summary.{md,json}, prints the markdown
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

RUNS = {"eager (A)": "eager/a", "eager (B)": "eager/b", "torch-compile (A)": "tc/a", "torch-compile (B)": "tc/b"}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _fmt(value: Any, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def summarize(work: Path) -> tuple[dict[str, Any], str]:
    summary: dict[str, Any] = {"steps": [], "runs": {}}
    md: list[str] = ["# Baselines and judge calibration on the GPU: summary", ""]
    steps = _text(work / "steps.tsv") or ""
    summary["steps"] = [
        dict(zip(("step", "status", "seconds"), line.split("\t"))) for line in steps.splitlines() if line
    ]
    env = _text(work / "env.txt")
    md += [
        "## Conditions",
        "",
        "```",
        (env or "env.txt missing").strip(),
        "```",
        "",
        "| step | status | s |",
        "|---|---|---|",
    ]
    md += [f"| {s.get('step')} | {s.get('status')} | {s.get('seconds')} |" for s in summary["steps"]]

    floor = _json(work / "launch_floor.json")
    summary["launch_floor"] = floor and {k: v for k, v in floor.items() if k != "below_floor"}
    md += ["", "## Launch floor", ""]
    if floor and floor.get("floor_ms") is not None:
        md.append(
            f"T_floor = {floor['floor_ms'] * 1e3:.2f} µs ({floor.get('floor_case')}); sync gap "
            f"{floor['sync_gap_ms'] * 1e3:.2f} µs; host synchronize {floor.get('host_sync_us', 0):.1f} µs"
        )
        md += [
            "",
            "| case | median µs | p10 µs | p90 µs | host µs/launch | GPU µs/launch back to back |",
            "|---|---|---|---|---|---|",
        ]
        for name, c in floor["cases"].items():
            md.append(
                f"| {name} | {c['median_ms'] * 1e3:.2f} | {c['p10_ms'] * 1e3:.2f} | {c['p90_ms'] * 1e3:.2f} | "
                f"{_fmt(c.get('host_launch_us'), 2)} | {_fmt(c.get('gpu_back_to_back_us'), 2)} |"
            )
        below = floor.get("below_floor") or {}
        md.append(
            "\nShapes with T_SOL below the floor: "
            + ", ".join(
                f"{p} {sum(c[p] for c in below.values())}/{sum(c['shapes'] for c in below.values())}"
                for p in ("h200", "h200-measured")
            )
        )
    else:
        md.append(f"not measured: {(floor or {}).get('note', 'launch_floor.json missing')}")
    floor_scores = _text(work / "floor_scores.md")
    if floor_scores:
        md += ["", "### S beside S_floor (subset)", "", floor_scores]

    accuracy = _json(work / "timing_accuracy.json")
    summary["timing_accuracy"] = accuracy and {k: v for k, v in accuracy.items() if k != "ncu_output_tail"}
    md += ["", "## Timing accuracy (evaluator vs ncu gpu__time_duration)", ""]
    if accuracy and accuracy.get("cases") and any(accuracy["cases"].values()):
        from measurements.timing_accuracy import render

        md += [render(accuracy), f"Above 20 µs: {accuracy.get('above_20us')}"]
    else:
        md.append(f"not measured: {(accuracy or {}).get('note', 'timing_accuracy.json missing')}")

    md += ["", "## Baselines on the subset (not the published 440-shape figures)", ""]
    for label, sub in RUNS.items():
        run = _json(work / sub / "run.json")
        if run is None:
            md.append(f"- {label}: not run")
            continue
        shapes = sum(len(v) for v in run["selection"].values())
        summary["runs"][label] = {
            k: run.get(k) for k in ("s_agg", "throughput", "predicted_s", "cost_model", "near_roofline")
        }
        summary["runs"][label].update(
            wall_s=run["schedule"]["makespan_s"],
            shapes=shapes,
            not_run=len(run["not_run"]),
            conditions=run.get("conditions"),
        )
        md.append(
            f"- {label}: {shapes} shapes selected, {len(run['not_run'])} not run, wall "
            f"{run['schedule']['makespan_s']} s (predicted {run['predicted_s']} s); S_agg {run['s_agg']}; throughput "
            f"split {run['throughput']}"
        )
    for profile in ("h200", "h200-measured"):
        table = _text(work / f"table_{profile}.md")
        if table:
            md += ["", f"### Main table, `{profile}`", "", table]
    near = (_json(work / "table_summary.json") or {}).get("near_roofline")
    summary["near_roofline"] = near
    md += ["", "### Shapes with S > 0.9 against `h200` (item 4)", ""]
    md += (
        [
            f"- {r['op']} {r['candidate']} shape {r['shape']}: S {r['score']}, {r['bound']}-bound, intensity "
            f"{_fmt(r['arithmetic_intensity'], 1)}"
            for r in near
        ]
        if near
        else ["none" if near == [] else "not computed"]
    )

    from measurements.stability import render as render_stability

    summary["stability"] = {}
    for name, label in (("tc", "torch.compile"), ("eager", "eager")):
        stability = _json(work / name / "stability.json")
        if stability:
            summary["stability"][label] = {k: v for k, v in stability.items() if k != "ratios"}
            md += ["", f"## Stability ({label} twice, separate processes)", "", render_stability(stability)]
    if not summary["stability"]:
        md += ["", "## Stability", "", "not run"]

    plan = _text(work / "plan_calibrated.txt")
    md += [
        "",
        "## Cost model calibrated on this run, and the full issue predicted",
        "",
        "```",
        (plan or "not computed").strip(),
        "```",
    ]
    return summary, "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work", type=Path, help="measurements/judge_calibration_gpu.sh's work directory")
    work = parser.parse_args(argv).work
    if not work.is_dir():
        parser.error(f"{work} is not a directory")
    summary, markdown = summarize(work)
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    (work / "summary.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
