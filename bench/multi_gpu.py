#!/usr/bin/env python3
"""One evaluation spread over several GPUs: one process per GPU (CUDA_VISIBLE_DEVICES set
before it starts), all pulling from one queue of (operator, shape) jobs, largest first.

Why this shape: the evaluator starts a sandbox worker per evaluate() call, so a GPU process
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

    python3 bench/multi_gpu.py speedup ONE_GPU_DIR MULTI_GPU_DIR   # compare two baselines.py runs
(the per-GPU process itself is `python3 bench/multi_gpu.py serve`, started by `run_jobs`.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "bench")) if p not in sys.path]

from eval_cost import Job  # noqa: E402

BUDGET_REASON = "budget:"  # starts the not_run reason of a job the time left could not fit (never started)
MIN_DEADLINE_S = 1e-3  # a batch that reaches its process after the deadline still answers (all not run)


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
        return {"workers": self.workers, "makespan_s": round(self.makespan_s, 2), "sequential_s": round(self.sequential_s, 2),
                "speedup_vs_sequential": round(self.sequential_s / self.makespan_s, 3) if self.makespan_s > 0 else None,
                "busy_s": {w: round(b, 2) for w, b in busy.items()}, "batches": [asdict(o) for o in self.outcomes],
                "not_run": self.not_run}


def batch_cap(jobs: Sequence[Job], workers: int, batch_fixed_s: float) -> float | None:
    """No cap on one GPU (one batch per operator); on several GPUs half a GPU's fair share, so
    the largest operators are split across GPUs while small operators stay whole. A deadline
    needs no cap of its own: a batch stopped at the deadline loses only the shape in progress."""
    if workers < 2:
        return None
    ops = {j.op for j in jobs}
    return (sum(j.seconds for j in jobs) + len(ops) * batch_fixed_s) / (2 * workers)


def run_jobs(jobs: Sequence[Job], runners: Sequence[Runner], batch_fixed_s: float, deadline_s: float | None = None) -> Schedule:
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
            outcome = BatchOutcome(worker=runner.label, op=batch.op, shapes=batch.shapes, predicted_s=round(batch.predicted_s, 2),
                                   status=reply.get("status", "error"), started_s=round(started, 2),
                                   ended_s=round(time.monotonic() - t0, 2), result_file=reply.get("result_file"),
                                   message=str(reply.get("message", ""))[-2000:], visible_devices=reply.get("visible_devices"),
                                   device_name=reply.get("device_name"))
            with lock:
                schedule.outcomes.append(outcome)
                if outcome.status == "partial":
                    schedule.not_run += [{"op": batch.op, "shape": n["shape"], "reason": n["reason"]} for n in reply.get("not_run", [])]
                elif outcome.status != "ok":
                    schedule.not_run += [{"op": batch.op, "shape": s, "reason": f"error: {outcome.message[:300]}"}
                                         for s in batch.shapes]
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
        why = (f"every GPU process exited ({', '.join(failed)})" if len(failed) == len(runners)
               else f"{BUDGET_REASON} predicted {job.seconds + batch_fixed_s:.0f} s, {left:.0f} s left")
        schedule.not_run.append({"op": job.op, "shape": job.shape, "reason": why})
    return schedule


class GpuProcess:
    """One long-lived process pinned to one GPU through CUDA_VISIBLE_DEVICES; it evaluates
    batches sent as JSON lines and answers on a pipe of its own."""

    def __init__(self, device: str, parts_dir: Path, request: dict[str, Any], problems: Path | None = None,
                 label: str | None = None):
        self.label, self.parts_dir, self.request = label or device, parts_dir, request
        self._count = 0
        read_fd, write_fd = os.pipe()
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": device, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, str(Path(__file__).resolve()), "serve", "--reply-fd", str(write_fd)]
        if problems is not None:
            argv += ["--problems", str(problems)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env, pass_fds=(write_fd,), text=True)
        os.close(write_fd)
        self._replies = os.fdopen(read_fd, "r")

    def run(self, batch: Batch, deadline_epoch: float | None) -> dict[str, Any]:
        self._count += 1
        part = self.parts_dir / f"{batch.op}.{self.label.replace(',', '_')}.{self._count}.json"
        message = {"request": {**self.request, "op": batch.op, "shapes": batch.shapes}, "deadline_epoch": deadline_epoch,
                   "part_file": str(part)}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self._replies.readline()
        if not line:
            return {"status": "error", "fatal": True, "message": f"GPU process {self.label} exited ({self.proc.wait()})"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._replies.close()


def gpu_devices(count: int | None) -> list[str]:
    """CUDA_VISIBLE_DEVICES values, one per process: the first `count` GPUs this process may use
    (its own CUDA_VISIBLE_DEVICES when set); without a GPU, `count` (default 1) CPU slots."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())]
    if not ids:  # CPU: the value is only a label; torch sees no GPU either way
        ids = [str(i) for i in range(count or 1)]
    return ids[: count or len(ids)]


def check_lanes(lanes_per_device: int, timed: bool) -> None:
    """Raises ValueError unless `lanes_per_device` processes may share each GPU: at least one,
    and more only for untimed work."""
    if lanes_per_device < 1:
        raise ValueError(f"lanes_per_device must be at least 1, not {lanes_per_device}")
    if lanes_per_device > 1 and timed:
        raise ValueError("several lanes per GPU are for untimed evaluations (timing: false) only")


def run_spread(jobs: Sequence[Job], devices: Sequence[str], parts_dir: Path, request: dict[str, Any], batch_fixed_s: float,
               deadline_s: float | None, problems: Path | None = None, lanes_per_device: int = 1) -> Schedule:
    """`run_jobs` over one GpuProcess per device (labelled by the device), or several per device
    (labelled DEVICE-LANE) for untimed work only: timed work never shares a GPU, since another
    process's kernels or host load would land in its times. Part results land in `parts_dir`."""
    check_lanes(lanes_per_device, timed=request.get("timing", True))
    parts_dir.mkdir(parents=True, exist_ok=True)
    runners = [GpuProcess(d, parts_dir, request, problems, label=d if lanes_per_device == 1 else f"{d}-{lane}")
               for d in devices for lane in range(1, lanes_per_device + 1)]
    try:
        return run_jobs(jobs, runners, batch_fixed_s, deadline_s)
    finally:
        for r in runners:
            r.close()


def merge_results(parts: Sequence[Any], shape_order: Sequence[str]) -> Any:
    """One EvalResult per operator from the results of its batches: shapes in catalog order,
    S_i recomputed over all of them (partial when a batch was stopped at the deadline),
    overhead and seeds summed up."""
    from atrex_mcp.evaluate import scoring

    parts = sorted(parts, key=lambda p: p.started_at)
    merged = parts[0].model_copy(deep=True)
    rank = {sid: i for i, sid in enumerate(shape_order)}
    merged.shapes = sorted((s for p in parts for s in p.shapes), key=lambda s: rank.get(s.id, len(rank)))
    merged.compiled = any(p.compiled for p in parts)
    merged.compile_error = None if merged.compiled else parts[0].compile_error
    merged.partial = next((p.partial for p in parts if p.partial), None)
    merged.operator_score, merged.operator_score_note = scoring.shapes_operator_score(merged.shapes)
    merged.integrity = sorted({i for p in parts for i in p.integrity})
    merged.seeds = [seed for p in parts for seed in p.seeds]
    merged.isolation.warnings = sorted({w for p in parts for w in p.isolation.warnings})
    for name in type(merged.overhead).model_fields:
        setattr(merged.overhead, name, sum(getattr(p.overhead, name) for p in parts))
    return merged


def serve(reply_fd: int, problems: Path | None) -> int:
    """The per-GPU process: evaluate each batch read from stdin, write its EvalResult to the
    part file, answer one JSON line. A batch's evaluation gets the time left to the schedule's
    deadline as its deadline_s; stopped there, its result is partial and the reply lists the
    shapes it did not judge, with why."""
    from atrex_mcp.catalog import Catalog
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.evaluate import EvalRequest, Standby, evaluate

    replies = os.fdopen(reply_fd, "w")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the reply channel
    catalog = Catalog(problems) if problems else Catalog()
    standby = Standby()  # each batch's worker is spawned while the batch before it runs
    for line in sys.stdin:
        job = json.loads(line)
        request = dict(job["request"])
        if job.get("deadline_epoch") is not None:
            request["deadline_s"] = max(job["deadline_epoch"] - time.time(), MIN_DEADLINE_S)
        reply: dict[str, Any] = {"visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        try:
            result = evaluate(EvalRequest(**request), catalog, standby=standby)
            Path(job["part_file"]).write_text(result.model_dump_json(indent=1))
            reply.update(status="partial" if result.partial else "ok", result_file=job["part_file"],
                         device_name=result.device.name,
                         not_run=[{"shape": s.id, "reason": f"{s.category}: {s.message}"} for s in result.shapes if not s.judged])
        except AtrexError as exc:
            reply.update(status="error", message=str(exc))
        except Exception as exc:  # noqa: BLE001 — reported with the batch; the next batch still runs
            reply.update(status="error", message=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    standby.close()
    return 0


def speedup(one_gpu: Path, multi_gpu: Path) -> dict[str, Any]:
    """Wall-time speed-up of a multi-GPU baselines.py run over a one-GPU run of the same jobs,
    and how far their per-shape times agree (the stability figure's terms)."""
    from stability import compare_runs

    walls = [json.loads((d / "run.json").read_text())["schedule"]["makespan_s"] for d in (one_gpu, multi_gpu)]
    return {"one_gpu_wall_s": walls[0], "multi_gpu_wall_s": walls[1],
            "speedup": round(walls[0] / walls[1], 3) if walls[1] else None, "agreement": compare_runs(one_gpu, multi_gpu)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve_p = sub.add_parser("serve", help="the per-GPU process (started by run_jobs)")
    serve_p.add_argument("--reply-fd", type=int, required=True)
    serve_p.add_argument("--problems", type=Path)
    speed_p = sub.add_parser("speedup", help="compare a one-GPU and a multi-GPU baselines.py run")
    speed_p.add_argument("one_gpu", type=Path)
    speed_p.add_argument("multi_gpu", type=Path)
    speed_p.add_argument("--out", type=Path, help="also write the comparison as JSON here")
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        return serve(args.reply_fd, args.problems)
    report = speedup(args.one_gpu, args.multi_gpu)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
