"""Does the trusted side follow links a kernel plants in its scratch, on the GPU machine: ncu's
CSV log, the Triton cache's cubins and folders, tmp/ and .cache/ when a worker starts over the
same scratch?

    python3 measurements/planted_links_gpu.py --out measurements/results/planted_links/<date>_<gpu>.json [--no-ncu]

The kernel is examples/rms_norm_triton.py with tests/exploits/plant_links.py appended: at import
it links tmp/ncu.csv, tmp/planted, a cubin and a folder in the Triton cache to a root-owned 0600
file outside scratch (or its 0700 folder), and tries a hard link and a read of it.
1. eval: rms_norm shapes 0 and 1 with timing; the forward on shape 0 aborts the worker after
   printing what it planted, so the evaluator starts a second worker over the same scratch
   (emptying and handing over tmp/ and .cache/) for shape 1, where the links are planted again.
2. ncu: profile_kernel's capture (Nsight Compute wrapping the worker, then the SASS facts read
   from the Triton cache) of shape 2 by the same kernel without the crash.
Each step records whether it held: the file's owner, mode and content unchanged, its content
quoted nowhere in what the step returned, and for ncu either a refused log
(`profiler_log_refused`, ncu having written its log through nothing) or a profile of the kernel.
A failure does not stop the next step. Without a GPU the eval step runs on CPU (Triton's
interpreter, no timing) and the ncu step is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import interpret_without_gpu  # noqa: E402

interpret_without_gpu()

from atrex_mcp.errors import AtrexError  # noqa: E402
from atrex_mcp.evaluate import EvalRequest, evaluate  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from measurements.bench_env import write_report  # noqa: E402

EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"
EXPLOIT = ROOT / "tests" / "exploits" / "plant_links.py"


def kernel_source(target: Path, crash_rows: int | None) -> str:
    targets = {"file": str(target), "crash_rows": crash_rows}
    return EXAMPLE.read_text() + "\n" + EXPLOIT.read_text().replace("TARGETS: dict = {}", f"TARGETS = {targets!r}")


def make_target(tmp: Path) -> tuple[Path, str]:
    """A 0600 file holding a fresh marker, in a 0700 folder: outside any scratch."""
    folder = tmp / "outside"
    folder.mkdir(mode=0o700, parents=True)
    target = folder / "secret.txt"
    marker = f"ATREX-PLANTED-{secrets.token_hex(8)}"
    target.write_text(marker)
    target.chmod(0o600)
    folder.chmod(0o700)
    return target, marker


def state(target: Path) -> dict[str, Any]:
    info, folder = os.stat(target), os.stat(target.parent)
    return {
        "file": [oct(info.st_mode), info.st_uid, info.st_gid, info.st_nlink],
        "folder": [oct(folder.st_mode), folder.st_uid, folder.st_gid],
    }


def planted_outcomes(message: str) -> dict[str, str] | str:
    if "PLANTED " not in message:
        return message[-600:]
    return json.loads(message.split("PLANTED ", 1)[1].splitlines()[0])


def step_eval(catalog: Catalog, tmp: Path) -> dict[str, Any]:
    target, marker = make_target(tmp)
    before = state(target)
    rows = catalog.visible("rms_norm").shape("0").inputs["token_count"]
    result = evaluate(
        EvalRequest(op="rms_norm", source=kernel_source(target, rows), shapes=["0", "1"], seeds=1), catalog
    )
    first, second = (result.shapes + [None, None])[:2]
    text = result.model_dump_json()
    found = {
        "shapes": [
            {"id": s.id, "correct": s.correct, "category": s.category, "time_ms": s.time_ms} for s in result.shapes
        ],
        "planted": planted_outcomes(first.message) if first is not None else "no shape ran",
        "restarts": result.overhead.restarts if result.overhead else None,
        "target_before": before,
        "target_after": state(target),
        "content_unchanged": target.read_text() == marker,
        "quoted": marker in text,
        "isolation": result.isolation.model_dump(mode="json") if result.isolation else {},
    }
    found["held"] = (
        found["target_before"] == found["target_after"]
        and found["content_unchanged"]
        and not found["quoted"]
        and second is not None
        and second.correct
    )
    return found


def step_ncu(catalog: Catalog, tmp: Path) -> dict[str, Any]:
    from atrex_mcp.profiling import ncu as ncu_mod
    from atrex_mcp.profiling.service import capture_counters

    if ncu_mod.ncu_executable() is None:
        return {"held": None, "note": "ncu not installed"}
    target, marker = make_target(tmp)
    before = state(target)
    found: dict[str, Any] = {"target_before": before}
    t0 = time.perf_counter()
    try:
        report = capture_counters("rms_norm", kernel_source(target, None), "2", catalog, roofline=None, timeout_s=240)
        text = report.model_dump_json()
        found["outcome"] = {
            "profiled": bool(report.kernels),
            "kernels": [(k.name[:60], k.launches, k.origin) for k in report.kernels],
            "sass": len(report.sass),
        }
    except AtrexError as exc:
        text = exc.info.model_dump_json()
        found["outcome"] = {"error": exc.info.model_dump(mode="json")}
    found["seconds"] = round(time.perf_counter() - t0, 1)
    found["target_after"] = state(target)
    found["content_unchanged"] = target.read_text() == marker
    found["quoted"] = marker in text
    error = found["outcome"].get("error") or {}
    understood = bool(found["outcome"].get("profiled")) or error.get("category") == "profiler_log_refused"
    found["held"] = (
        before == found["target_after"] and found["content_unchanged"] and not found["quoted"] and understood
    )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-ncu", action="store_true")
    args = parser.parse_args(argv)
    catalog = Catalog()
    report: dict[str, Any] = {
        "question": "links planted in a worker's scratch: does the trusted side follow them",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "uid": os.geteuid(),
    }
    steps = [("eval", step_eval)] + ([] if args.no_ncu else [("ncu", step_ncu)])
    with tempfile.TemporaryDirectory(prefix="atrex-planted-") as tmp:
        for name, step in steps:
            try:
                report[name] = step(catalog, Path(tmp) / name)
            except Exception:  # noqa: BLE001 - a step that breaks is a result, and the next one still runs
                report[name] = {"held": False, "error": traceback.format_exc()[-3000:]}
            print(name, json.dumps(report[name], default=str)[:1500], flush=True)
    write_report(args.out, report)
    return 0 if all(report[name].get("held") is not False for name, _ in steps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
