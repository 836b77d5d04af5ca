"""Which tile configs should the wiki's two MoE kernels use on this GPU, and are they correct?

    PYTHONPATH=$PWD python3 measurements/moe_kernel_tiles.py \\
        --out measurements/results/moe_kernel_tiles/$(date -u +%F)_h200.json

For a decode, a mid and a prefill shape of fused_moe and fp8_blockscale_fused_moe (inputs from
each problem's own generator, seed 0) it times four tile configs of the kernel in
gpu_wiki/kernels/ — the kernel's own rule, then three alternatives for the shape's regime — with
CUDA events (3 warm-up calls, median of 20), checks each config's output against the reference
with the evaluator's comparison, and records achieved TFLOP/s (6·T·k·I·D per call), the first
call's time (compile included) and, for the rule, the share of GPU time in the kernel file's
Triton kernels (torch.profiler, one call). A config that fails to compile or run is recorded
with its error, not fatal. Under 4 minutes on one H200: past --budget-s only the rule config of
each remaining shape runs (the others are recorded as skipped). Writes JSON: GPU, versions,
date, results.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent

# op -> [(shape id, why)]: decode, mid, prefill of each operator's scored set
SHAPES = {
    "fused_moe": [
        ("8", "decode T=1, E=128"),
        ("9", "mid T=2400, E=128"),
        ("4", "mid T=1979, E=8"),
        ("21", "prefill T=8179, E=8, I=4096"),
    ],
    "fp8_blockscale_fused_moe": [
        ("2", "decode T=1, E=256"),
        ("3", "small T=32, E=256"),
        ("5", "mid T=2560, E=128"),
        ("0", "prefill T=30821, E=128"),
    ],
}


def _configs(op: str, per_expert: float) -> list[dict | None]:
    """None = the kernel's own rule; then three fixed alternatives around the regime the shape is in."""
    base = {"BN2": 128, "num_stages": 3, **({"BK": 64} if op == "fused_moe" else {})}
    if per_expert <= 16:  # decode: how wide should the weight-streaming programs be
        alternatives = [
            {"BM": 16, "BN1": 32, "num_warps": 4, "num_stages": 4},
            {"BM": 16, "BN1": 128, "num_warps": 4, "num_stages": 4},
            {"BM": 32, "BN1": 64, "num_warps": 4},
        ]
    elif per_expert <= 512:
        alternatives = [
            {"BM": 64, "BN1": 128, "num_warps": 8},
            {"BM": 128, "BN1": 64, "num_warps": 8},
            {"BM": 32, "BN1": 64, "num_warps": 4},
        ]
    else:
        alternatives = [
            {"BM": 128, "BN1": 128, "num_warps": 8},
            {"BM": 64, "BN1": 128, "num_warps": 8},
            {"BM": 128, "BN1": 64, "num_warps": 8, "num_stages": 4},
        ]
    return [None, *({**base, **alt} for alt in alternatives)]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _time_ms(fn, warmup: int = 3, reps: int = 20) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _triton_share(fn, triton_names: set[str]) -> dict:
    """GPU time in kernels named after the kernel file's @triton.jit functions, over all GPU time."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = {}
    for ev in prof.key_averages():
        us = getattr(ev, "self_device_time_total", None) or getattr(ev, "self_cuda_time_total", 0)
        if us > 0:
            kernels[ev.key] = kernels.get(ev.key, 0.0) + us
    total = sum(kernels.values())
    triton_us = sum(us for name, us in kernels.items() if name.split("_0d")[0] in triton_names or name in triton_names)
    return {"dsl_share": triton_us / total if total else None, "kernels_us": kernels}


def _measure_shape(op: str, shape: dict, kernel, reference, compare_outputs, deadline: float) -> dict:
    gen = _load(ROOT / "problems" / op / "input.py", f"{op}_input")
    inputs = gen.make_inputs(seed=0, device="cuda", **shape["inputs"])
    call_args = list(inputs.values())
    p = shape["inputs"]
    flop = 6 * p["token_count"] * p["top_k"] * p["intermediate_size"] * p["hidden_size"]
    triton_names = {name for name, obj in vars(kernel).items() if type(obj).__name__ == "JITFunction"}
    row: dict = {"shape": shape["id"], "inputs": p, "configs": []}
    ref = reference.Model(**shape["init"])(*call_args)
    torch.cuda.synchronize()
    per_expert = p["token_count"] * p["top_k"] / p["num_experts"]
    for cfg in _configs(op, per_expert):
        model = kernel.Model(**shape["init"])
        model.tiles = cfg
        entry: dict = {
            "tiles": cfg or "rule",
            "rule_would_pick": kernel._tiles(p["token_count"] * p["top_k"], p["num_experts"]),
        }
        if cfg is not None and time.perf_counter() > deadline:
            entry["error"] = "skipped: over the script's time budget (compiles are slow on this machine)"
            row["configs"].append(entry)
            continue

        def call(model=model):
            return model(*call_args)

        try:
            t0 = time.perf_counter()
            out = call()
            torch.cuda.synchronize()
            entry["first_call_s"] = round(time.perf_counter() - t0, 3)
            verdict = compare_outputs(ref, out, op)
            entry["correct"] = verdict.ok
            if not verdict.ok:
                entry["mismatch"] = verdict.message
            ms = _time_ms(call)
            entry["median_ms"] = round(ms, 4)
            entry["tflops"] = round(flop / ms / 1e9, 1)
            if cfg is None:
                entry.update(_triton_share(call, triton_names))
        except Exception as exc:  # noqa: BLE001 - a config that does not compile or run is a result, not the end
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        row["configs"].append(entry)
        print(
            f"{op} shape {shape['id']} {entry['tiles']}: "
            f"{entry.get('median_ms', '-')} ms, {entry.get('tflops', '-')} TFLOP/s, correct={entry.get('correct')}"
            f"{' ' + entry['error'] if 'error' in entry else ''}",
            flush=True,
        )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--ops", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument(
        "--budget-s",
        type=float,
        default=200.0,
        help="after this many seconds only each shape's rule config runs (default 200)",
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("moe_kernel_tiles: needs a CUDA GPU (none visible); run it on the H200 machine.", file=sys.stderr)
        return 2
    import triton

    from atrex_mcp.evaluate.compare import compare_outputs

    deadline = time.perf_counter() + args.budget_s
    results = {}
    for op in args.ops:
        kernel = _load(ROOT / "gpu_wiki" / "kernels" / f"{op}.py", f"wiki_{op}")
        reference = _load(ROOT / "problems" / op / "reference.py", f"ref_{op}")
        shapes = {s["id"]: s for s in json.loads((ROOT / "problems" / op / "shapes.json").read_text())["shapes"]}
        results[op] = []
        for sid, why in SHAPES[op]:
            results[op].append(
                dict(_measure_shape(op, shapes[sid], kernel, reference, compare_outputs, deadline), why=why)
            )
            torch.cuda.empty_cache()  # the shape's inputs are gone with its frame
    report = {
        "question": "which tile configs should the MoE kernels use, and are they correct",
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
