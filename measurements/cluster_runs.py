"""What the cluster measurements share: a bench run made from a candidate set without an agent,
the verdicts of its evaluation shape by shape, each worker's busy time, what each worker's GPU
is, and the host record (date, GPU, versions) and file names of a report.

A run directory is what `atrex-mcp bench eval` judges; here its submissions are written
directly (the wiki kernels, or any {op: source}), so the local path and the cluster path can be
given identical copies of one candidate set.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from collections import defaultdict
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from atrex_mcp.agentbench.layout import RunLayout, RunStore  # noqa: E402
from atrex_mcp.agentbench.models import OpState, Submission  # noqa: E402
from atrex_mcp.agentbench.runner import RunRequest, open_run  # noqa: E402
from atrex_mcp.cluster.dispatch import ShardFile, shards_dir  # noqa: E402
from atrex_mcp.cluster.engine import visible_devices  # noqa: E402
from atrex_mcp.errors import AtrexError  # noqa: E402
from atrex_mcp.evaluate.models import EvalResult  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402

KERNELS = ROOT / "gpu_wiki" / "kernels"
CPU_GPU = "cpu (Triton interpreter, a fake GPU=1 resource per worker)"  # what a worker without CUDA judges on
ONE_GPU = "n/a (one GPU)"  # a speed-up on a host with one GPU
ONE_GPU_NOTE = "one GPU: the 1-worker and N-worker legs are the same leg; no speed-up measured"


def candidate_set(ops: list[str] | None = None, fill_with_reference: bool = True) -> dict[str, str]:
    """{op: source}: the wiki's kernel of each operator; an operator without one gets its own
    reference.py (the eager reference as candidate) when `fill_with_reference`, so every shape
    of the problem set is judged."""
    catalog = Catalog()
    chosen = ops or catalog.names()
    sources = {}
    for op in chosen:
        kernel = KERNELS / f"{op}.py"
        if kernel.is_file():
            sources[op] = kernel.read_text()
        elif fill_with_reference:
            sources[op] = catalog.visible(op).reference_source
    return sources


MIN_EVALUATION_S = 5.0  # budget left below which a script starts no further evaluation (its worker alone takes seconds)


def within_budget(request: Any, deadline: float, hint: str, min_s: float = MIN_EVALUATION_S) -> Any:
    """`request` (an EvalRequest) with the budget left before `deadline` (time.monotonic()) as its
    deadline, for a script that wraps bench eval's `evaluate`; with less than `min_s` left, the
    evaluation does not start: budget_spent, for which bench eval records no result."""
    left = deadline - time.monotonic()
    if left < min_s:
        raise AtrexError("internal", "budget_spent", "not started: the script's --budget-s is spent", hint)
    return request.model_copy(update={"deadline_s": left})


def check_workers(workers: int) -> None:
    """The host has `workers` GPUs (any count on a host without one: its workers are CPU slots)."""
    if workers < 1 or len(visible_devices(workers)) < workers:
        visible = visible_devices(None)
        raise AtrexError(
            "input",
            "bad_workers",
            f"--workers {workers}, but this host has {len(visible)} GPU(s) ({', '.join(visible)}).",
            f"Give 1 to {len(visible)}: one worker per GPU.",
        )


def check_shapes(ops: list[str], shapes: list[str]) -> None:
    """Every shape id exists for every operator (else the problem set's AtrexError, naming the
    valid ids), so a typo is refused before any cluster starts."""
    catalog = Catalog()
    for op in ops:
        for shape in shapes:
            catalog.visible(op).shape(shape)


def make_run(out: Path, sources: dict[str, str]) -> Path:
    """A finished bench run whose submissions are `sources` (one per operator)."""
    _, layout = open_run(RunRequest(out=out, agent="/bin/true", ops=",".join(sources), agent_uid="same"))
    store = RunStore(layout)
    for op, source in sources.items():
        layout.submission_dir(op).mkdir(parents=True, exist_ok=True)
        (layout.submission_dir(op) / f"{op}.py").write_text(source)
        store.save_state(
            OpState(
                op=op,
                status="done",
                attempts=1,
                elapsed_s=0.0,
                submission=Submission(outcome="submitted", artifact=f"ops/{op}/submission/{op}.py"),
            )
        )
    return layout.root


def verdicts(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Per evaluated operator: compiled, and per shape (correct, stage, category); no times."""
    found = {}
    for path in sorted((run_dir / "eval").glob("*.json")):
        if path.name.endswith(".error.json") or path.name in ("settings.json", "cluster.json"):
            continue
        result = EvalResult.model_validate_json(path.read_text())
        found[result.op] = {
            "compiled": result.compiled,
            "shapes": {s.id: (s.correct, s.stage, s.category) for s in result.shapes},
        }
    return found


def differences(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> list[str]:
    """Every operator or shape whose verdict differs between two evaluations (empty: identical)."""
    diffs = []
    for op in sorted(set(a) | set(b)):
        if op not in a or op not in b:
            diffs.append(f"{op}: evaluated in only one of the two")
            continue
        if a[op]["compiled"] != b[op]["compiled"]:
            diffs.append(f"{op}: compiled {a[op]['compiled']} vs {b[op]['compiled']}")
        for shape in sorted(set(a[op]["shapes"]) | set(b[op]["shapes"])):
            left, right = a[op]["shapes"].get(shape), b[op]["shapes"].get(shape)
            if left != right:
                diffs.append(f"{op}/{shape}: {left} vs {right}")
    return diffs


def times(run_dir: Path) -> dict[tuple[str, str], float]:
    """(op, shape) -> median time in ms, for the shapes that were timed."""
    found = {}
    for path in sorted((run_dir / "eval").glob("*.json")):
        if path.name.endswith(".error.json") or path.name in ("settings.json", "cluster.json"):
            continue
        result = EvalResult.model_validate_json(path.read_text())
        found.update({(result.op, s.id): s.time_ms for s in result.shapes if s.time_ms is not None})
    return found


def failed_ops(run_dir: Path) -> list[str]:
    """Operators whose latest evaluation failed (eval/OP.error.json; a later success removes it)."""
    return sorted(p.name.removesuffix(".error.json") for p in (run_dir / "eval").glob("*.error.json"))


def busy_seconds(run_dir: Path) -> dict[str, float]:
    """Worker name -> seconds spent judging the shards it finished (from the shard files)."""
    busy: dict[str, float] = defaultdict(float)
    for path in sorted(shards_dir(RunLayout(run_dir).eval_dir).glob("*.json")):
        shard = ShardFile.model_validate_json(path.read_text())
        judged = [a for a in shard.attempts if a.outcome == "judged"]
        if judged and shard.seconds is not None:
            busy[judged[-1].name or judged[-1].worker] += shard.seconds
    return dict(busy)


def worker_gpu() -> dict[str, str]:
    """Run on a worker: the device it was pinned to and its name; importing the judge here also
    takes the worker's own imports out of the first judging call it serves."""
    import torch

    import atrex_mcp.cluster.shards
    import atrex_mcp.evaluate.evaluator  # noqa: F401

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else CPU_GPU
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "gpu": name}


def host_record(gpu: str) -> dict[str, Any]:
    """Date, GPU and the versions a result depends on."""
    import torch
    import triton

    versions = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__}
    for package in ("dask", "distributed", "dask-cuda", "mcp", "atrex-mcp"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    versions["cuda"] = torch.version.cuda
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": gpu,
        "host": platform.node(),
        "commit": _commit(),
        "versions": versions,
    }


def _commit() -> str | None:
    """ATREX_COMMIT when set (a tree sent to a device without its history, or with a stale one),
    else what git says of this tree."""
    if os.environ.get("ATREX_COMMIT"):
        return os.environ["ATREX_COMMIT"]
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):  # no git on the host: the tree travelled without it
        return None
    return done.stdout.strip() or None


def report_stem(date: str, gpu: str, gpus: int) -> str:
    """`<date>_<gpu>` as measurements/results names its files: 2026-12-02_h200x8."""
    slug = "cpu" if gpu == CPU_GPU else re.sub(r"[^a-z0-9]+", "-", gpu.lower().replace("nvidia", "")).strip("-")
    return f"{date[:10]}_{slug}{f'x{gpus}' if gpus > 1 else ''}"


def report_head(title: str, report: dict[str, Any]) -> list[str]:
    """A report's opening lines: its title, then when, where, at which commit and versions, and the command."""
    return [
        f"# {title}",
        "",
        f"{report['date']}, {report['gpu']} x {report['gpus']}, commit {report['commit'] or 'unknown'}; "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v),
        "",
        f"`{report['command']}`",
        "",
    ]


def _cell(value: Any) -> str:
    """A table cell on one line: a multi-line message (an exception's text) would end the row."""
    return "" if value is None else " ".join(str(value).split()).replace("|", "\\|")


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
