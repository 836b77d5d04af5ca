#!/usr/bin/env python3
"""Does judging scale with GPUs? One candidate set (default: the wiki kernels of every operator,
all 440 scored shapes, 5 seeds) is judged through `bench eval --cluster` on a local cluster of
1 worker and of N workers (one GPU each), one leg after the other. Per leg: the judging wall
time (the cluster's start apart), each GPU's busy share (its judging seconds over the leg's
wall); then the speed-up at N GPUs (target >= 0.9 N) and whether every leg's verdicts match the
single-GPU run's, shape by shape.

On a one-GPU host the 1- and N-worker legs are one leg: no speed-up is measured ("n/a (one
GPU)"), and the verdicts are checked against the local path instead (`bench eval` without
--cluster, the `local` leg; `--local` adds that leg on any host).

A leg may take longer than one command may run: `--send-for S` stops sending shards S seconds
after the call starts (those in flight finish), and the same command again continues where it
stopped (judged shards are not sent again; each call's wall time is added to its leg). Every call
rewrites the report, OUT/<date>_<gpu>.{md,json}; the legs' runs are under OUT/work/.

    export PYTHONPATH=$PWD            # (after bash measurements/cluster_wheels.sh on a host without Dask:
                                      #  PYTHONPATH=/tmp/atrex-cluster-site:$PWD)
    python3 measurements/cluster_scaling.py --workers 8 --out /tmp/res/cluster_scaling
    python3 measurements/cluster_scaling.py --workers 1 --ops rms_norm --shapes 0,1 --seeds 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from atrex_mcp.agentbench.evaluation import EvalSettings, evaluate_run  # noqa: E402
from atrex_mcp.cluster.engine import local_cluster, require_distributed, visible_devices  # noqa: E402
from atrex_mcp.errors import AtrexError  # noqa: E402
from measurements.cluster_runs import (  # noqa: E402
    CPU_GPU,
    ONE_GPU,
    ONE_GPU_NOTE,
    busy_seconds,
    candidate_set,
    check_shapes,
    check_workers,
    differences,
    failed_ops,
    host_record,
    make_run,
    report_head,
    report_stem,
    table,
    verdicts,
    worker_gpu,
)

TARGET_EFFICIENCY = 0.9
LEG_FILE = "leg.json"


@dataclass(frozen=True)
class Leg:
    """One judging of the candidate set: on the local path (workers 0) or a local cluster."""

    workers: int

    @property
    def name(self) -> str:
        return "local" if self.workers == 0 else f"cluster-{self.workers}"


@dataclass(frozen=True)
class Plan:
    """What is judged, and where."""

    out: Path
    workers: int
    ops: list[str] | None = None
    shapes: str = "all"
    seeds: int = 5
    shard_shapes: int | None = None
    local: bool | None = None  # None: the local leg only when one worker is all the host has

    @property
    def legs(self) -> list[Leg]:
        with_local = self.workers == 1 if self.local is None else self.local
        cluster = [Leg(1)] if self.workers == 1 else [Leg(1), Leg(self.workers)]
        return [*cluster, Leg(0)] if with_local else cluster  # local last: its judge opens a CUDA context here

    @property
    def work(self) -> Path:
        return self.out / "work"

    def settings(self) -> dict[str, Any]:
        return {"ops": self.ops, "shapes": self.shapes, "seeds": self.seeds, "shard_shapes": self.shard_shapes}


def _leg_dir(plan: Plan, leg: Leg) -> Path:
    return plan.work / leg.name


def _load_leg(plan: Plan, leg: Leg) -> dict[str, Any]:
    path = _leg_dir(plan, leg) / LEG_FILE
    if path.is_file():
        return json.loads(path.read_text())
    return {"leg": leg.name, "workers": leg.workers, "gpus": {}, "calls": [], "complete": False}


def _check_settings(plan: Plan) -> None:
    """OUT holds one measurement: continuing it with other settings would mix two."""
    path = plan.work / "settings.json"
    if path.is_file():
        earlier = json.loads(path.read_text())
        if earlier != plan.settings():
            raise AtrexError(
                "input",
                "settings_differ",
                f"{plan.out} holds a measurement made with {earlier}.",
                "Repeat those options to continue it, or give another --out.",
            )
    plan.work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.settings()))


def run_leg(plan: Plan, leg: Leg, sources: dict[str, str], send_until: float | None) -> dict[str, Any]:
    """One call of a leg: its run made on the first call, then judged (or continued); the call
    is appended to OUT/work/<leg>/leg.json."""
    folder = _leg_dir(plan, leg)
    state = _load_leg(plan, leg)
    if not (folder / "run").exists():
        make_run(folder / "run", sources)
    settings = EvalSettings(shapes=plan.shapes, seeds=plan.seeds, baselines="no")
    call: dict[str, Any] = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if leg.workers == 0:
        t0 = time.monotonic()
        summary = evaluate_run(folder / "run", settings, live=False)
        call["judging_s"] = round(time.monotonic() - t0, 2)
    else:
        distributed = require_distributed()
        t0 = time.monotonic()
        with local_cluster(visible_devices(leg.workers)) as cluster:
            with distributed.Client(cluster) as client:  # the workers' imports belong to the start, not the judging
                client.wait_for_workers(leg.workers)
                named = {w["name"]: a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
                answers = client.run(worker_gpu)
                state["gpus"] = {str(name): answers[address] for name, address in sorted(named.items())}
            call["cluster_start_s"] = round(time.monotonic() - t0, 2)
            t1 = time.monotonic()
            summary = evaluate_run(
                folder / "run",
                settings,
                live=False,
                cluster=cluster.scheduler_address,
                shard_shapes=plan.shard_shapes,
                send_until=send_until,
            )
            call["judging_s"] = round(time.monotonic() - t1, 2)
    call.update(evaluated=summary.evaluated, failed=summary.failed, unsent=len(summary.unsent))
    state["calls"].append(call)
    state["complete"] = not summary.unsent
    (folder / LEG_FILE).write_text(json.dumps(state, indent=1))
    return state


def leg_summary(plan: Plan, leg: Leg) -> dict[str, Any]:
    """A leg's figures over all its calls so far."""
    state = _load_leg(plan, leg)
    run = _leg_dir(plan, leg) / "run"
    wall = sum(c["judging_s"] for c in state["calls"])
    judged = verdicts(run) if run.exists() else {}
    summary: dict[str, Any] = {
        "leg": leg.name,
        "workers": leg.workers,
        "complete": state["complete"],
        "calls": len(state["calls"]),
        "judging_wall_s": round(wall, 2),
        "shapes_judged": sum(len(v["shapes"]) for v in judged.values()),
        "failed": failed_ops(run) if run.exists() else [],
    }
    if leg.workers:
        busy = {name: 0.0 for name in state["gpus"]} | (busy_seconds(run) if run.exists() else {})
        summary |= {
            "cluster_start_s": [c["cluster_start_s"] for c in state["calls"]],
            "gpus": state["gpus"],
            "busy_s": {w: round(s, 2) for w, s in sorted(busy.items())},
            "busy_share": {w: round(s / wall, 3) if wall else None for w, s in sorted(busy.items())},
        }
    return summary


def _speedup(plan: Plan, legs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if plan.workers == 1:
        return {"speedup": ONE_GPU, "efficiency": ONE_GPU, "meets_target": ONE_GPU}
    one, many = legs["cluster-1"], legs[f"cluster-{plan.workers}"]
    if not (one["complete"] and many["complete"]):
        return {"speedup": "pending (a leg is not complete)", "efficiency": None, "meets_target": None}
    speedup = one["judging_wall_s"] / many["judging_wall_s"] if many["judging_wall_s"] else None
    if speedup is None:
        return {"speedup": None, "efficiency": None, "meets_target": None}
    return {
        "speedup": round(speedup, 3),
        "efficiency": round(speedup / plan.workers, 3),
        "meets_target": speedup >= TARGET_EFFICIENCY * plan.workers,
    }


def _verdict_check(plan: Plan, legs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every other leg against the single-GPU reference: the local path when it ran, else the
    one-worker cluster."""
    names = [leg.name for leg in plan.legs]
    reference = "local" if "local" in names else "cluster-1"
    others = [n for n in names if n != reference]
    if not others:
        return {"verdicts_match": None, "verdicts_reference": reference, "compared": [], "differences": []}
    if not all(legs[n]["complete"] for n in names):
        return {"verdicts_match": None, "verdicts_reference": reference, "compared": [], "differences": ["pending"]}
    ref = verdicts(_leg_dir(plan, Leg(legs[reference]["workers"])) / "run")
    diffs = [
        f"{other}: {d}"
        for other in others
        for d in differences(ref, verdicts(_leg_dir(plan, Leg(legs[other]["workers"])) / "run"))
    ]
    return {
        "verdicts_match": not diffs,
        "verdicts_reference": reference,
        "compared": others,
        "differences": diffs[:200],
    }


def build_report(plan: Plan, command: str) -> dict[str, Any]:
    legs = {leg.name: leg_summary(plan, leg) for leg in plan.legs}
    cluster_legs = [s for s in legs.values() if s["workers"]]
    gpu = next((g["gpu"] for s in cluster_legs for g in s["gpus"].values()), CPU_GPU)
    return {
        **host_record(gpu),
        "question": "Does judging scale with GPUs (bench eval --cluster local, 1 vs N workers)?",
        "command": command,
        "gpus": plan.workers,
        "note": (ONE_GPU_NOTE if plan.workers == 1 else None),
        **plan.settings(),
        "complete": all(s["complete"] for s in legs.values()),
        "failed": sorted({f"{s['leg']}: {op}" for s in legs.values() for op in s["failed"]}),
        "legs": list(legs.values()),
        "target_efficiency": TARGET_EFFICIENCY,
        **_speedup(plan, legs),
        **_verdict_check(plan, legs),
    }


def render(report: dict[str, Any]) -> str:
    rows = [
        [
            s["leg"],
            "yes" if s["complete"] else "NO (run again)",
            s["shapes_judged"],
            s["judging_wall_s"],
            ", ".join(map(str, s.get("cluster_start_s", []))) or "-",
            ", ".join(f"{w}: {v}" for w, v in s.get("busy_share", {}).items()) or "-",
            ", ".join(s["failed"]) or "-",
        ]
        for s in report["legs"]
    ]
    match = report["verdicts_match"]
    verdict_line = (
        "no second leg to compare"
        if match is None and not report["differences"]
        else "pending: a leg is not complete"
        if match is None
        else f"identical to `{report['verdicts_reference']}`, shape by shape ({', '.join(report['compared'])})"
        if match
        else f"DIFFER from `{report['verdicts_reference']}`: " + "; ".join(report["differences"][:20])
    )
    return "\n".join(
        [
            *report_head("Judging on 1 and N GPUs (bench eval --cluster local)", report),
            f"Candidates: {', '.join(report['ops'] or ['every operator'])}; shapes {report['shapes']}; "
            f"{report['seeds']} seed(s); shards of {report['shard_shapes'] or 'the default number of'} shapes.",
            "",
            table(
                ["leg", "complete", "shapes", "judging wall s", "cluster start s", "busy share per GPU", "failed"],
                rows,
            ),
            "",
            f"Speed-up: {report['speedup']}; {report['note']}."
            if report["note"]
            else f"Speed-up at {report['gpus']} GPUs: {report['speedup']} (efficiency {report['efficiency']}; "
            f"at least {report['target_efficiency']} x {report['gpus']}: {report['meets_target']}).",
            f"Verdicts: {verdict_line}.",
            "",
        ]
    )


def measure(plan: Plan, send_for: float | None = None, command: str = "") -> dict[str, Any]:
    """Run (or continue) every incomplete leg within the call's sending time, then write the
    report; returns it."""
    check_workers(plan.workers)
    sources = candidate_set(plan.ops)  # an unknown operator or shape is refused before anything starts
    if plan.shapes not in ("all", "smoke"):
        check_shapes(list(sources), [s for s in plan.shapes.split(",") if s])
    _check_settings(plan)
    deadline = None if send_for is None else time.monotonic() + send_for
    for leg in plan.legs:
        if _load_leg(plan, leg)["complete"]:
            continue
        if deadline is not None and time.monotonic() >= deadline:
            print(f"[cluster-scaling] {leg.name}: not started, --send-for used up (run the same command again)")
            continue
        state = run_leg(plan, leg, sources, deadline)
        print(f"[cluster-scaling] {leg.name}: {'complete' if state['complete'] else 'NOT complete (run again)'}")
    report = build_report(plan, command)
    stem = report_stem(report["date"], report["gpu"], plan.workers)
    (plan.out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    (plan.out / f"{stem}.md").write_text(render(report))
    report["files"] = [str(plan.out / f"{stem}.{ext}") for ext in ("md", "json")]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/res/cluster_scaling"), help="report and work folder")
    parser.add_argument("--workers", type=int, help="N: one-GPU workers of the second leg (default: every GPU)")
    parser.add_argument("--ops", help="comma-separated operators (default: every operator of the problem set)")
    parser.add_argument("--shapes", default="all", help="all, smoke, or shape ids (bench eval's --shapes)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--shard-shapes", type=int, help="shapes per shard (default: bench eval's)")
    parser.add_argument(
        "--local",
        action=argparse.BooleanOptionalAction,
        help="also judge on the local path, the verdicts' reference (default: only with one worker)",
    )
    parser.add_argument("--send-for", type=float, help="stop sending shards this many seconds into the call")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    workers = args.workers if args.workers is not None else len(visible_devices(None))
    plan = Plan(
        out=args.out,
        workers=workers,
        ops=[o for o in args.ops.split(",") if o] if args.ops else None,
        shapes=args.shapes,
        seeds=args.seeds,
        shard_shapes=args.shard_shapes,
        local=args.local,
    )
    if workers == 1:
        print("[cluster-scaling] one GPU: the 1-worker and N-worker legs are one leg; speed-up n/a (one GPU)")
    command = shlex.join(["python3", "measurements/cluster_scaling.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        report = measure(plan, args.send_for, command)
    except AtrexError as exc:
        print(f"cluster_scaling: {exc}", file=sys.stderr)
        return 2
    print(f"[cluster-scaling] speed-up {report['speedup']}; verdicts match: {report['verdicts_match']}")
    for path in report["files"]:
        print(f"[cluster-scaling] {path}")
    if report["verdicts_match"] is False or report["failed"]:
        return 1
    return 0 if report["complete"] else 3


if __name__ == "__main__":
    sys.exit(main())
