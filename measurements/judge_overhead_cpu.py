"""What the judge costs per shape on the host, with a trivial kernel, on CPU: the part of a shape's
judging that is not the candidate's calls (requests and replies, the output arena, input sets,
reference outputs, comparisons, the timing stage's checks and the plain witness bursts).

    python3 measurements/judge_overhead_cpu.py [--op l2_norm] [--shapes 0,1,2] [--seeds 5] [--rounds 2]
                                               [--candidate reference|steady]

The candidate is the operator's own reference (eager torch, no Triton JIT), on its smallest
shapes, so what is measured is the judge. Each round opens one worker session (its start is
reported apart), then per shape takes the evaluator's steps through `workers.CandidateWorker`:
`check` (correctness over fresh seeds) and `time` (the timing stage on host-clock events, its
output checks and the plain witness bursts; no CUDA graph on CPU). Also the round trip of an
empty request. Prints one JSON object: seconds per shape by part (the median over rounds), and
how many timing stages failed (on a loaded 2-core machine the host-clock witness can flag the
eager l2_norm shape 2 as timing_forged; its stage is still timed in full).

These are host-side figures of this machine's CPU: they say what a change to the judge's own
work saves, not what a shape costs on a GPU (measurements/judge_throughput_gpu.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atrex_mcp.evaluate import graph_witness  # noqa: E402
from atrex_mcp.evaluate.workers import open_session  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402

PINGS = 50
STEADY = """
import time as _time

_forward = Model.forward


def _steady(self, *args, **kwargs):
    _time.sleep(0.002)  # a steady 2 ms call, as the exploit corpus's candidates on CPU
    return _forward(self, *args, **kwargs)


Model.forward = _steady
"""


def one_round(catalog: Catalog, op: str, shapes: list[str], seeds: int, steady: bool) -> dict[str, float]:
    source = catalog.visible(op).reference_source + (STEADY if steady else "")
    t0 = time.perf_counter()
    parts = {"check_s": 0.0, "time_s": 0.0, "failed_timings": 0, "timed_calls": 0}
    with open_session(catalog, op, source, shapes=shapes, seeds=seeds, timeout_s=300.0) as worker:
        parts["start_s"] = time.perf_counter() - t0
        for shape_id in shapes:
            t1 = time.perf_counter()
            checked = worker.check(shape_id)
            parts["check_s"] += time.perf_counter() - t1
            if not checked.correct:
                raise SystemExit(f"shape {shape_id} failed its check: {checked.category}: {checked.message}")
            t1 = time.perf_counter()
            timed = worker.time(shape_id)
            parts["time_s"] += time.perf_counter() - t1
            parts["timed_calls"] += timed.timing.calls if timed.timing is not None else 0
            parts["failed_timings"] += timed.stage is not None  # still timed: the judge's work was done
        walls = []
        for _ in range(PINGS):
            trip = graph_witness.round_trip_s(worker.session, 30.0)
            assert isinstance(trip, float), trip
            walls.append(trip)
        parts["round_trip_ms"] = statistics.median(walls) * 1e3
    n = len(shapes)
    return {
        "start_s": parts["start_s"],
        "check_s_per_shape": parts["check_s"] / n,
        "time_s_per_shape": parts["time_s"] / n,
        "judge_s_per_shape": (parts["check_s"] + parts["time_s"]) / n,
        "round_trip_ms": parts["round_trip_ms"],
        "failed_timings": parts["failed_timings"],
        "timed_calls_per_shape": parts["timed_calls"] / n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--op", default="l2_norm")
    parser.add_argument("--shapes", default="0,1,2", help="comma-separated shape ids (the smallest by default)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--candidate",
        choices=("reference", "steady"),
        default="reference",
        help="the reference as it is, or the reference behind a steady 2 ms sleep (its timing can stop early)",
    )
    args = parser.parse_args(argv)
    catalog = Catalog([ROOT / "problems"])
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    rounds = [one_round(catalog, args.op, shapes, args.seeds, args.candidate == "steady") for _ in range(args.rounds)]
    summary = {k: round(statistics.median(r[k] for r in rounds), 4) for k in rounds[0]}
    summary["failed_timings"] = sum(r["failed_timings"] for r in rounds)
    head = {"op": args.op, "candidate": args.candidate, "shapes": shapes, "seeds": args.seeds, "rounds": args.rounds}
    print(json.dumps({**head, **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
