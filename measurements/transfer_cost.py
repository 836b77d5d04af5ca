#!/usr/bin/env python3
"""What the correctness stage costs per GB of output, beyond the calls themselves: the
hand-over of outputs from worker to judge, input generation and the comparison.

    python3 measurements/transfer_cost.py GROUP… [--min-output-gb 0.2] [--seeds 5]    # GROUP: DIR[,DIR…], pooled

Per shape (eager baseline results, one EvalResult per operator in each DIR): correctness +
reference_and_compare seconds, less the compile of the first call and the 2 × seeds calls of
the candidate and of the reference (at the shape's timed median), divided by seeds × the
operator's bytes written (roofline). Per group of result directories the median over shapes
with at least `--min-output-gb` of output, where this cost dominates.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]


def seconds_per_output_gb(directory: Path, catalog, min_output_gb: float, seeds: int) -> list[tuple[float, str, str]]:
    """[(s per GB of output per seed, op, shape)] of the large-output shapes timed in `directory`."""
    from atrex_mcp.evaluate.table import load_results

    rows = []
    for r in load_results(directory):
        hidden = catalog.hidden(r.op)
        for s in r.shapes:
            seconds = s.seconds
            if s.time_ms is None or "reference_and_compare" not in seconds:
                continue
            written = (hidden.roofline_entry(s.id) or {}).get("bytes_written", 0) / 1e9
            if written < min_output_gb:
                continue
            calls = 2 * seeds * s.time_ms / 1e3
            spent = seconds["correctness"] - seconds.get("first_call_extra", 0.0) + seconds["reference_and_compare"]
            rows.append(((spent - calls) / (seeds * written), r.op, s.id))
    return sorted(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("groups", nargs="+", help="result directories; DIR,DIR… pools them")
    parser.add_argument("--min-output-gb", type=float, default=0.2)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)

    from atrex_mcp.problemset.catalog import Catalog

    catalog = Catalog()
    print("| results | shapes | s per GB of output per seed (median) | range |\n|---|---|---|---|")
    for group in args.groups:
        per_gb = sorted(
            x[0]
            for d in group.split(",")
            for x in seconds_per_output_gb(Path(d), catalog, args.min_output_gb, args.seeds)
        )
        if per_gb:
            print(f"| {group} | {len(per_gb)} | {statistics.median(per_gb):.2f} | {per_gb[0]:.2f}–{per_gb[-1]:.2f} |")
        else:
            print(f"| {group} | 0 | — | — |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
