"""Run every reference once at every scored shape on a GPU and record eager time and peak memory.

Issue "Problem set", item 10: proves each reference runs at production size, and records the
shapes that cannot run and why. Each operator runs in its own subprocess so that an OOM or a
CUDA fault in one cannot take the others down; a global deadline keeps the whole run inside a
device call, and shapes left unrun are listed as such (never silently dropped).

Timing here is a plain eager measurement (CUDA events, L2 flushed before each call, median of
a few calls); the evaluator's baseline runs (measurements/baselines*) are the scored figures.

    python3 measurements/run_references.py --out measurements/results [--ops a,b] [--deadline-s 480]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run_op(op: str, deadline: float, reps: int) -> list[dict]:
    """Child side: time every scored shape of one operator."""
    import torch

    from atrex_mcp.problemset.catalog import Catalog

    cat = Catalog()
    Model = cat.load_reference(op)
    make_inputs = cat.load_make_inputs(op)
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")  # 256 MiB > 2x the 60 MiB L2
    rows = []
    for shape in cat.visible(op).scored_shapes:
        row = {"op": op, "shape_id": shape.id}
        if time.time() > deadline:
            rows.append({**row, "status": "not_run", "reason": "global deadline reached"})
            continue
        try:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            inputs = make_inputs(seed=1234, device="cuda", **shape.inputs)
            model = Model(**shape.init)
            with torch.no_grad():
                out = model(**inputs)  # warm-up, also the correctness-of-running check
                torch.cuda.synchronize()
                times = []
                for _ in range(reps):
                    flush.zero_()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    out = model(**inputs)
                    end.record()
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end))
            outs = out.values() if isinstance(out, dict) else (out if isinstance(out, tuple) else (out,))
            finite = all(bool(torch.isfinite(o.float()).all()) for o in outs if o.is_floating_point())
            times.sort()
            row.update(
                status="ok",
                eager_ms=times[len(times) // 2],
                min_ms=times[0],
                peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30,
                outputs_finite=finite,
            )
            del inputs, out, outs
        except torch.OutOfMemoryError as exc:
            row.update(status="oom", reason=str(exc).splitlines()[0][:300])
        except Exception as exc:  # noqa: BLE001 - recorded per shape; the next shape still runs
            row.update(
                status="error", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "measurements" / "results"))
    ap.add_argument("--ops", default="all")
    ap.add_argument("--deadline-s", type=float, default=480)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--deadline-at", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_op(args.child, args.deadline_at, args.reps)  # rows go to stdout line by line
        return 0

    import torch

    from atrex_mcp.problemset.catalog import Catalog

    cat = Catalog()
    ops = cat.names() if args.ops == "all" else args.ops.split(",")
    t0 = time.time()
    deadline = t0 + args.deadline_s
    rows: list[dict] = []
    for op in ops:
        shapes = [s.id for s in cat.visible(op).scored_shapes]
        if time.time() > deadline:
            rows += [
                {"op": op, "shape_id": s, "status": "not_run", "reason": "global deadline reached"} for s in shapes
            ]
            continue
        budget = max(10.0, deadline - time.time() + 30)
        proc = subprocess.run(
            [sys.executable, __file__, "--child", op, "--deadline-at", str(deadline), "--reps", str(args.reps)],
            capture_output=True,
            text=True,
            timeout=budget,
        )
        got = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        done = {r["shape_id"] for r in got}
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or ["no stderr"]
            got += [
                {
                    "op": op,
                    "shape_id": s,
                    "status": "crashed",
                    "reason": f"process exit {proc.returncode}: {tail[0][:300]}",
                }
                for s in shapes
                if s not in done
            ]
        rows += got
        print(f"{op}: {sum(r['status'] == 'ok' for r in got)}/{len(shapes)} ok ({time.time() - t0:.0f}s)", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "wall_s": round(time.time() - t0, 1),
        "reps": args.reps,
        "counts": {k: sum(r["status"] == k for r in rows) for k in ("ok", "oom", "error", "crashed", "not_run")},
    }
    (out / "references_h200.json").write_text(json.dumps({"meta": meta, "shapes": rows}, indent=1))
    lines = [
        f"# Reference run on {meta['gpu']} — {meta['date']}",
        "",
        f"torch {meta['torch']}, Python {meta['python']}; wall {meta['wall_s']} s; {meta['counts']}",
        "",
        "| op | shapes ok | total eager ms | max peak GiB | not ok (id: reason) |",
        "|---|---|---|---|---|",
    ]
    for op in ops:
        rs = [r for r in rows if r["op"] == op]
        ok = [r for r in rs if r["status"] == "ok"]
        bad = "; ".join(
            f"{r['shape_id']}: {r['status']} {r.get('reason', '')}"[:120] for r in rs if r["status"] != "ok"
        )
        lines.append(
            f"| {op} | {len(ok)}/{len(rs)} | {sum(r['eager_ms'] for r in ok):.3f} | "
            f"{max((r['peak_mem_gib'] for r in ok), default=0):.2f} | {bad} |"
        )
    (out / "references_h200.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
