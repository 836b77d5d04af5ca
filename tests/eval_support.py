"""Shared by the evaluator tests: a tiny problem set (the real rms_norm reference and input
generator, small shapes, hidden files holding a canary) and a one-call evaluation helper."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from atrex_mcp.evaluate import EvalRequest, EvalResult, evaluate
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.problemset.hardware import load_profile
from atrex_mcp.problemset.roofline import Workload, shape_record

ROOT = Path(__file__).resolve().parent.parent
EXPLOITS = Path(__file__).resolve().parent / "exploits"
EXAMPLES = ROOT / "examples"
CANARY = "ATREX-HIDDEN-CANARY-7f3a9c"
# Stored W/Q of every fixture shape; its T_SOL on h200 is what the roofline function makes of them.
WORKLOAD = Workload(flops={"bf16": 0}, bytes_read=400_000, bytes_written=192_593)
T_SOL_MS = shape_record(WORKLOAD, {"h200": load_profile("h200")})["t_sol_ms"]["h200"]

SHAPES = [
    {"id": "0", "init": {"eps": 1e-6}, "inputs": {"token_count": 4, "hidden_size": 64}},
    {"id": "1", "init": {"eps": 1e-6}, "inputs": {"token_count": 3, "hidden_size": 128}},
    {"id": "smoke", "smoke": True, "init": {"eps": 1e-6}, "inputs": {"token_count": 2, "hidden_size": 32}},
]


def make_problem_root(root: Path) -> Path:
    """<root>/rms_norm with visible files from problems/rms_norm and canary-bearing hidden files."""
    op_dir = root / "rms_norm"
    op_dir.mkdir(parents=True)
    for name in ("reference.py", "input.py"):
        shutil.copy(ROOT / "problems" / "rms_norm" / name, op_dir / name)
    (op_dir / "shapes.json").write_text(json.dumps({"op": "rms_norm", "shapes": SHAPES}))
    (op_dir / "metadata.json").write_text(
        json.dumps(
            {
                "op": "rms_norm",
                "dtype": "bf16",
                "canary": CANARY,
                "shapes": {s["id"]: {"description": CANARY} for s in SHAPES},
            }
        )
    )
    (op_dir / "roofline.json").write_text(
        json.dumps(
            {
                "op": "rms_norm",
                "shapes": {s["id"]: shape_record(WORKLOAD, {"h200": load_profile("h200")}) for s in SHAPES},
            }
        )
    )
    (root / "weights.json").write_text(json.dumps({"weights": {"rms_norm": 1.0}}))
    return root


def run_eval(catalog: Catalog, source: str, shapes: list[str] | None = None, **kwargs) -> EvalResult:
    request = EvalRequest(op="rms_norm", source=source, shapes=shapes or ["0"], seeds=kwargs.pop("seeds", 1), **kwargs)
    return evaluate(request, catalog)


def exploit_source(name: str) -> str:
    return (EXPLOITS / f"{name}.py").read_text()
