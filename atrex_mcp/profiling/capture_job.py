"""The trusted program Nsight Compute wraps: it starts the evaluator's sandbox worker with the
candidate loaded and runs a few checked forward calls of one shape, then exits.

`python -m atrex_mcp.profiling.capture_job JOB.json` (written by profiling.service). ncu sets
its injection variables in this process's environment; the worker gets a minimal environment
from the launcher, so exactly the variables ncu added (the difference to `env_before`) are
passed on to it, and ncu follows it as a child process. The outcome goes to job_result.json
next to the job file.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def _run(job: dict) -> dict:
    from atrex_mcp.catalog import Catalog
    from atrex_mcp.evaluate.evaluator import _Evaluation
    from atrex_mcp.evaluate.models import EvalRequest, ShapeResult

    added = {k: v for k, v in os.environ.items() if job["env_before"].get(k) != v}
    catalog = Catalog([Path(p) for p in job["problems"]])
    evaluation = _Evaluation(EvalRequest(op=job["op"], source=job["source"], shapes=[job["shape"]], seeds=job["calls"]),
                             catalog, None, None)
    scratch = Path(job["scratch"])
    session = evaluation.open_session(scratch, extra_env=added)
    try:
        failure = session.start(first=True)
        if failure is not None:
            return {"ok": False, "error": f"{failure.category}: {failure.message[:800]}"}
        shape = evaluation.shapes[0]
        result = ShapeResult(id=shape.id, correct=False)
        if evaluation.correctness(session, scratch, shape, result) is None:
            return {"ok": False, "error": f"{result.category}: {result.message[:800]}"}
        return {"ok": True, "calls": job["calls"], "device": session.worker_device.get("name", ""),
                "ncu_variables": sorted(added)}
    finally:
        session.stop()


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(1)  # unwinds through _run's finally, which stops the sandbox worker


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)  # the capture's time limit ends us with SIGTERM first
    job_path = Path(argv[1])
    job = json.loads(job_path.read_text())
    try:
        outcome = _run(job)
    except Exception as exc:  # reported to the parent, which falls back to torch.profiler
        outcome = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    (job_path.parent / "job_result.json").write_text(json.dumps(outcome))
    return 0  # the outcome travels in job_result.json; a non-zero exit would read as ncu's own failure


if __name__ == "__main__":
    sys.exit(main(sys.argv))
