#!/usr/bin/env python3
"""One evaluation spread over several GPUs of this host, on the local Dask cluster that
`bench eval --cluster local` uses (atrex_mcp.cluster.engine.local_cluster: one worker process
per GPU, CUDA_VISIBLE_DEVICES set before it starts, each judging with the same
atrex_mcp.cluster.shards.judge_shard), all pulling from one queue of (operator, shape) jobs,
largest first.

Why a queue of its own on top of the cluster: the measurement scripts (baselines.py) fit a time
budget with a cost model, which Dask's scheduler knows nothing of. So one thread per worker
takes batches from this queue and sends each to its own worker. Why this shape: the evaluator
starts a sandbox worker per evaluate() call, so a GPU worker
takes the largest job left *and* further jobs of the same operator up to a batch cap, which
keeps worker starts few while the largest-first order keeps the GPUs' finishing times close
(longest-processing-time scheduling). An idle process simply takes the next batch, so a GPU
that drew short jobs steals the work a slower one has not reached.

Untimed evaluations (compile probes) may run several processes ("lanes") per GPU; timed ones
never share a GPU.

A deadline is honoured twice: a batch is handed out only when its predicted cost fits the
time left, and a batch still running at the deadline is stopped by the evaluation's own
`deadline_s` (its worker killed), keeping the shapes it finished. Every job that did not run is
returned with the reason, never dropped.

    python3 measurements/multi_gpu.py speedup ONE_GPU_DIR MULTI_GPU_DIR   # compare two baselines.py runs

Needs the cluster extra (Dask distributed; docs/cluster.md says which wheels travel to a GPU
machine without a registry).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from atrex_mcp.cluster.engine import visible_devices as gpu_devices  # noqa: E402,F401  (baselines.py's name)
from atrex_mcp.cluster.merge import merge_results  # noqa: E402,F401  (baselines.py's name)
from measurements.eval_cost import Job  # noqa: E402

BUDGET_REASON = "budget:"  # starts the not_run reason of a job the time left could not fit (never started)
WORKER_CHECK_S = 1.0  # how often a runner waiting for its batch checks that its worker still lives


@dataclass
class Batch:
    """Jobs of one operator evaluated by one evaluate() call."""

    op: str
    jobs: list[Job]
    predicted_s: float

    @property
    def shapes(self) -> list[str]:
        return [j.shape for j in self.jobs]


@dataclass
class BatchOutcome:
    """What happened to one batch on one GPU process."""

    worker: str
    op: str
    shapes: list[str]
    predicted_s: float
    status: str  # ok | partial (stopped at the deadline; finished shapes in result_file) | error
    started_s: float  # seconds after the schedule started
    ended_s: float
    result_file: str | None = None
    message: str = ""
    visible_devices: str | None = None
    device_name: str | None = None


class JobQueue:
    """Jobs largest first; `take` hands out a batch that fits the time left."""

    def __init__(self, jobs: Iterable[Job], batch_fixed_s: float, batch_cap_s: float | None):
        self._jobs = sorted(jobs, key=lambda j: (-j.seconds, j.op, j.shape))
        self._batch_fixed_s, self._cap = batch_fixed_s, batch_cap_s
        self._lock = threading.Lock()

    def take(self, time_left_s: float | None) -> Batch | None:
        """The largest job that fits, plus more jobs of its operator (largest first) while the
        batch stays under the cap and the time left; None when nothing fits."""
        limit = float("inf") if time_left_s is None else time_left_s
        with self._lock:
            first = next((j for j in self._jobs if self._batch_fixed_s + j.seconds <= limit), None)
            if first is None:
                return None
            batch, total = [first], self._batch_fixed_s + first.seconds
            bound = min(limit, max(self._cap or float("inf"), total))
            for job in self._jobs:
                if job is not first and job.op == first.op and total + job.seconds <= bound:
                    batch.append(job)
                    total += job.seconds
            taken = {id(j) for j in batch}
            self._jobs = [j for j in self._jobs if id(j) not in taken]
            return Batch(first.op, batch, total)

    def remaining(self) -> list[Job]:
        with self._lock:
            return list(self._jobs)


class Runner(Protocol):
    label: str

    def run(self, batch: Batch, deadline_epoch: float | None) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass
class Schedule:
    """Outcome of `run_jobs`: every batch, and every job that did not run with why."""

    workers: list[str]
    outcomes: list[BatchOutcome] = field(default_factory=list)
    not_run: list[dict[str, str]] = field(default_factory=list)
    makespan_s: float = 0.0

    @property
    def sequential_s(self) -> float:
        """What one GPU would have spent on the same batches, one after another."""
        return sum(o.ended_s - o.started_s for o in self.outcomes)

    def summary(self) -> dict[str, Any]:
        busy = {w: sum(o.ended_s - o.started_s for o in self.outcomes if o.worker == w) for w in self.workers}
        return {
            "workers": self.workers,
            "makespan_s": round(self.makespan_s, 2),
            "sequential_s": round(self.sequential_s, 2),
            "speedup_vs_sequential": round(self.sequential_s / self.makespan_s, 3) if self.makespan_s > 0 else None,
            "busy_s": {w: round(b, 2) for w, b in busy.items()},
            "batches": [asdict(o) for o in self.outcomes],
            "not_run": self.not_run,
        }


def batch_cap(jobs: Sequence[Job], workers: int, batch_fixed_s: float) -> float | None:
    """No cap on one GPU (one batch per operator); on several GPUs half a GPU's fair share, so
    the largest operators are split across GPUs while small operators stay whole. A deadline
    needs no cap of its own: a batch stopped at the deadline loses only the shape in progress."""
    if workers < 2:
        return None
    ops = {j.op for j in jobs}
    return (sum(j.seconds for j in jobs) + len(ops) * batch_fixed_s) / (2 * workers)


def run_jobs(
    jobs: Sequence[Job], runners: Sequence[Runner], batch_fixed_s: float, deadline_s: float | None = None
) -> Schedule:
    """Run every job on the runners (one thread per runner, each pulling batches) within
    `deadline_s` seconds from now (None: no deadline)."""
    queue = JobQueue(jobs, batch_fixed_s, batch_cap(jobs, len(runners), batch_fixed_s))
    schedule = Schedule(workers=[r.label for r in runners])
    t0, epoch0 = time.monotonic(), time.time()
    deadline_epoch = None if deadline_s is None else epoch0 + deadline_s
    lock = threading.Lock()
    failed: list[str] = []  # runners whose process died

    def pull(runner: Runner) -> None:
        while True:
            left = None if deadline_s is None else deadline_s - (time.monotonic() - t0)
            batch = queue.take(left)
            if batch is None:
                return
            started = time.monotonic() - t0
            try:
                reply = runner.run(batch, deadline_epoch)
            except Exception as exc:  # noqa: BLE001 — a broken GPU process loses its batch, not the run
                reply = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
            outcome = BatchOutcome(
                worker=runner.label,
                op=batch.op,
                shapes=batch.shapes,
                predicted_s=round(batch.predicted_s, 2),
                status=reply.get("status", "error"),
                started_s=round(started, 2),
                ended_s=round(time.monotonic() - t0, 2),
                result_file=reply.get("result_file"),
                message=str(reply.get("message", ""))[-2000:],
                visible_devices=reply.get("visible_devices"),
                device_name=reply.get("device_name"),
            )
            with lock:
                schedule.outcomes.append(outcome)
                if outcome.status == "partial":
                    schedule.not_run += [
                        {"op": batch.op, "shape": n["shape"], "reason": n["reason"]} for n in reply.get("not_run", [])
                    ]
                elif outcome.status != "ok":
                    schedule.not_run += [
                        {"op": batch.op, "shape": s, "reason": f"error: {outcome.message[:300]}"} for s in batch.shapes
                    ]
            if outcome.status == "error" and reply.get("fatal"):
                with lock:
                    failed.append(runner.label)
                return

    threads = [threading.Thread(target=pull, args=(r,), name=f"gpu-{r.label}") for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    schedule.makespan_s = time.monotonic() - t0
    left = max(0.0, (deadline_s or 0.0) - schedule.makespan_s)
    for job in queue.remaining():
        why = (
            f"every GPU process exited ({', '.join(failed)})"
            if len(failed) == len(runners)
            else f"{BUDGET_REASON} predicted {job.seconds + batch_fixed_s:.0f} s, {left:.0f} s left"
        )
        schedule.not_run.append({"op": job.op, "shape": job.shape, "reason": why})
    return schedule


class ClusterWorker:
    """One worker of the local cluster (one GPU, or one lane of it): each batch is one shard
    judged there; its result is written to a part file here."""

    def __init__(
        self,
        client: Any,
        address: str,
        label: str,
        parts_dir: Path,
        request: dict[str, Any],
        problems: list[str] | None,
        digests: dict[str, str],
    ):
        self.client, self.address, self.label = client, address, label
        self.parts_dir, self.request, self.problems, self.digests = parts_dir, request, problems, digests
        self._count = 0

    def _alive(self) -> bool:
        return self.address in self.client.scheduler_info(n_workers=-1)["workers"]

    def run(self, batch: Batch, deadline_epoch: float | None) -> dict[str, Any]:
        from atrex_mcp.cluster.shards import ShardSpec, judge_shard
        from atrex_mcp.evaluate.models import EvalRequest

        self._count += 1
        spec = ShardSpec(
            key=f"{batch.op}.{self.label}.{self._count}",
            kind=self.request.get("baseline") or "candidate",
            request=EvalRequest(**{**self.request, "op": batch.op, "shapes": batch.shapes}),
            problems=self.problems,
            problem_digest=self.digests[batch.op],
            deadline_epoch=deadline_epoch,
        )
        future = self.client.submit(judge_shard, spec, workers=[self.address], allow_other_workers=False, pure=False)
        while True:  # a worker that died is not waited for: its batch is lost, the other workers go on
            try:
                reply = future.result(timeout=WORKER_CHECK_S)
                break
            except TimeoutError:
                if not self._alive():
                    future.cancel()
                    return {
                        "status": "error",
                        "fatal": True,
                        "message": f"GPU worker {self.label} ({self.address}) exited",
                    }
            except Exception as exc:  # noqa: BLE001 — KilledWorker and the like end this worker's share
                return {
                    "status": "error",
                    "fatal": True,
                    "message": f"GPU worker {self.label}: {type(exc).__name__}: {exc}",
                }
        answer: dict[str, Any] = {"visible_devices": reply.visible_devices}
        if reply.error is not None:
            error = reply.error
            return {**answer, "status": "error", "message": f"[{error.stage}/{error.category}] {error.message}"}
        result = reply.result
        part = self.parts_dir / f"{batch.op}.{self.label}.{self._count}.json"
        part.write_text(result.model_dump_json(indent=1))
        return {
            **answer,
            "status": "partial" if result.partial else "ok",
            "result_file": str(part),
            "device_name": result.device.name,
            "not_run": [{"shape": s.id, "reason": f"{s.category}: {s.message}"} for s in result.shapes if not s.judged],
        }

    def close(self) -> None:
        """Nothing to stop: the cluster's workers end with the cluster."""


def check_lanes(lanes_per_device: int, timed: bool) -> None:
    """Raises ValueError unless `lanes_per_device` processes may share each GPU: at least one,
    and more only for untimed work."""
    if lanes_per_device < 1:
        raise ValueError(f"lanes_per_device must be at least 1, not {lanes_per_device}")
    if lanes_per_device > 1 and timed:
        raise ValueError("several lanes per GPU are for untimed evaluations (timing: false) only")


def run_spread(
    jobs: Sequence[Job],
    devices: Sequence[str],
    parts_dir: Path,
    request: dict[str, Any],
    batch_fixed_s: float,
    deadline_s: float | None,
    problems: Path | None = None,
    lanes_per_device: int = 1,
) -> Schedule:
    """`run_jobs` over the workers of a local cluster: one per device (labelled by the device),
    or several per device (labelled DEVICE-LANE) for untimed work only: timed work never shares
    a GPU, since another process's kernels or host load would land in its times. Part results
    land in `parts_dir`."""
    import distributed

    from atrex_mcp.cluster.dispatch import problem_roots
    from atrex_mcp.cluster.engine import local_cluster, worker_name
    from atrex_mcp.cluster.shards import problem_digest
    from atrex_mcp.problemset.catalog import Catalog

    check_lanes(lanes_per_device, timed=request.get("timing", True))
    parts_dir.mkdir(parents=True, exist_ok=True)
    catalog = Catalog(problems) if problems else Catalog()
    digests = {op: problem_digest(catalog, op) for op in sorted({j.op for j in jobs})}
    labels = [worker_name(d, lane, lanes_per_device) for d in devices for lane in range(1, lanes_per_device + 1)]
    with local_cluster(list(devices), lanes_per_device) as cluster, distributed.Client(cluster) as client:
        address = {str(w["name"]): a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        roots = problem_roots(catalog.roots)
        runners = [ClusterWorker(client, address[label], label, parts_dir, request, roots, digests) for label in labels]
        return run_jobs(jobs, runners, batch_fixed_s, deadline_s)


def speedup(one_gpu: Path, multi_gpu: Path) -> dict[str, Any]:
    """Wall-time speed-up of a multi-GPU baselines.py run over a one-GPU run of the same jobs,
    and how far their per-shape times agree (the stability figure's terms)."""
    from measurements.stability import compare_runs

    walls = [json.loads((d / "run.json").read_text())["schedule"]["makespan_s"] for d in (one_gpu, multi_gpu)]
    return {
        "one_gpu_wall_s": walls[0],
        "multi_gpu_wall_s": walls[1],
        "speedup": round(walls[0] / walls[1], 3) if walls[1] else None,
        "agreement": compare_runs(one_gpu, multi_gpu),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    speed_p = sub.add_parser("speedup", help="compare a one-GPU and a multi-GPU baselines.py run")
    speed_p.add_argument("one_gpu", type=Path)
    speed_p.add_argument("multi_gpu", type=Path)
    speed_p.add_argument("--out", type=Path, help="also write the comparison as JSON here")
    args = parser.parse_args(argv)
    report = speedup(args.one_gpu, args.multi_gpu)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
