"""Shared fixtures of the run-memory tests: a one-operator problem root with hand-written hidden
files, and a judge whose correctness and timings the test chooses (injected timings).

Candidate sources carry their behaviour in comments: `# speed: 1.3` makes the kernel 1.3x as
fast as speed 1.0; `# wrong` makes it fail correctness on shape 1.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
from pathlib import Path

import numpy as np

from atrex_mcp.paths import REPO_ROOT
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.runs.acceptance import PairedSamples
from atrex_mcp.runs.iterations import RunService
from atrex_mcp.runs.measure import CheckResult
from atrex_mcp.runs.models import Category, KernelTimes, Plan, ShapeCheck
from atrex_mcp.runs.store import RunStore

OP = "rms_norm"
SHAPES = ["0", "1"]
BASE_MS = {"0": 0.020, "1": 0.040}


def make_problem_root(root: Path) -> Path:
    """rms_norm's visible files from the repository plus hand-written hidden files for shapes 0, 1."""
    folder = root / OP
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("reference.py", "input.py"):
        shutil.copy(REPO_ROOT / "problems" / OP / name, folder / name)
    shapes = [
        {"id": "0", "init": {"eps": 1e-6}, "inputs": {"token_count": 2500, "hidden_size": 1024}},
        {"id": "1", "init": {"eps": 1e-6}, "inputs": {"token_count": 4968, "hidden_size": 1024}},
        {"id": "smoke", "smoke": True, "init": {"eps": 1e-6}, "inputs": {"token_count": 4, "hidden_size": 64}},
    ]
    (folder / "shapes.json").write_text(json.dumps({"op": OP, "shapes": shapes}))
    roofline = {"op": OP, "counting": "closed-form SPEC §3", "shapes": {}}
    for s in shapes[:2]:
        t, h = s["inputs"]["token_count"], s["inputs"]["hidden_size"]
        read, written = 2 * t * h + 2 * h, 2 * t * h
        roofline["shapes"][s["id"]] = {
            "flops": {"bf16": 3 * t * h + t},
            "bytes_read": read,
            "bytes_written": written,
            "arithmetic_intensity": (3 * t * h + t) / (read + written),
            "t_sol_ms": {"h200": 1000 * (read + written) / 4.8e12},
            "bound": {"h200": "memory"},
        }
    (folder / "roofline.json").write_text(json.dumps(roofline))
    (folder / "metadata.json").write_text(json.dumps({"op": OP, "dtype": "bf16", "shapes": {}}))
    return root


KERNEL = (REPO_ROOT / "tests" / "fixtures" / "kernels" / "rms_norm_rowwise.py").read_text()


def source(speed: float, tag: str, *, wrong: bool = False) -> str:
    """A contract-valid kernel file whose header comments script the judge."""
    return f"# kernel {tag}\n# speed: {speed}\n" + ("# wrong\n" if wrong else "") + KERNEL


def _speed(text: str) -> float:
    match = re.search(r"# speed: ([0-9.]+)", text)
    return float(match.group(1)) if match else 1.0


class ScriptedJudge:
    """Correctness from the `# wrong` marker; interleaved timings from the `# speed:` markers with
    1% jitter and a shared per-pair drift, seeded by the two sources."""

    def __init__(self, pairs: int = 30, on_time_pair=None):
        self.pairs = pairs
        self.on_time_pair = on_time_pair
        self.calls = {"check": 0, "time_pair": 0}
        self._lock = threading.Lock()

    def check(self, op, source, shapes, *, hardware, dsl, timing, progress=None, cancel=None):
        with self._lock:
            self.calls["check"] += 1
        wrong = "# wrong" in source
        checks = [
            ShapeCheck(
                id=s,
                correct=not (wrong and s == "1"),
                category="numeric_mismatch" if wrong and s == "1" else None,
                message="max abs err 0.5" if wrong and s == "1" else "",
            )
            for s in shapes
        ]
        times = KernelTimes(time_ms={s: BASE_MS[s] / _speed(source) for s in shapes}) if timing else KernelTimes()
        return CheckResult(compiled=True, checks=checks, times=times)

    def time_pair(self, op, accepted_source, candidate_source, shapes, *, hardware, progress=None, cancel=None):
        with self._lock:
            self.calls["time_pair"] += 1
        if self.on_time_pair is not None:
            self.on_time_pair()
        seed = int(hashlib.sha256((accepted_source + candidate_source).encode()).hexdigest()[:8], 16)
        rng = np.random.default_rng(seed)
        out = {}
        for s in shapes:
            drift = 1 + 0.03 * rng.standard_normal(self.pairs)
            a = BASE_MS[s] / _speed(accepted_source) * drift * (1 + 0.01 * rng.standard_normal(self.pairs))
            c = BASE_MS[s] / _speed(candidate_source) * drift * (1 + 0.01 * rng.standard_normal(self.pairs))
            out[s] = PairedSamples(accepted_ms=list(a), candidate_ms=list(c))
        return out


def plan(profile_id: str, category: Category = Category.tiling, expected: float = 1.1) -> Plan:
    return Plan(
        change="bigger row block",
        bottleneck="memory",
        bottleneck_detail="DRAM 40% of peak",
        evidence=[profile_id],
        knowledge=["patterns/row-reductions"],
        expected_effect=expected,
        risks=["register pressure"],
        category=category,
    )


def make_service(tmp_path: Path, judge: ScriptedJudge | None = None) -> RunService:
    root = make_problem_root(tmp_path / "problems")
    return RunService(RunStore(tmp_path / "state"), Catalog([root]), judge or ScriptedJudge())


def store_profile(service: RunService, run_id: str | None = None) -> str:
    return service.store.save_profile(
        op=OP, shape="0", source_sha256="0" * 64, tool="ncu", report={"bottleneck": {"kind": "memory"}}, run_id=run_id
    )


def loop_with_iterations(tmp_path: Path, speeds: list[float]) -> tuple[RunService, str]:
    """A run with a baseline (speed 1.0) and one iteration per entry of `speeds`."""
    service = make_service(tmp_path)
    run = service.start_run(OP, SHAPES)
    service.submit_baseline(run.run_id, source(1.0, "baseline"))
    profile_id = store_profile(service, run.run_id)
    categories = list(Category)
    for i, speed in enumerate(speeds):
        service.record_iteration(run.run_id, plan(profile_id, categories[i % len(categories)]), source(speed, f"it{i}"))
    return service, run.run_id
