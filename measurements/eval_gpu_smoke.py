"""Evaluator on the GPU: example Triton kernels on every shape of their operators (with S),
the exploit corpus's GPU outcomes, and the evaluator's own overhead split.

    python3 measurements/eval_gpu_smoke.py [--out measurements/results] [--budget-s 450] [--quick]
        [--examples rms_norm,silu_and_mul] [--exploits side_stream,output_cache_by_pointer,…] [--no-baselines]

Steps run in order of value; each is wrapped so a failure is recorded and the next step
runs; a step that would start past the budget is recorded as skipped. Results:
eval_gpu_smoke.json under --out (everything) and eval_gpu_smoke.md (the summary).
If the positive example fails on every shape, one shape is re-run with Landlock off
(ATREX_SANDBOX_LANDLOCK=0) to tell a sandbox problem from a kernel problem.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from atrex_mcp.evaluate import EvalRequest, evaluate  # noqa: E402
from atrex_mcp.evaluate import taxonomy as tx  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402

EXPLOITS = ROOT / "tests" / "exploits"
EXAMPLES = {
    "rms_norm": ROOT / "examples" / "rms_norm_triton.py",
    "silu_and_mul": ROOT / "examples" / "silu_and_mul_triton.py",
}
# rms_norm shapes for the exploits: tiny (3×128), mid (2500×1024), large (505888×128, few timing sets).
EXPLOIT_SHAPES = ["15", "0", "27"]


def _shape_view(s) -> dict:
    return {
        "id": s.id,
        "correct": s.correct,
        "stage": s.stage,
        "category": s.category,
        "time_ms": s.time_ms,
        "iqr_ms": s.iqr_ms,
        "score": s.score,
        "dsl_share": s.dsl_share,
        "integrity": s.integrity,
        "message": s.message[:400],
        "score_note": s.score_note,
        "timing_note": s.timing_note,
        "input_sets": s.timing.input_sets if s.timing else None,
        "calls": s.timing.calls if s.timing else None,
        "sm_clock_mhz": s.timing.sm_clock_mhz if s.timing else None,
        "sm_below_max_fraction": s.timing.sm_below_max_fraction if s.timing else None,
        "spin_us": s.timing.spin_us if s.timing else None,
        "reuse_compared": s.timing.reuse_compared if s.timing else None,
        "host_late_calls": s.timing.host_late_calls if s.timing else None,
        "throttle": s.timing.throttle_reasons if s.timing else None,
        "kernels": [(k.name[:80], round(k.time_us, 2), k.origin) for k in s.kernels[:6]],
        "seconds": s.seconds,
    }


def _verdict(name: str, result) -> tuple[bool, str]:
    """Did the exploit get the outcome its header promises? (ok, what happened)"""
    shapes = result.shapes
    cats = sorted({f"{s.stage}/{s.category}" for s in shapes if s.category})
    flags = sorted({i for s in shapes for i in s.integrity})
    seen = f"categories={cats} integrity={flags} compiled={result.compiled}"
    all_fail = lambda cat: bool(shapes) and all((not s.correct) and s.category == cat for s in shapes)  # noqa: E731
    expectations = {
        # a replay in any timed call is caught by the per-call output digests; on a shape where the
        # cache never hit, the honest computation it fell back to is timed like any eager kernel
        "output_cache_by_pointer": lambda: (
            all(not s.correct or s.time_ms is not None for s in shapes) and any(not s.correct for s in shapes)
        ),
        "lazy_output": lambda: all_fail(tx.WRONG_OUTPUT_TYPE),
        "wrong_dtype": lambda: all_fail(tx.WRONG_DTYPE),
        "shrink_output_arena": lambda: all(s.correct for s in shapes),  # every shrink of the arena refused
        # writing into fds 3..63 may hit the CUDA driver's own fds (cuda_fault): rejected either way
        "fake_results": lambda: (
            bool(shapes) and all(not s.correct and s.stage in (tx.RUNTIME, tx.CORRECTNESS) for s in shapes)
        ),
        "monkeypatch_primitives": lambda: all_fail(tx.TIMING_TAMPERED) and tx.PRIMITIVES_REPLACED in result.integrity,
        "huge_allocation": lambda: all_fail(tx.OOM),
        "hang": lambda: all_fail(tx.TIMEOUT),
        "escape_process_group": lambda: all_fail(tx.TIMEOUT),
        "warmup_then_cheat": lambda: (
            any(s.category == tx.TIMED_OUTPUT_MISMATCH for s in shapes) and not any(s.score for s in shapes)
        ),
        # defeated when the hidden work is in the time: flagged (and counted), or the time covers
        # the device time of the profiled forward (all streams)
        "side_stream": lambda: all(
            not s.correct
            or tx.SIDE_STREAM_WORK in s.integrity
            or (s.time_ms or 0) >= 0.9 * sum(k.time_us for k in s.kernels) / 1e3
            for s in shapes
        ),
        "pytorch_fallback": lambda: all(s.correct and s.dsl_share == 0.0 for s in shapes),
        # its forward hashes the input on the host (.cpu()): right values, but no CUDA graph can be
        # captured, so each shape is scored at no less than the judge's own wall per call (fresh inputs: no hits)
        "output_cache_by_content": lambda: all(
            s.correct and s.timing is not None and s.timing.clock_ms is not None and s.time_ms >= s.timing.clock_ms
            for s in shapes
        ),
        "segfault": lambda: any(s.category == tx.CRASH for s in shapes) and any(s.correct for s in shapes),
        "cuda_fault": lambda: any(s.category == tx.CUDA_FAULT for s in shapes) and any(s.correct for s in shapes),
        "read_hidden_files": lambda: _nothing_read(result),
    }
    check = expectations.get(name)
    return (bool(check()) if check else False), seen


def _nothing_read(result) -> bool:
    """Every read attempt of read_hidden_files ended in an OS refusal or absence."""
    message = result.compile_error.message if result.compile_error else ""
    if result.compiled or "LEAK " not in message or tx.HIDDEN_DATA_LEAK in result.integrity:
        return False
    attempts = json.loads(message.split("LEAK ", 1)[1].splitlines()[0])
    return all(v in ("PermissionError", "FileNotFoundError") for v in attempts.values())


def _read_hidden_source(catalog: Catalog) -> str:
    op_dir = catalog.problem_dir("rms_norm")
    targets = [
        str(op_dir / "metadata.json"),
        str(op_dir / "roofline.json"),
        str(op_dir.parent / "weights.json"),
        f"/proc/{os.getpid()}/environ",
        f"/proc/{os.getpid()}/cmdline",
    ]
    return (EXPLOITS / "read_hidden_files.py").read_text().replace("TARGETS: list[str] = []", f"TARGETS = {targets!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results")
    parser.add_argument("--budget-s", type=float, default=450.0)
    parser.add_argument("--quick", action="store_true", help="examples on 8 shapes each instead of all")
    parser.add_argument("--examples", help="comma-separated example operators to run (default: both)")
    parser.add_argument("--exploits", help="comma-separated exploits to run (default: all)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the eager and torch-compile baselines")
    parser.add_argument("--shapes", help="comma-separated shape ids for every step (a CPU dry run: --shapes smoke)")
    args = parser.parse_args()
    t0 = time.monotonic()
    deadline = t0 + args.budget_s
    catalog = Catalog()
    report: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "steps": [],
        "examples": {},
        "exploits": {},
        "baselines": {},
    }
    import torch

    report["torch"] = torch.__version__
    report["cuda_available"] = torch.cuda.is_available()

    def step(name: str, estimate_s: float, fn) -> None:
        if time.monotonic() + estimate_s > deadline:
            report["steps"].append({"name": name, "status": "skipped: budget"})
            print(f"[skip] {name} (budget)", flush=True)
            return
        s0 = time.monotonic()
        try:
            fn()
            report["steps"].append({"name": name, "status": "ok", "seconds": round(time.monotonic() - s0, 2)})
            print(f"[ok]   {name} {time.monotonic() - s0:.1f}s", flush=True)
        except BaseException as exc:  # noqa: BLE001 — record and go on
            report["steps"].append(
                {
                    "name": name,
                    "status": "error",
                    "seconds": round(time.monotonic() - s0, 2),
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-3000:],
                }
            )
            print(f"[err]  {name}: {type(exc).__name__}: {exc}", flush=True)
        _write(args.out, report)

    def run_example(op: str) -> None:
        shapes = [s.id for s in catalog.visible(op).scored_shapes]
        if args.shapes:
            shapes = args.shapes.split(",")
        elif args.quick:
            shapes = shapes[:: max(1, len(shapes) // 8)][:8]
        remaining = deadline - time.monotonic() - 150  # keep room for the exploits
        result = evaluate(
            EvalRequest(
                op=op,
                source=EXAMPLES[op].read_text(),
                shapes=shapes,
                seeds=5,
                timeout_s=max(30.0, min(120.0, remaining / 2)),
            ),
            catalog,
        )
        per_shape = {
            k: [s.seconds.get(k) for s in result.shapes if s.seconds.get(k) is not None]
            for k in ("correctness", "first_call_extra", "reference_and_compare", "timing", "profile")
        }
        report["examples"][op] = {
            "compiled": result.compiled,
            "operator_score": result.operator_score,
            "note": result.operator_score_note,
            "correct": sum(s.correct for s in result.shapes),
            "shapes": len(result.shapes),
            "device": result.device.model_dump(),
            "isolation": result.isolation.model_dump(),
            "overhead": result.overhead.model_dump(),
            "per_shape_seconds_median": {k: (statistics.median(v) if v else None) for k, v in per_shape.items()},
            "per_shape_seconds_max": {k: (max(v) if v else None) for k, v in per_shape.items()},
            "results": [_shape_view(s) for s in result.shapes],
        }
        if not any(s.correct for s in result.shapes):
            os.environ["ATREX_SANDBOX_LANDLOCK"] = "0"
            try:
                probe = evaluate(
                    EvalRequest(op=op, source=EXAMPLES[op].read_text(), shapes=shapes[:1], seeds=1), catalog
                )
                report["examples"][op]["diagnosis_without_landlock"] = [_shape_view(s) for s in probe.shapes]
            finally:
                os.environ.pop("ATREX_SANDBOX_LANDLOCK", None)

    def run_exploit(name: str) -> None:
        source = _read_hidden_source(catalog) if name == "read_hidden_files" else (EXPLOITS / f"{name}.py").read_text()
        shapes = (
            EXPLOIT_SHAPES[:1]
            if name in ("hang", "escape_process_group", "huge_allocation", "read_hidden_files")
            else EXPLOIT_SHAPES
        )
        if name in ("segfault", "cuda_fault"):
            shapes = ["15", "0"]  # the first (H=128) faults, the second must still pass
        if args.shapes:
            shapes = args.shapes.split(",")
        timeout = 10.0 if name in ("hang", "escape_process_group") else 90.0
        result = evaluate(EvalRequest(op="rms_norm", source=source, shapes=shapes, seeds=3, timeout_s=timeout), catalog)
        ok, seen = _verdict(name, result)
        report["exploits"][name] = {
            "as_expected": ok,
            "seen": seen,
            "restarts": result.overhead.restarts,
            "compile_error": result.compile_error.model_dump() if result.compile_error else None,
            "results": [_shape_view(s) for s in result.shapes],
        }

    def run_baseline(kind: str) -> None:
        shapes = args.shapes.split(",") if args.shapes else EXPLOIT_SHAPES
        result = evaluate(EvalRequest(op="rms_norm", baseline=kind, shapes=shapes, seeds=2, timeout_s=240), catalog)
        report["baselines"][kind] = {
            "operator_score": result.operator_score,
            "overhead": result.overhead.model_dump(),
            "results": [_shape_view(s) for s in result.shapes],
        }

    examples = args.examples.split(",") if args.examples else list(EXAMPLES)
    if "rms_norm" in examples:
        step("example rms_norm (all shapes)", 60, lambda: run_example("rms_norm"))
    order = [
        "read_hidden_files",
        "monkeypatch_primitives",
        "warmup_then_cheat",
        "side_stream",
        "cuda_fault",
        "segfault",
        "output_cache_by_pointer",
        "pytorch_fallback",
        "lazy_output",
        "wrong_dtype",
        "shrink_output_arena",
        "fake_results",
        "huge_allocation",
        "hang",
        "escape_process_group",
        "output_cache_by_content",
    ]
    chosen = [n for n in order if not args.exploits or n in args.exploits.split(",")]
    for name in chosen[:6]:
        step(f"exploit {name}", 20, lambda name=name: run_exploit(name))
    if "silu_and_mul" in examples:
        step("example silu_and_mul (all shapes)", 60, lambda: run_example("silu_and_mul"))
    for name in chosen[6:]:
        step(f"exploit {name}", 20, lambda name=name: run_exploit(name))
    if not args.no_baselines:
        step("baseline eager (3 rms_norm shapes)", 20, lambda: run_baseline("eager"))
        step("baseline torch-compile (3 rms_norm shapes)", 60, lambda: run_baseline("torch-compile"))
    report["wall_s"] = round(time.monotonic() - t0, 1)
    _write(args.out, report)
    print(_markdown(report))
    return 0


def _write(out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_gpu_smoke.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "eval_gpu_smoke.md").write_text(_markdown(report))


def _fmt(value, digits=4) -> str:
    return "—" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _markdown(report: dict) -> str:
    lines = [
        f"# Evaluator GPU smoke — {report['date']}",
        "",
        f"torch {report.get('torch')}, Python {report['python']}, host {report['host']}, wall "
        f"{report.get('wall_s', '…')} s",
        "",
        "## Steps",
        "",
        "| step | status | s |",
        "|---|---|---|",
    ]
    lines += [
        f"| {s['name']} | {s['status']}{(': ' + s['error'][:120]) if s.get('error') else ''} | {s.get('seconds', '')} |"
        for s in report["steps"]
    ]
    for op, ex in report["examples"].items():
        dev, iso, ov = ex["device"], ex["isolation"], ex["overhead"]
        lines += [
            "",
            f"## Example {op}: {ex['correct']}/{ex['shapes']} correct, S_i = {_fmt(ex['operator_score'])} {ex['note']}",
            "",
            f"Device {dev.get('name')} (SM {dev.get('sm_clock_mhz')}/{dev.get('max_sm_clock_mhz')} MHz, mem "
            f"{dev.get('mem_clock_mhz')} MHz, throttle {dev.get('throttle_reasons')}); isolation uid={iso['uid']} "
            f"pidns={iso['pid_namespace']} landlock={iso['landlock_enforced']} (ABI {iso['landlock_abi']}) "
            f"warnings={iso['warnings']}",
            "",
            f"Overhead: worker start {_fmt(ov['worker_start_s'], 2)} s (CUDA init {_fmt(ov['cuda_init_s'], 2)} s), "
            f"candidate load {_fmt(ov['candidate_load_s'], 3)} s, restarts {ov['restarts']}, total "
            f"{_fmt(ov['total_s'], 1)} s; per shape (median / max s): "
            + ", ".join(
                f"{k} {_fmt(v, 3)}/{_fmt(ex['per_shape_seconds_max'][k], 3)}"
                for k, v in ex["per_shape_seconds_median"].items()
            ),
            "",
            "| shape | ok | time ms | IQR ms | S | DSL share | sets×calls | SM MHz (<max) | spin µs | integrity | "
            "note |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in ex["results"]:
            lines.append(
                f"| {s['id']} | {'yes' if s['correct'] else s['category']} | {_fmt(s['time_ms'])} | "
                f"{_fmt(s['iqr_ms'])} | {_fmt(s['score'])} | {_fmt(s['dsl_share'], 2)} | "
                f"{s['input_sets']}×{s['calls']} | {s.get('sm_clock_mhz')} "
                f"({_fmt(s.get('sm_below_max_fraction'), 2)}) | {_fmt(s.get('spin_us'), 0)} | "
                f"{','.join(s['integrity'])} | {(s['score_note'] or s['message'])[:80]} |"
            )
        if ex.get("diagnosis_without_landlock"):
            lines += ["", f"Without Landlock: {ex['diagnosis_without_landlock']}"]
    lines += ["", "## Exploits", "", "| exploit | as expected | what happened |", "|---|---|---|"]
    for name, ex in report["exploits"].items():
        lines.append(f"| {name} | {'yes' if ex['as_expected'] else 'NO'} | {ex['seen']} |")
    for kind, b in report["baselines"].items():
        lines += [
            "",
            f"## Baseline {kind}: S_i = {_fmt(b['operator_score'])}",
            "",
            "| shape | ok | time ms | S |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {s['id']} | {'yes' if s['correct'] else s['category']} | {_fmt(s['time_ms'])} | {_fmt(s['score'])} |"
            for s in b["results"]
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
