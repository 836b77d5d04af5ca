"""What does `trace import` find in a plain-PyTorch (Hugging Face style) decoder's GPU trace, eager
and torch.compile'd?

The decoder (atrex_mcp.trace.plain_decoder: F.rms_norm and the hand-written LlamaRMSNorm, q/k/v
linear, rotary from cos/sin, a static KV cache written with index_copy_, SDPA causal prefill and
SDPA decode against the cache with GQA, silu*mul MLP, LM head) runs one prefill and a few decode
steps under torch.profiler(record_shapes=True), inside "prefill" / "decode_<i>" ranges. Two
variants: eager, and the same model under torch.compile(dynamic=True). For each, the gzipped trace
is written to OUT/<variant>.json.gz, `atrex-mcp trace import` is run on it (OUT/snapshot-<variant>,
manifest printed with --json), and the summaries go to OUT/summary.{json,md}: operators found
(calls, how they were recognised, shapes, phases, retained or why not), mapped share, the unmapped
breakdown by category with the names behind it, fused kernels, weights, timings.

    python3 measurements/trace_hf_decoder_gpu.py                          # H200: hidden 4096, 32 heads, bf16
    python3 measurements/trace_hf_decoder_gpu.py --device cpu --tiny      # CPU smoke run of the same path
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TINY = dict(hidden=128, heads=4, kv_heads=2, intermediate=256, layers=1, vocab=256, batch=2, prompt=40, decode_steps=2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "measurements" / "results" / "trace_hf_decoder_h200",
        help="output directory (traces, snapshots, summary)",
    )
    parser.add_argument("--variants", default="eager,compiled", help="comma-separated: eager, compiled")
    parser.add_argument("--tiny", action="store_true", help="a tiny model (for a CPU smoke run)")
    parser.add_argument("--layers", type=int, help="decoder layers (default 2)")
    parser.add_argument("--batch", type=int, help="sequences (default 4)")
    parser.add_argument("--prompt", type=int, help="prompt tokens per sequence (default 512)")
    parser.add_argument("--decode-steps", type=int, help="decode steps (default 4)")
    return parser.parse_args(argv)


def config(args: argparse.Namespace):
    from atrex_mcp.trace.plain_decoder import DecoderConfig

    sizes = dict(TINY) if args.tiny else {}
    for name in ("layers", "batch", "prompt", "decode_steps"):
        if getattr(args, name) is not None:
            sizes[name] = getattr(args, name)
    return DecoderConfig(**sizes)


def record_variant(variant: str, cfg, device: str, out: Path) -> dict:
    """Build, (compile,) warm up and profile one variant; returns timings and the trace's size."""
    import torch
    import torch._inductor.config as inductor_config

    from atrex_mcp.trace import plain_decoder as pd

    torch._dynamo.reset()
    model = pd.build(cfg, device)
    started = time.perf_counter()
    # On CPU, Inductor's C++ kernels appear in a trace only when profiled by name.
    with inductor_config.patch({"cpp.enable_kernel_profile": device == "cpu"}):
        runner = torch.compile(model, dynamic=True) if variant == "compiled" else model
        pd.generate(runner, cfg, device)  # warm-up: compiles and autotunes outside the profile
        warm = time.perf_counter() - started
        pd.record(runner, cfg, device, out, warmup=0)
    return {
        "warmup_s": round(warm, 2),
        "record_s": round(time.perf_counter() - started - warm, 2),
        "trace_bytes": out.stat().st_size,
    }


def import_variant(variant: str, trace: Path, out: Path) -> dict:
    """`atrex-mcp trace import` as a user runs it; the manifest comes back with --json. If the import
    is refused (no operator could be kept), the same report is built without writing."""
    snapshot = out / f"snapshot-{variant}"
    command = [
        sys.executable,
        "-m",
        "atrex_mcp.cli",
        "trace",
        "import",
        str(trace),
        "--app",
        variant,
        "--out",
        str(snapshot),
        "--json",
    ]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = round(time.perf_counter() - started, 2)
    if done.returncode == 0:
        manifest = json.loads(done.stdout)
        weights = json.loads((snapshot / "weights.json").read_text())["weights"]
        return {"command": " ".join(command[1:]), "rc": 0, "seconds": seconds, "manifest": manifest, "weights": weights}
    from atrex_mcp.trace import TraceSpec, build_snapshot

    content = build_snapshot([TraceSpec(variant, trace)])
    return {
        "command": " ".join(command[1:]),
        "rc": done.returncode,
        "error": done.stderr.strip()[-2000:],
        "seconds": seconds,
        "manifest": json.loads(content.manifest.model_dump_json()),
        "weights": content.weights["weights"],
    }


def summarise(variant: str, record: dict, imported: dict) -> dict:
    m = imported["manifest"]
    operators = {
        op: {
            "retained": r["retained"],
            "calls": r["calls"],
            "unresolved_calls": r["unresolved_calls"],
            "via": r["sources"],
            "phases": sorted(r["device_us"]),
            "device_us": round(sum(r["device_us"].values()), 1),
            "shapes": len(r["shapes"]),
            "weight": imported["weights"].get(op),
            "why_not_retained": r["dropped_reason"],
            "unresolved": r["unresolved_reasons"],
        }
        for op, r in m["operators"].items()
    }
    return {
        "variant": variant,
        **record,
        "import_rc": imported["rc"],
        "import_error": imported.get("error"),
        "import_command": imported["command"],
        "import_s": imported["seconds"],
        "mapped_share": 1 - m["unmapped_share"],
        "excluded_share": m["excluded_share"],
        "unmapped_share": m["unmapped_share"],
        "unmapped_by_category": {
            k: {"label": c["label"], "share": c["share"], "top": c["top"]} for k, c in m["unmapped_by_category"].items()
        },
        "fused_kernels": m["fused_kernels"],
        "links": m["inputs"][0]["links"],
        "device_us_by_phase": m["device_us_by_app_phase"].get(variant, {}),
        "operators": operators,
    }


def markdown(doc: dict) -> str:
    lines = [
        f"# trace import on a plain-PyTorch decoder ({doc['device_name']})",
        "",
        f"{doc['created']} · torch {doc['torch']} · triton {doc['triton']} · Python {doc['python']} · "
        f"config {doc['config']}",
        "",
    ]
    for s in doc["variants"]:
        lines += [
            f"## {s['variant']}",
            "",
            f"mapped **{100 * s['mapped_share']:.1f} %** of device time to operators "
            f"(of which not retained {100 * s['excluded_share']:.1f} %); "
            f"unmapped {100 * s['unmapped_share']:.1f} %. "
            f"Trace {s['trace_bytes'] / 1e6:.2f} MB; warm-up {s['warmup_s']} s, record {s['record_s']} s, "
            f"import {s['import_s']} s (rc {s['import_rc']}).",
            "",
            "| unmapped | share | largest names |",
            "|---|---|---|",
        ]
        for c in s["unmapped_by_category"].values():
            lines.append(f"| {c['label']} | {100 * c['share']:.1f} % | {', '.join(list(c['top'])[:3])} |")
        lines += [
            "",
            "| operator | calls | phases | shapes | weight | via | retained / why not |",
            "|---|---|---|---|---|---|---|",
        ]
        for op, o in s["operators"].items():
            weight = "" if o["weight"] is None else f"{o['weight']:.3f}"
            state = (
                "yes"
                if o["retained"]
                else (o["why_not_retained"] or "") + (f" ({next(iter(o['unresolved']))})" if o["unresolved"] else "")
            )
            lines.append(
                f"| {op} | {o['calls']} | {', '.join(o['phases'])} | {o['shapes']} | {weight} | "
                f"{', '.join(list(o['via'])[:2])} | {state} |"
            )
        for k in s["fused_kernels"]:
            lines.append(f"\nfused: `{k['kernel']}` covers {' + '.join(k['operators'])} ({k['launches']} launches)")
        if s["import_error"]:
            lines += ["", f"import refused: {s['import_error']}"]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import triton

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: no CUDA device; run with --device cpu --tiny for a CPU smoke run", file=sys.stderr)
        return 2
    cfg = config(args)
    out = args.out
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} is not empty; pass a new --out", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(variants) - {"eager", "compiled"}
    if unknown:
        print(f"error: unknown variant(s) {', '.join(sorted(unknown))}; use eager, compiled", file=sys.stderr)
        return 2
    started = time.perf_counter()
    summaries = []
    for variant in variants:
        trace = out / f"{variant}.json.gz"
        record = record_variant(variant, cfg, args.device, trace)
        summaries.append(summarise(variant, record, import_variant(variant, trace, out)))
        print(
            f"{variant}: mapped {100 * summaries[-1]['mapped_share']:.1f}% "
            f"({time.perf_counter() - started:.0f} s so far)",
            flush=True,
        )
    doc = {
        "question": "what trace import finds in a plain-PyTorch decoder trace, eager and torch.compile'd",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "device_name": (
            torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
        ),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "config": {k: (str(v) if k == "dtype" else v) for k, v in cfg.__dict__.items()},
        "total_s": round(time.perf_counter() - started, 1),
        "variants": summaries,
    }
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "summary.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
