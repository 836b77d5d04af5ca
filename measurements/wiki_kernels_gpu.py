"""Every wiki reference kernel (gpu_wiki/kernels/*.py) through the evaluator on every scored
shape of its operator, on the GPU, with timing and DSL attribution.

    python3 measurements/wiki_kernels_gpu.py [--out measurements/results] [--budget-s 540] [--seeds 2]
                                      [--only rms_norm,fused_moe] [--shapes smoke] [--resume]

Writes wiki_kernels_h200.json under --out (per kernel: correctness per shape, median time
and IQR per shape, DSL share, the operator score S, conditions) and wiki_kernels_h200.md (the
table), rewritten after every kernel so a budget stop keeps what was done. --resume skips
kernels already in the JSON, so a second run finishes the rest. Per-shape S is not recorded:
together with the time it would give away the shape's speed-of-light figure; the operator
score (median S over correct shapes) is. Afterwards, write the figures into the kernels:

    python3 -m atrex_mcp.wiki.stamp OUT/wiki_kernels_h200.json

A run restricted with --shapes is stamped as a subset: shapes, correctness and times go in,
the operator score is marked pending (over a subset it is not the operator's S).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atrex_mcp.candidate_contract import check_contract  # noqa: E402
from atrex_mcp.evaluate import EvalRequest, evaluate  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from atrex_mcp.wiki.corpus import kernel_front_matter  # noqa: E402

KERNELS = ROOT / "gpu_wiki" / "kernels"
RESULT_NAME = "wiki_kernels_h200"


def _shape_row(s) -> dict:
    return {
        "id": s.id,
        "correct": s.correct,
        "time_ms": s.time_ms,
        "iqr_ms": s.iqr_ms,
        "dsl_share": s.dsl_share,
        "stage": s.stage,
        "category": s.category,
        "message": s.message[:300],
        "sm_clock_mhz": s.timing.sm_clock_mhz if s.timing else None,
        "throttle": s.timing.throttle_reasons if s.timing else [],
    }


def _evaluate_kernel(path: Path, catalog: Catalog, seeds: int, timeout_s: float, shapes: list[str] | None) -> dict:
    source = path.read_text()
    meta, _ = kernel_front_matter(source, path.name)
    t0 = time.time()
    result = evaluate(
        EvalRequest(
            op=meta["operator"],
            source=source,
            shapes=shapes,
            seeds=seeds,
            timing=True,
            measure_dsl=True,
            timeout_s=timeout_s,
        ),
        catalog,
    )
    shapes = [_shape_row(s) for s in result.shapes]
    times = [s["time_ms"] for s in shapes if s["correct"] and s["time_ms"] is not None]
    shares = [s["dsl_share"] for s in shapes if s["dsl_share"] is not None]
    contract = check_contract(source, catalog.visible(meta["operator"]).reference_source)
    return {
        "file": str(path.relative_to(ROOT)),
        "operator": meta["operator"],
        "sha256": hashlib.sha256(source.encode()).hexdigest(),
        "contract": {"passed": contract.passed, "violations": [v.describe() for v in contract.violations]},
        "compiled": result.compiled,
        "compile_error": result.compile_error.message if result.compile_error else None,
        "shapes_correct": sum(s["correct"] for s in shapes),
        "shapes_total": len(shapes),
        "operator_score": result.operator_score,
        "operator_score_note": result.operator_score_note,
        "median_time_ms": statistics.median(times) if times else None,
        "median_dsl_share": statistics.median(shares) if shares else None,
        "integrity": result.integrity,
        "shapes": shapes,
        "wall_s": round(time.time() - t0, 1),
        "device": result.device.model_dump(),
    }


def _markdown(report: dict) -> str:
    meta = report["meta"]
    subset = meta.get("shapes", "all scored") != "all scored"
    s_column = f"S over shapes {meta['shapes']} only (not the operator S)" if subset else "S"
    lines = [
        f"# Wiki reference kernels on {meta.get('gpu') or 'the GPU'} — {meta['date']}",
        "",
        f"{meta.get('versions')}; seeds per shape {meta['seeds']}; S = T_SOL / T on the {meta.get('profile', 'h200')} "
        "profile, median over correct shapes (per-shape S is not published"
        + (
            "; over a one-shape subset the median is that shape's S: evaluator-side only, never in the wiki"
            if subset
            else ""
        )
        + ").",
        "",
        f"| kernel | operator | shapes correct | median time (ms) | {s_column} | DSL share | failures |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, k in sorted(report["kernels"].items()):
        if "error" in k:
            lines.append(f"| {name} | — | — | — | — | — | harness error: {k['error'][:120]} |")
            continue
        fails = ", ".join(f"{s['id']}: {s['category'] or s['stage']}" for s in k["shapes"] if not s["correct"])[:200]
        fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
        lines.append(
            f"| {name} | {k['operator']} | {k['shapes_correct']}/{k['shapes_total']} | "
            f"{fmt(k['median_time_ms'], '.4g')} | {fmt(k['operator_score'], '.3f')} | "
            f"{fmt(k['median_dsl_share'], '.2f')} | {fails} |"
        )
    lines += ["", f"Not run (budget): {', '.join(report.get('not_run', [])) or 'none'}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results")
    parser.add_argument(
        "--budget-s", type=float, default=540.0, help="stop starting new kernels after this many seconds"
    )
    parser.add_argument("--seeds", type=int, default=2, help="correctness seeds per shape")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per shape and stage")
    parser.add_argument("--only", default="", help="comma-separated kernel names (file stems)")
    parser.add_argument(
        "--shapes", default="", help="comma-separated shape ids (default: every scored shape); 'smoke' for a dry run"
    )
    parser.add_argument("--resume", action="store_true", help="keep kernels already in the JSON and run the rest")
    args = parser.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = args.out / f"{RESULT_NAME}.json", args.out / f"{RESULT_NAME}.md"
    report = {"meta": {}, "kernels": {}}
    if args.resume and json_path.is_file():
        report = json.loads(json_path.read_text())
    paths = sorted(p for p in KERNELS.glob("*.py") if not p.name.startswith("_"))
    if args.only:
        wanted = set(args.only.split(","))
        paths = [p for p in paths if p.stem in wanted]
    catalog = Catalog()
    deadline = time.time() + args.budget_s
    report["meta"].update(
        date=datetime.now(UTC).date().isoformat(), seeds=args.seeds, profile="h200", shapes=args.shapes or "all scored"
    )
    todo = [
        p
        for p in paths
        if not (args.resume and p.stem in report["kernels"] and "error" not in report["kernels"][p.stem])
    ]

    def save() -> None:
        report["not_run"] = [p.stem for p in paths if p.stem not in report["kernels"]]
        json_path.write_text(json.dumps(report, indent=1) + "\n")
        md_path.write_text(_markdown(report))

    for path in todo:
        if time.time() > deadline:
            print(f"[budget] stopping before {path.stem}", flush=True)
            break
        print(f"[run] {path.stem}", flush=True)
        try:
            entry = _evaluate_kernel(
                path, catalog, args.seeds, args.timeout_s, args.shapes.split(",") if args.shapes else None
            )
        except Exception:  # noqa: BLE001 - a harness failure on one kernel must not lose the others
            report["kernels"][path.stem] = {"error": traceback.format_exc()[-1500:]}
            print(traceback.format_exc(), flush=True)
        else:
            device = entry.pop("device")
            report["meta"].update(
                gpu=device.get("name"),
                sm_count=device.get("sm_count"),
                driver=device.get("driver"),
                cuda=device.get("cuda"),
                versions=device.get("versions"),
            )
            report["kernels"][path.stem] = entry
            print(
                f"      {entry['shapes_correct']}/{entry['shapes_total']} correct, S={entry['operator_score']}, "
                f"{entry['wall_s']} s",
                flush=True,
            )
        save()
    save()
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
