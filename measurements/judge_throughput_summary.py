"""The full eager set through the output arena, from the three device calls that ran it
(c20, c21, c22): wall time per call and in all, the throughput split, what the standby saved,
and the set's time for one candidate evaluation on one H200 with the code as it is now.

    python3 measurements/judge_throughput_summary.py   -> eager_arena_throughput.{json,md}

Code per call: c20 ran 50c4b5f's evaluator (no standby; the profile's extra forward on every
shape; per_token_group_quant_fp8 8 and 9 ran out of memory, fixed in 17de0ba); c21 and c22 ran
84dd8e5 and 0d98b35 (standby, chunked input checksums, compaction; c22 also timed the checks of
timed outputs apart). c22's `rerun` judged per_token_group_quant_fp8 8 and 9 again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "bench"))

from measurements.baselines import calibration_results, throughput_split  # noqa: E402

RUNS = {"c20": ["eager"], "c21": ["eager"], "c22": ["rerun", "eager"]}
ESTIMATE_CALLS, CHECKED_TIMED_SETS = 2, 3  # sandbox.worker.time, atrex_mcp.evaluate.evaluator
SUPERSEDED = {("c20", "per_token_group_quant_fp8"): {"8", "9"}}  # judged again in c22/rerun


def shape_seconds(shape) -> float:
    return sum(v for k, v in shape.seconds.items() if k != "first_call_extra")


def judge_parts(evaluations, adopted_start: float) -> dict[str, float]:
    """The judge's own work (everything but the calls counted in calls_s) by part, on the same
    footing as one_candidate_set_s_current_code: superseded shapes, their restarts, c20's start
    beyond an adopted one and its extra profile forwards left out. In c20 and c21 the checks of
    timed outputs were not timed apart: their reference calls are taken out of the evaluation's
    remainder, and the rest of it is its own line."""
    parts = dict.fromkeys(
        (
            "worker starts",
            "correctness: the worker beyond its calls",
            "correctness: the judge beyond its reference calls (inputs, hand-over, comparison)",
            "timing: beyond the calls (flush, spin, sync, digest, no-op calls, input sets)",
            "checks of timed outputs beyond their reference calls (c22)",
            "profile: beyond its forward (first session per worker, per-kernel overhead)",
            "rest of each evaluation (c20-c21: the checks of timed outputs; bookkeeping)",
        ),
        0.0,
    )
    keys = list(parts)
    for call, r in evaluations:
        skip = SUPERSEDED.get((call, r.op), set())
        first = r is next(e for c, e in evaluations if c == call)
        parts[keys[0]] += (r.overhead.worker_start_s if first or call != "c20" else adopted_start) + (
            0.0 if skip else r.overhead.restart_s
        )
        rest = r.overhead.total_s - r.overhead.worker_start_s - r.overhead.restart_s
        for shape in r.shapes:
            rest -= shape_seconds(shape)
            if shape.id in skip or shape.time_ms is None or shape.timing is None:
                continue
            t, n, sec = shape.time_ms / 1e3, len(shape.seeds), shape.seconds
            parts[keys[1]] += sec.get("correctness", 0.0) - n * t
            parts[keys[2]] += sec.get("reference_and_compare", 0.0) - n * t
            parts[keys[3]] += (
                sec.get("timing", 0.0) - (ESTIMATE_CALLS + shape.timing.warmup_calls + shape.timing.calls) * t
            )
            if "timed_output_checks" in sec:
                parts[keys[4]] += sec["timed_output_checks"] - CHECKED_TIMED_SETS * t
            else:
                rest -= CHECKED_TIMED_SETS * t
            parts[keys[5]] += sec.get("profile", 0.0) - (2 if call == "c20" else 1) * t
        parts[keys[6]] += rest
    return parts


def main() -> int:
    rows, evaluations = [], []
    for call, dirs in RUNS.items():
        for name in dirs:
            directory = HERE / "runs" / call / name
            if not directory.is_dir():
                continue
            results = calibration_results([directory])
            run = json.loads((directory / "run.json").read_text())
            split = throughput_split(results)
            judged = sum(s.judged for r in results for s in r.shapes)
            rows.append(
                {
                    "call": call,
                    "run": name,
                    "evaluations": len(results),
                    "shapes_judged": judged,
                    "makespan_s": run["schedule"]["makespan_s"],
                    "split": split,
                }
            )
            evaluations += [(call, r) for r in results]
    wall = sum(r["makespan_s"] for r in rows)
    # Work the set would not repeat: the superseded shapes (their seconds and the restarts they caused)
    superseded_s = 0.0
    for call, r in evaluations:
        ids = SUPERSEDED.get((call, r.op), set())
        if ids:
            superseded_s += sum(shape_seconds(s) for s in r.shapes if s.id in ids) + r.overhead.restart_s
    # What c20 paid that the standby and the profile change remove: its worker starts beyond the
    # standby's (median of c21/c22's adopted starts), and one untimed forward per profiled shape
    adopted = sorted(r.overhead.worker_start_s for call, r in evaluations if r.overhead.spawned_ahead_s > 0)
    adopted_start = adopted[len(adopted) // 2] if adopted else 0.0
    c20 = [r for call, r in evaluations if call == "c20"]
    start_saved = sum(r.overhead.worker_start_s - adopted_start for r in c20) - (
        c20[0].overhead.worker_start_s - adopted_start if c20 else 0
    )
    profile_forward_s = sum(
        s.time_ms / 1e3 for r in c20 for s in r.shapes if s.time_ms is not None and "profile" in s.seconds
    )
    shapes = {(r.op, s.id) for _, r in evaluations for s in r.shapes if s.judged}
    one_set = wall - superseded_s - start_saved - profile_forward_s
    # The calls themselves (the eager reference is both the candidate and the reference): per timed
    # shape, the candidate's seeds, 2 estimates, warm-up, timed calls and one profiled forward, and
    # the reference's seeds and checked timed sets, at the shape's measured time
    calls_s = sum(
        (2 * seeds + ESTIMATE_CALLS + s.timing.warmup_calls + s.timing.calls + 1 + CHECKED_TIMED_SETS) * s.time_ms / 1e3
        for call, r in evaluations
        for s in r.shapes
        if s.time_ms is not None and s.timing is not None and s.id not in SUPERSEDED.get((call, r.op), set())
        for seeds in [len(s.seeds)]
    )
    summary = {
        "calls": rows,
        "shapes_judged_distinct": len(shapes),
        "wall_s_sum": round(wall, 1),
        "superseded_s": round(superseded_s, 1),
        "adopted_worker_start_s_median": round(adopted_start, 3),
        "c20_worker_start_beyond_standby_s": round(start_saved, 1),
        "c20_extra_profile_forwards_s": round(profile_forward_s, 1),
        "one_candidate_set_s_current_code": round(one_set, 1),
        "calls_s": round(calls_s, 1),
        "judge_overhead_s": round(one_set - calls_s, 1),
        "note": (
            "one_candidate_set_s_current_code = the calls' evaluation wall, less the superseded shapes' work, less "
            "what c20 paid that the code since removes (worker starts after the first beyond an adopted start; one "
            "untimed forward per profiled shape). Per call, the split is throughput_split over that call's "
            "evaluations."
        ),
    }
    parts = judge_parts(evaluations, adopted_start)
    parts["the runner's process and scheduling (wall less the evaluations)"] = wall - sum(
        r.overhead.total_s for _, r in evaluations
    )
    summary["judge_parts_s"] = {k: round(v, 1) for k, v in parts.items()}
    (HERE / "eager_arena_throughput.json").write_text(json.dumps(summary, indent=1))
    keys = ["start_up", "candidate_load", "compile", "correctness", "timing", "profile", "other", "total"]
    lines = [
        "# The full eager set through the output arena, one H200 (2026-12-01)",
        "",
        "| call / run | evaluations | shapes judged | wall s | " + " | ".join(keys) + " |",
        "|---|---|---|---|" + "---|" * len(keys),
    ]
    for r in rows:
        lines.append(
            f"| {r['call']}/{r['run']} | {r['evaluations']} | {r['shapes_judged']} | {r['makespan_s']:.1f} | "
            + " | ".join(f"{r['split'][k]:.1f}" for k in keys)
            + " |"
        )
    totals = {k: sum(r["split"][k] for r in rows) for k in keys}
    lines.append(
        f"| **all** | {sum(r['evaluations'] for r in rows)} | {sum(r['shapes_judged'] for r in rows)} | "
        f"**{wall:.1f}** | " + " | ".join(f"{totals[k]:.1f}" for k in keys) + " |"
    )
    lines += [
        "",
        f"Distinct shapes judged: {len(shapes)}.",
        "",
        f"* superseded work (per_token_group_quant_fp8 8 and 9 in c20, with their restarts): {superseded_s:.1f} s",
        f"* c20's worker starts beyond an adopted start ({adopted_start:.2f} s, median of c21/c22): "
        f"{start_saved:.1f} s",
        f"* c20's untimed forward before each profiled shape: {profile_forward_s:.1f} s",
        f"* **one candidate set (the eager reference) with the code as it is now: {one_set:.0f} s "
        f"({one_set / 60:.1f} min)**",
        f"* of which the calls themselves (eager as candidate and as reference, at their measured times): "
        f"{calls_s:.0f} s;"
        f" the judge's own work: {one_set - calls_s:.0f} s, by part:",
        "",
        "| part | s |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v:.1f} |" for k, v in summary["judge_parts_s"].items()] + [""]
    (HERE / "eager_arena_throughput.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
