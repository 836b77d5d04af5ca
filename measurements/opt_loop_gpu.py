#!/usr/bin/env python3
"""One real optimisation loop on the H200, through the run API with the real evaluator and
profiler: rms_norm, a naive two-pass Triton baseline, then planned iterations (one-pass fusion,
num_warps, rsqrt, vectorisation hints, several rows per program or wider chunks, 8 warps). Each
iteration is validated and timed by the server against the accepted kernel in one paired,
interleaved measurement (two warm workers, short alternating rounds); the baseline is profiled
with Nsight Compute wrapping the sandbox worker and filtering on the NVTX range of the
forwards (bounded; the torch.profiler fallback says why when ncu fails). To tell whether the
worker's Landlock rules keep ncu out, run once with ATREX_SANDBOX_LANDLOCK=0 (docs/runs.md).

    python3 measurements/opt_loop_gpu.py                    # H200: measurements/results/opt_loop_h200.{json,md}
    python3 measurements/opt_loop_gpu.py --deadline-s 200   # stop starting work after 200 s
    python3 measurements/opt_loop_gpu.py --cpu-smoke        # CPU dry run on the smoke shape (nothing is timed)

Results are rewritten after every step, so a killed run keeps what it did; the file's `status`
says whether it finished, and `not_run` lists the planned steps it did not reach and why.
Budget: the deadline (default 220 s) plus the last step in flight, under 4 minutes on one H200.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OP = "rms_norm"
GPU_SHAPES = ["2", "52"]  # 10000 x 1024 and 1688 x 7168 (bf16): a short-row and a long-row shape, ~20 MB each
FIRST_ITERATION_ESTIMATE_S = 30.0  # before one was measured (the first H200 run took ~27 s per iteration)
FINAL_RESERVE_S = 12.0  # the accepted kernel's final evaluate() and the package
MIN_ITERATIONS = 5  # the issue asks for a real loop of at least five iterations

TEMPLATE = '''"""rms_norm in Triton: out = bf16(x * rsqrt(mean(x^2) + eps) * weight), computed in fp32.
Variant: {summary}."""

import torch
import triton
import triton.language as tl
from torch import nn

{kernel}

class Model(nn.Module):
    def __init__(self, *, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        BLOCK = triton.next_power_of_2(n_cols)
{launch}
        return out
'''

TWO_PASS = """@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    inv = {inv}
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK){hint}
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(o_row + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)
"""

ONE_PASS = """@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK){hint}
    col_ok = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_ok[None, :]
    offs = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=1) / n_cols
    inv = {inv}
    tl.store(out_ptr + offs, (x * inv[:, None] * w[None, :]).to(out_ptr.dtype.element_ty), mask=mask)
"""


def kernel_source(cfg: dict) -> str:
    """The full candidate file for one configuration of knobs."""
    warps = cfg["warps"]
    if cfg["two_pass"]:
        hint = "\n        cols = tl.max_contiguous(tl.multiple_of(cols, CHUNK), CHUNK)" if cfg["hints"] else ""
        inv = (
            "tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)"
            if cfg["rsqrt"]
            else "1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)"
        )
        kernel = TWO_PASS.format(hint=hint, inv=inv)
        launch = (
            f"        _rms_norm_kernel[(n_rows,)](x, weight, out, n_cols, self.eps, CHUNK={cfg['chunk']}, "
            f"num_warps={warps})"
        )
        summary = f"two passes over the row in chunks of {cfg['chunk']}, num_warps={warps}"
    else:
        hint = "\n    cols = tl.max_contiguous(tl.multiple_of(cols, BLOCK), BLOCK)" if cfg["hints"] else ""
        inv = "tl.rsqrt(ms + eps)" if cfg["rsqrt"] else "1.0 / tl.sqrt(ms + eps)"
        kernel = ONE_PASS.format(hint=hint, inv=inv)
        launch = (
            f"        ROWS = {cfg['rows']}\n        _rms_norm_kernel[(triton.cdiv(n_rows, ROWS),)](x, weight, out, "
            f"n_rows, n_cols, self.eps, BLOCK=BLOCK, ROWS=ROWS, num_warps={warps})"
        )
        summary = f"one pass with the row in registers, {cfg['rows']} row(s) per program, num_warps={warps}"
    summary += (", rsqrt" if cfg["rsqrt"] else "") + (", contiguity hints" if cfg["hints"] else "")
    return TEMPLATE.format(summary=summary, kernel=kernel, launch=launch)


BASELINE = {"two_pass": True, "chunk": 128, "warps": "4", "rsqrt": False, "hints": False, "rows": "1"}
# Ordered so that at least five steps change the accepted kernel whether or not the one-pass
# fusion is accepted (rows per program only exists in the one-pass form, chunk size only in the
# two-pass form); a step that would not change the accepted kernel is not submitted.
STEPS = [
    (
        "split_fusion",
        {"two_pass": False},
        1.4,
        "One pass: load the whole row once into registers instead of reading x twice.",
        ["register pressure at hidden size 7168 (BLOCK 8192)"],
        ["docs/patterns/row-reductions", "docs/patterns/kernel-fusion"],
    ),
    (
        "launch_configuration",
        {"warps": "max(4, min(16, BLOCK // 512))"},
        1.15,
        "Scale num_warps with the row length (4 up to 2048 columns, 16 at 8192) so long rows are split over more "
        "threads.",
        ["fewer resident blocks per SM"],
        ["docs/patterns/num-warps", "docs/patterns/occupancy"],
    ),
    (
        "instruction_selection",
        {"rsqrt": True},
        1.02,
        "tl.rsqrt instead of 1/sqrt: one MUFU instruction for the row scale.",
        ["differs in the last bit from 1/sqrt"],
        [],
    ),
    (
        "vectorisation",
        {"hints": True},
        1.05,
        "Contiguity and alignment hints on the column offsets so loads become 128-bit.",
        ["none: the compiler may already vectorise"],
        ["docs/patterns/coalesced-vectorized-access"],
    ),
    (
        "tiling",
        {"rows": "4 if BLOCK <= 1024 else 1"},
        1.15,
        "Several rows per program for short rows (4 rows when the row fits 1024 columns): fewer, fuller programs.",
        ["tail rows masked", "more registers"],
        ["docs/patterns/row-reductions", "docs/patterns/small-shapes-launch-overhead"],
    ),
    (
        "tiling",
        {"chunk": 1024},
        1.3,
        "Loop chunks of 1024 instead of 128: fewer loop trips and wider loads per thread.",
        ["more registers per thread"],
        ["docs/patterns/row-reductions"],
    ),
    (
        "launch_configuration",
        {"warps": "8"},
        1.05,
        "A fixed 8 warps per program: more loads in flight for every row length.",
        ["too many threads for the 1024-column rows"],
        ["docs/patterns/num-warps"],
    ),
]


def _existing(doc_ids: list[str]) -> list[str]:
    return [d for d in doc_ids if (ROOT / "gpu_wiki" / f"{d}.md").is_file()]


def _median(values: dict) -> float | None:
    present = [v for v in values.values() if v is not None]
    return statistics.median(present) if present else None


def _fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def run_loop(shapes: list[str], rounds: int, deadline_s: float, ncu_timeout_s: float, log, save) -> dict:
    """The loop; `save(result)` is called after every step with the result so far."""
    import torch

    from atrex_mcp.evaluate import EvalRequest, evaluate
    from atrex_mcp.problemset.catalog import Catalog
    from atrex_mcp.profiling.service import profile_kernel
    from atrex_mcp.runs.audit import timeline
    from atrex_mcp.runs.evaluator_judge import EvaluatorJudge
    from atrex_mcp.runs.iterations import RunService
    from atrex_mcp.runs.models import Plan
    from atrex_mcp.runs.store import RunStore

    t0 = time.perf_counter()
    elapsed = lambda: time.perf_counter() - t0  # noqa: E731
    catalog = Catalog()
    work = Path(tempfile.mkdtemp(prefix="atrex-opt-loop-"))
    store = RunStore(work / "state")
    service = RunService(store, catalog, EvaluatorJudge(catalog, rounds=rounds, seeds=2))
    run = service.start_run(OP, shapes, "triton", "h200")
    log(f"run {run.run_id} on shapes {shapes}; deadline {deadline_s:.0f} s")
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (Triton interpreter)",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
        },
        "op": OP,
        "shapes": shapes,
        "rounds": rounds,
        "deadline_s": deadline_s,
        "status": "running",
        "planned_steps": [s[0] for s in STEPS],
        "not_run": [],
        "iteration_s": [],
        "profiles": [],
    }

    def checkpoint(status: str = "running") -> None:
        result["status"] = status
        result["timeline"] = json.loads(timeline(store, run.run_id).model_dump_json())
        result["wall_s"] = elapsed()
        save(result)

    accepted_cfg = dict(BASELINE)
    base = service.submit_baseline(run.run_id, kernel_source(accepted_cfg))
    result["baseline_eval"] = {"time_ms": base.times.time_ms, "score": base.times.score}
    log(f"baseline: {base.times.time_ms} ms, S {base.times.score}")
    checkpoint()
    ncu_state = {"use": True}

    def profile(cfg: dict, label: str):
        report = profile_kernel(
            OP,
            kernel_source(cfg),
            shapes[0],
            catalog,
            hardware="h200",
            store=store,
            run_id=run.run_id,
            use_ncu=ncu_state["use"],
            ncu_timeout_s=ncu_timeout_s,
        )
        if report.fallback and "Nsight Compute was tried and failed" in report.note:
            ncu_state["use"] = False  # do not pay for a failing capture again; the note says why
            log(f"ncu failed, later profiles use the fallback: {report.note[:1200]}")
        result["profiles"].append(
            {"label": label, "config": dict(cfg), "elapsed_s": elapsed(), **report.model_dump(mode="json")}
        )
        log(
            f"profile {report.profile_id} ({report.tool}{', fallback' if report.fallback else ''}): "
            f"{report.bottleneck.kind}"
        )
        checkpoint()
        return report

    def estimate() -> float:
        return max(result["iteration_s"]) if result["iteration_s"] else FIRST_ITERATION_ESTIMATE_S

    current = profile(accepted_cfg, "baseline")
    done = 0
    for index, (category, change, expected, text, risks, docs) in enumerate(STEPS):
        candidate_cfg = {**accepted_cfg, **change}
        if kernel_source(candidate_cfg) == kernel_source(accepted_cfg):
            result["not_run"].append(
                {"step": index + 1, "category": category, "why": "would not change the accepted kernel"}
            )
            log(f"step {index + 1} {category}: not applicable to the accepted kernel")
            continue
        if elapsed() + estimate() > deadline_s - FINAL_RESERVE_S:
            result["not_run"] += [
                {"step": j + 1, "category": s[0], "why": f"deadline ({deadline_s:.0f} s)"}
                for j, s in enumerate(STEPS)
                if j >= index
            ]
            log(f"deadline: steps {index + 1}..{len(STEPS)} not run")
            break
        plan = Plan(
            change=text,
            bottleneck=current.bottleneck.kind,
            bottleneck_detail="; ".join(current.bottleneck.evidence[:3]),
            evidence=[current.profile_id],
            knowledge=_existing(docs),
            expected_effect=expected,
            risks=risks,
            category=category,
        )
        started = elapsed()
        record = service.record_iteration(run.run_id, plan, kernel_source(candidate_cfg))
        result["iteration_s"].append(elapsed() - started)
        done += 1
        speedup = record.decision.speedup if record.decision else None
        ci = (
            f", CI [{record.decision.ci_low:.3f}, {record.decision.ci_high:.3f}]"
            if record.decision and record.decision.ci_low
            else ""
        )
        log(
            f"#{record.number} {category}: {record.status} ({_fmt(speedup, '.3f')}x{ci}) in "
            f"{result['iteration_s'][-1]:.1f} s — {record.reason}"
        )
        if record.status == "accepted":
            accepted_cfg = candidate_cfg
            result["accepted_config"] = accepted_cfg
        checkpoint()
        # Re-profile the new kernel only when that still leaves time for the five iterations.
        owed = max(0, MIN_ITERATIONS - done) * estimate()
        if record.status == "accepted" and elapsed() + 15.0 + owed < deadline_s - FINAL_RESERVE_S:
            current = profile(accepted_cfg, f"after #{record.number}")

    result["accepted_config"] = accepted_cfg
    result["accepted_source"] = kernel_source(accepted_cfg)
    if elapsed() < deadline_s:
        final = evaluate(
            EvalRequest(
                op=OP,
                source=result["accepted_source"],
                shapes=shapes,
                seeds=2,
                hardware="h200",
                timing=True,
                measure_dsl=True,
            ),
            catalog,
        )
        result["final_eval"] = {
            s.id: {
                "correct": s.correct,
                "time_ms": s.time_ms,
                "iqr_ms": s.iqr_ms,
                "score": s.score,
                "dsl_share": s.dsl_share,
                "note": s.timing_note or s.message[:300],
            }
            for s in final.shapes
        }
    else:
        log("deadline: the final evaluate() of the accepted kernel was not run")
    result["manifest"] = service.package(run.run_id, work / "package").manifest_data
    checkpoint("finished")
    return result


def render_markdown(result: dict) -> str:
    t = result["timeline"]
    lines = [
        f"# Optimisation loop on {result['device']}: {result['op']}",
        "",
        f"{result['date']}; Python {result['versions']['python']}, torch {result['versions']['torch']}, "
        f"Triton {result['versions']['triton']}; shapes {', '.join(result['shapes'])}; "
        f"{result['rounds']} interleaved rounds per shape and iteration; wall time {result['wall_s']:.0f} s.",
        "",
        "Produced by `measurements/opt_loop_gpu.py` through the run API (RunService + EvaluatorJudge + "
        "profile_kernel).",
        "",
        "## Timeline",
        "",
        "| # | category | status | speed-up vs accepted | 95% CI | expected | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for it in t["iterations"]:
        d = it.get("decision") or {}
        ci = f"[{d['ci_low']:.3f}, {d['ci_high']:.3f}]" if d.get("ci_low") is not None else "—"
        category = it["plan"]["category"] if it.get("plan") else "baseline"
        expected = f"{it['plan']['expected_effect']:.2f}x" if it.get("plan") else "—"
        lines.append(
            f"| {it['number']} | {category} | {it['status']} | {_fmt(d.get('speedup'), '.3f')} | {ci} | {expected} | "
            f"{it['reason']} |"
        )
    lines += [
        "",
        f"Status: **{result['status']}**; {len(t['iterations']) - 1} iterations recorded "
        f"(per-iteration wall times: {', '.join(f'{v:.0f}' for v in result['iteration_s']) or '—'} s).",
    ]
    if result["not_run"]:
        lines += [
            "",
            "Planned steps not run: "
            + "; ".join(f"{n['step']} {n['category']} ({n['why']})" for n in result["not_run"])
            + ".",
        ]
    lines += [
        "",
        f"Accepted chain: {' → '.join('#' + str(n) for n in t['chain'])}; "
        f"speed-up vs baseline (product of paired speed-ups): {_fmt(t['speedup_vs_baseline'], '.3f')}x",
        "",
        "## Baseline → accepted kernel (evaluator figures, h200 datasheet roofline)",
        "",
        "| shape | baseline ms | baseline S | accepted ms | accepted S | accepted DSL share |",
        "|---|---|---|---|---|---|",
    ]
    for shape in result["shapes"]:
        fin = result.get("final_eval", {}).get(shape, {"time_ms": None, "score": None, "dsl_share": None})
        lines.append(
            f"| {shape} | {_fmt(result['baseline_eval']['time_ms'].get(shape), '.4f')} | "
            f"{_fmt(result['baseline_eval']['score'].get(shape), '.3f')} | {_fmt(fin['time_ms'], '.4f')} | "
            f"{_fmt(fin['score'], '.3f')} | {_fmt(fin['dsl_share'], '.2f')} |"
        )
    lines += [
        "",
        f"Median S over the shapes: {_fmt(_median(result['baseline_eval']['score']), '.3f')} (baseline) → "
        f"{_fmt(_median({k: v['score'] for k, v in result.get('final_eval', {}).items()}), '.3f')} (accepted).",
        "",
        "## What the profiler reported",
        "",
    ]
    for p in result["profiles"]:
        lines.append(
            f"### {p['label']} — profile {p['profile_id']} ({p['tool']}{', fallback' if p['fallback'] else ''}), "
            f"shape {p['shape']}"
        )
        lines.append("")
        lines.append(f"Bottleneck: **{p['bottleneck']['kind']}**. {p['note']}")
        lines += [f"- {e}" for e in p["bottleneck"]["evidence"]]
        lines += [
            f"- kernel {k['name']} ({k.get('origin') or 'origin not recorded'}): {k['launches']} launch(es) per "
            f"forward, {_fmt(k['metrics'].get('duration_ns'), '.0f')} ns each"
            for k in p.get("kernels", [])
        ]
        if p.get("dsl_share") is not None:
            lines.append(f"- DSL share of the profiled device time: {p['dsl_share']:.0%}")
        for facts in p.get("sass", []):
            lines += [f"- SASS {facts['kernel']}: {f}" for f in facts["facts"]]
        if p.get("unavailable_metrics"):
            lines.append(f"- metrics this ncu/GPU did not provide: {', '.join(p['unavailable_metrics'])}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="where to write opt_loop_h200.{json,md} (default measurements/results; /tmp for --cpu-smoke)",
    )
    parser.add_argument("--rounds", type=int, default=16, help="paired rounds per shape and iteration (at least 10)")
    parser.add_argument(
        "--deadline-s", type=float, default=220.0, help="no step starts that would likely end after this many seconds"
    )
    parser.add_argument(
        "--ncu-timeout-s", type=float, default=40.0, help="limit of one Nsight Compute capture (then the fallback)"
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="dry run on CPU with the smoke shape (no timing)")
    args = parser.parse_args()
    if args.cpu_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("no GPU: run on the H200, or pass --cpu-smoke for a dry run", file=sys.stderr)
        return 2
    out_dir = args.out_dir or (Path(tempfile.gettempdir()) if args.cpu_smoke else ROOT / "measurements" / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / ("opt_loop_cpu_smoke" if args.cpu_smoke else "opt_loop_h200")
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    def save(result: dict) -> None:
        for suffix, text in ((".json", json.dumps(result, indent=2) + "\n"), (".md", render_markdown(result))):
            tmp = stem.with_suffix(suffix + ".tmp")
            tmp.write_text(text)
            tmp.replace(stem.with_suffix(suffix))  # a kill mid-write leaves the previous complete file

    run_loop(["smoke"] if args.cpu_smoke else GPU_SHAPES, args.rounds, args.deadline_s, args.ncu_timeout_s, log, save)
    log(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
