#!/usr/bin/env python3
"""torch.compile's S_agg from a sample of each operator's shapes, with the sample's own error
measured on eager, whose full 440-shape result is known.

    python3 measurements/compile_estimate.py --eager DIR --compiled DIR [--out PREFIX]

Per profile and operator: S_i of torch.compile over its judged sample; S_i of eager over the
same shapes and over all its shapes. S_agg of torch.compile is given twice: operators with no
judged shape counted as 0 (a lower bound) and over the weight of the operators that have one
(renormalised). The same two figures for eager, from the sample, next to eager's full S_agg,
show how far the sample alone moves the headline. Per shape, the eager → torch.compile speed-up.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

PROFILES = ("h200", "h200-measured")


def _by_op(directory: Path) -> dict[str, Any]:
    from atrex_mcp.evaluate.table import load_results

    return {r.op: r for r in load_results(directory)}


def _s_i(result, catalog, profile: str, ids: set[str] | None = None) -> float | None:
    """S_i as the main table scores it (over the judged shapes; None when none was judged),
    of the shapes `ids` only when given."""
    from atrex_mcp.evaluate.table import operator_row

    if ids is not None:
        result = result.model_copy(update={"shapes": [s for s in result.shapes if s.id in ids]})
    return operator_row(result, catalog, profile, None, None).score


def _aggregates(scores: dict[str, float | None], weights: dict[str, float]) -> dict[str, float | None]:
    """S_agg (`scoring.aggregate`) with unmeasured operators as 0, and over the measured ones' weight alone."""
    from atrex_mcp.evaluate import scoring

    measured = {op: s for op, s in scores.items() if s is not None}
    measured_weights = {op: weights[op] for op in measured}
    return {
        "lower_bound": scoring.aggregate(measured, weights)[0],
        "renormalised": scoring.aggregate(measured, measured_weights)[0],
        "weight_measured": sum(measured_weights.values()) / sum(weights.values()),
    }


def estimate(eager_dir: Path, compiled_dir: Path) -> dict[str, Any]:
    from atrex_mcp.problemset.catalog import Catalog

    catalog = Catalog()
    weights = catalog.weights()
    eager, compiled = _by_op(eager_dir), _by_op(compiled_dir)
    report: dict[str, Any] = {"profiles": {}, "speedup": {}, "failures": []}
    speedups = []
    for op in sorted(weights):
        e = {s.id: s for s in eager[op].shapes} if op in eager else {}
        sample = [s for s in compiled[op].shapes if s.judged] if op in compiled else []
        report["failures"] += [
            {"op": op, "shape": s.id, "stage": s.stage, "category": s.category, "message": s.message[:300]}
            for s in sample
            if not s.correct
        ]
        for s in sample:
            if s.correct and s.time_ms and e.get(s.id) and e[s.id].time_ms:
                speedups.append(e[s.id].time_ms / s.time_ms)
    for profile in PROFILES:
        rows = {}
        for op in sorted(weights):
            sample_ids = {s.id for s in compiled[op].shapes if s.judged} if op in compiled else set()
            rows[op] = {
                "weight": weights[op],
                "sample": len(sample_ids),
                "torch_compile": _s_i(compiled[op], catalog, profile) if op in compiled else None,
                "eager_sample": _s_i(eager[op], catalog, profile, sample_ids) if sample_ids and op in eager else None,
                "eager_full": _s_i(eager[op], catalog, profile) if op in eager else None,
            }
        report["profiles"][profile] = {
            "operators": rows,
            "torch_compile": _aggregates({op: r["torch_compile"] for op, r in rows.items()}, weights),
            "eager_sample": _aggregates({op: r["eager_sample"] for op, r in rows.items()}, weights),
            "eager_full": _aggregates({op: r["eager_full"] for op, r in rows.items()}, weights),
            "eager_full_sampled_operators": _aggregates(
                {op: r["eager_full"] if r["sample"] else None for op, r in rows.items()}, weights
            ),
        }
    if speedups:
        report["speedup"] = {
            "shapes": len(speedups),
            "geomean": math.exp(statistics.fmean(math.log(x) for x in speedups)),
            "median": statistics.median(speedups),
            "min": min(speedups),
            "max": max(speedups),
            "slower_than_eager": sum(x < 1 for x in speedups),
        }
    return report


def render(report: dict[str, Any]) -> str:
    def f(v: float | None, digits: int = 4) -> str:
        return "—" if v is None else f"{v:.{digits}f}"

    lines = []
    for profile, p in report["profiles"].items():
        tc, es, ef, eo = p["torch_compile"], p["eager_sample"], p["eager_full"], p["eager_full_sampled_operators"]
        lines += [
            f"## against `{profile}`",
            "",
            "| | S_agg, missing as 0 | S_agg over measured weight | weight measured |",
            "|---|---|---|---|",
            f"| torch.compile (sample) | {f(tc['lower_bound'])} | {f(tc['renormalised'])} | "
            f"{f(tc['weight_measured'], 3)} |",
            f"| eager (same sample) | {f(es['lower_bound'])} | {f(es['renormalised'])} | "
            f"{f(es['weight_measured'], 3)} |",
            f"| eager (all shapes of the sampled operators) | {f(eo['lower_bound'])} | {f(eo['renormalised'])} | "
            f"{f(eo['weight_measured'], 3)} |",
            f"| eager (all 440 shapes) | {f(ef['lower_bound'])} | {f(ef['renormalised'])} | "
            f"{f(ef['weight_measured'], 3)} |",
            "",
            "| operator | weight | sample | S_i torch.compile | S_i eager, sample | S_i eager, all |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {op} | {r['weight']:.4f} | {r['sample']} | {f(r['torch_compile'])} | {f(r['eager_sample'])} | "
            f"{f(r['eager_full'])} |"
            for op, r in p["operators"].items()
        ]
        lines.append("")
    s = report["speedup"]
    if s:
        lines.append(
            f"Per-shape speed-up eager → torch.compile over {s['shapes']} shapes: geomean {s['geomean']:.2f}×, median "
            f"{s['median']:.2f}×, range {s['min']:.2f}–{s['max']:.2f}×, slower than eager on {s['slower_than_eager']}."
        )
    if report["failures"]:
        lines += ["", "torch.compile failures:", ""]
        lines += [
            f"* {x['op']} shape {x['shape']}: {x['stage']}/{x['category']}: {x['message']}" for x in report["failures"]
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--eager", type=Path, required=True, help="eager results, every shape (one EvalResult per operator)"
    )
    parser.add_argument("--compiled", type=Path, required=True, help="torch.compile results on a sample of shapes")
    parser.add_argument("--out", type=Path, help="prefix for <prefix>.md and <prefix>.json")
    args = parser.parse_args(argv)
    report = estimate(args.eager, args.compiled)
    text = render(report)
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps(report, indent=1))
        Path(f"{args.out}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
