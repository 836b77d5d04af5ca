#!/usr/bin/env python3
"""Can a kernel forge its own time on the H200, or write the judge's replies for it?

The attack seen on the H200 (rewriting `sys.modules['sandbox.worker'].time_calls` to divide
every time by 3: rms_norm shape 5 reported 0.00144 ms instead of 0.00435 ms, `integrity: []`)
and its variants, each applied to the Triton example kernel (examples/rms_norm_triton.py) and
run through `evaluate()` on rms_norm shapes 0 and 5 of the served catalog:

  honest            the example kernel as it is (the figures the others are read against)
  time_calls        the issue's attack; perf_counter, elapsed_time, median, send, json_dumps: the
                    same rewrite of the clock, the event read-out, the statistics, the reply
                    writer, the JSON encoder, the primitives' lookup (tests/exploits/forge_timing.py)
  handler_third     the request loop's `time` handler wrapped through the stack to divide by 3
                    (past the bound loop: only the judge's witness can see it); handler_tenth: by 10
  time_reply        a whole `time` reply forged with the live nonce (tests/exploits/forge_time_reply.py)
  load_reply        a `load ok` frame for a Model that is no nn.Module (tests/exploits/forge_load_reply.py)
  uncapturable      the honest kernel with a host synchronisation (`.item()`) in forward: no CUDA graph
                    can be captured, the plain burst judges and its wall per call is the least time
                    (TimingStats.clock_ms, timing_witness.scored_time_ms); uncapturable_third: the same
                    kernel with the handler forgery dividing its times by 3
  precompute        the graph burst's capture handler computes the K outputs (untimed), captures an
                    empty graph, and the replay answers with their fingerprints; `time` divided by 3
                    (tests/exploits/forge_graph_precompute.py); the replay's input refresh defeats it

Per case and shape it records the verdict (correct, stage, category, integrity), the reported
median, which witness judged it (graph, uncapturable), the graph burst's calls, per-call device
time and floor, the plain burst's witness, the floor that judged, and S raw and as it enters the
aggregates (clipped at 1), and what benchmark mode shows of it (no trace of faster_than_sol).
Confirms the fix when: honest passes with no incident on both shapes, witness `graph`;
handler_third and handler_tenth are `timing_forged` (performance/timing_tampered) on shapes 0
AND 5, their graph floor above the forged median; uncapturable and uncapturable_third are
`uncapturable`, correct, scored at no less than the judge's wall per call (S of the forgery no
higher than the honest uncapturable one's); precompute fails
correctness/timed_output_mismatch ("Output of a graph-burst call ... is wrong") or is
`timing_forged` on shapes 0 AND 5, never passes; honest's graph floor stays under its median
with the refresh in the replay's window (w_graph near its median, not inflated); every rewrite is
`primitives_replaced` with the honest median; time_reply and load_reply are `reply_forged`.

    # the witness cases, <5 min:
    python3 measurements/forged_timing_gpu.py --out measurements/results/forged_timing/DATE_h200
    python3 measurements/forged_timing_gpu.py --out DIR --cases all        # every case, ~8 min
    python3 measurements/forged_timing_gpu.py --out DIR --cases honest,time_calls --shapes 5
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import write_report  # noqa: E402

OP = "rms_norm"
EXPLOITS = ROOT / "tests" / "exploits"
KERNEL = ROOT / "examples" / "rms_norm_triton.py"
REWRITES = ("time_calls", "perf_counter", "elapsed_time", "median", "send", "json_dumps", "primitives_lookup")
WITNESS_CASES = (
    "honest",
    "handler_third",
    "handler_tenth",
    "uncapturable",
    "uncapturable_third",
    "precompute",
)  # default: the graph witness


def _preamble(exploit: str) -> str:
    """An exploit's attack without its own Model (everything before `class Model`)."""
    text = (EXPLOITS / f"{exploit}.py").read_text()
    return text[: text.index("\nclass Model")] + "\n\n"


def case_sources(kernel_path: Path = KERNEL) -> dict[str, str]:
    """Each case's candidate file: an attack's preamble followed by the honest Triton kernel."""
    kernel = kernel_path.read_text()
    cases = {"honest": kernel}
    for target in REWRITES:
        preamble = _preamble("forge_timing").replace('TARGETS = ["time_calls"]', f"TARGETS = [{target!r}]")
        cases[target] = preamble + kernel
    handler = _preamble("forge_handler_table")
    cases["handler_third"] = handler.replace("t / 10", "t / 3") + kernel
    cases["handler_tenth"] = handler + kernel
    cases["precompute"] = _preamble("forge_graph_precompute") + kernel
    forged_forward = (
        "        if not _sent and _in_timing_loop():\n            _sent.append(1)\n            _forge_time_reply()\n"
    )
    cases["time_reply"] = _preamble("forge_time_reply") + re.sub(
        r"(    def forward\(self[^\n]*:\n)", lambda m: m.group(1) + forged_forward, kernel, count=1
    )
    cases["load_reply"] = (EXPLOITS / "forge_load_reply.py").read_text()
    host_sync = (
        "        if float(x.abs().amax().item()) < 0:  # a host synchronisation: no CUDA graph holds it\n"
        "            x = -x\n"
    )
    cases["uncapturable"] = re.sub(
        r"(    def forward\(self[^\n]*:\n)", lambda m: m.group(1) + host_sync, kernel, count=1
    )
    cases["uncapturable_third"] = handler.replace("t / 10", "t / 3") + cases["uncapturable"]
    return cases


def _shape_row(shape: Any, shown: Any) -> dict[str, Any]:
    from atrex_mcp.evaluate.scoring import aggregate_shape_score

    timing = shape.timing
    figures = (
        "median_ms",
        "request_wall_s",
        "witness",
        "witness_note",
        "graph_calls",
        "graph_witness_ms",
        "graph_floor_ms",
        "graph_subtracted_ms",
        "graph_slack_ms",
        "clock_ms",
        "witness_ms",
        "witness_floor_ms",
        "host_late_calls",
        "calls",
    )
    return {
        "shape": shape.id,
        "correct": shape.correct,
        "stage": shape.stage,
        "category": shape.category,
        "integrity": shape.integrity,
        "message": shape.message[:400],
        "time_ms": shape.time_ms,
        **{name: getattr(timing, name) if timing else None for name in figures},
        "score": shape.score,
        "score_clipped": aggregate_shape_score(shape.score) if shape.score is not None else None,
        "t_sol_ms": shape.t_sol_ms,
        "seconds": shape.seconds,
        "benchmark_view": {
            "correct": shown.correct,
            "category": shown.category,
            "integrity": shown.integrity,
            "time_ms": shown.time_ms,
        },
    }


def run_case(catalog: Any, op: str, name: str, source: str, shapes: list[str], standby: Any) -> dict[str, Any]:
    from atrex_mcp.evaluate import EvalRequest, evaluate
    from atrex_mcp.policy import Policy

    t0 = time.perf_counter()
    result = evaluate(
        EvalRequest(op=op, source=source, shapes=shapes, seeds=2, hardware="h200"), catalog, standby=standby
    )
    benchmark = Policy("benchmark", catalog)
    return {
        "case": name,
        "compiled": result.compiled,
        "integrity": result.integrity,
        "device": result.device.name,
        "compile_error": result.compile_error.model_dump() if result.compile_error else None,
        "seconds": round(time.perf_counter() - t0, 1),
        "shapes": [_shape_row(s, benchmark.verdict(s)) for s in result.shapes],
    }


def markdown(report: dict[str, Any]) -> str:
    legend = (
        "w_graph: device time per call of the fastest graph replay (judge's clock); taken off: the input "
        "refresh and fingerprints subtracted per call; slack: the allowance per call for noise and calibration "
        "error; floor: the one that judged (max of the graph's and the plain burst's); S clipped: as it enters "
        "S_i and S_agg."
    )
    header = (
        "| case | shape | verdict | integrity | median ms | scored ms | witness | K | w_graph ms | graph floor ms | "
        "taken off ms | slack ms | w_plain ms | floor ms | S | S clipped | benchmark view integrity |"
    )
    lines = [
        f"# Forged timing ({report['op']}) on {report['device']} ({report['started_at']})",
        "",
        legend,
        "",
        header,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def num(value: Any) -> str:
        return "—" if value is None else f"{value:.4g}"

    for case in report["cases"]:
        for row in case["shapes"]:
            verdict = "pass" if row["correct"] else f"{row['stage']}/{row['category']}"
            lines.append(
                f"| {case['case']} | {row['shape']} | {verdict} | {', '.join(row['integrity']) or '—'} | "
                f"{num(row['median_ms'])} | {num(row['time_ms'])} | {row['witness'] or '—'} | "
                f"{row['graph_calls'] or '—'} | "
                f"{num(row['graph_witness_ms'])} | {num(row['graph_floor_ms'])} | {num(row['graph_subtracted_ms'])} | "
                f"{num(row['graph_slack_ms'])} | {num(row['witness_ms'])} | "
                f"{num(row['witness_floor_ms'])} | {num(row['score'])} | {num(row['score_clipped'])} | "
                f"{', '.join(row['benchmark_view']['integrity']) or '—'} |"
            )
    notes = [
        f"- {case['case']} shape {row['shape']}: {row['witness_note']}"
        for case in report["cases"]
        for row in case["shapes"]
        if row.get("witness_note")
    ]
    return "\n".join(lines + ([""] + ["Uncapturable:"] + notes if notes else [])) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output path without suffix: writes OUT.json and OUT.md")
    parser.add_argument(
        "--cases",
        default=",".join(WITNESS_CASES),
        help=f"comma-separated case names, or all (default: {','.join(WITNESS_CASES)})",
    )
    parser.add_argument("--shapes", default="0,5", help="shape ids of the operator")
    parser.add_argument("--op", default=OP, help=f"the operator (default {OP}); another one needs --kernel")
    parser.add_argument(
        "--kernel", type=Path, default=KERNEL, help="the honest kernel the cases wrap (default: the rms_norm example)"
    )
    args = parser.parse_args()

    from atrex_mcp.evaluate.device import has_gpu
    from atrex_mcp.evaluate.standby import Standby
    from atrex_mcp.problemset.catalog import Catalog

    if not has_gpu():
        sys.exit(
            "forged_timing_gpu: needs a GPU (on CPU the evaluator does not time); run tests/test_exploits.py here "
            "instead."
        )
    sources = case_sources(args.kernel)
    wanted = list(sources) if args.cases == "all" else [c.strip() for c in args.cases.split(",")]
    unknown = [c for c in wanted if c not in sources]
    if unknown:
        sys.exit(f"forged_timing_gpu: unknown case(s) {', '.join(unknown)}; choose from {', '.join(sources)}")
    catalog = Catalog()
    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "op": args.op,
        "shapes": args.shapes.split(","),
        "cases": [],
    }
    standby = Standby()  # the next case's worker starts while this one runs
    try:
        for name in wanted:
            print(f"[forged_timing_gpu] {name}", flush=True)
            report["cases"].append(run_case(catalog, args.op, name, sources[name], report["shapes"], standby))
            report["device"] = report["cases"][-1]["device"]
            out = Path(args.out)
            write_report(out.with_suffix(".json"), report)  # after every case: a run cut short keeps what it measured
            out.with_suffix(".md").write_text(markdown(report))
    finally:
        standby.close()


if __name__ == "__main__":
    main()
