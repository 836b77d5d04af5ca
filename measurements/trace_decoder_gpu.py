"""Trace a small decoder built from the benchmark references on a GPU, import it, and summarise.

Issue "Trace-driven refresh", item 6. A two-layer decoder (one dense, one MoE layer) runs two
prefill steps and four decode steps under torch.profiler, in four variants:

  eager        every reference as the named custom op atrex::<op> (reference_ops), eager body
  compiled     the same named ops, each body a torch.compile'd reference (Inductor kernels run
               inside the named op, so host-op attribution still finds them)
  ranges       torch.compile'd references inside record_function("atrex::<op>") ranges: the
               operator is known, the shapes are not (ranges record no arguments)
  anonymous    torch.compile'd references with no names at all: only kernel-name rules can help,
               and Inductor's generated names (triton_poi_fused_…) match none, so this variant
               measures how much a trace without host-op names leaves unmapped

In the three compiled variants the references that loop in Python over data (attention_forward,
paged_attention_decode, fused_moe) stay eager (EAGER_IN_COMPILED).
Projection GEMMs (QKV, output, MLP, router, LM head) are plain torch work that no rule claims:
they are the "other" share. Each variant is imported as its own snapshot; eager and compiled are
also imported together as two applications with equal card-hour shares. (Snapshots are built in
memory with build_snapshot, not written: ranges and anonymous keep no operator.) The summary goes to
measurements/results/trace_h200_summary.{json,md}: operators found, device-time coverage (1 − unmapped
share), weights, shapes, links, timings.

    python3 measurements/trace_decoder_gpu.py                       # on the H200 (≤ about 3 minutes)
    python3 measurements/trace_decoder_gpu.py --device cpu --quick --variants eager   # a CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = {  # name → (form of each reference call, compiled?); ranges reuse anonymous's compiled models
    "eager": ("named", False),
    "compiled": ("named", True),
    "anonymous": ("anonymous", True),
    "ranges": ("range", True),
}


# References whose forward loops in Python over data (sequence lengths, experts): torch.compile
# would graph-break and recompile per layout, so the compiled variants run them eagerly — as a
# serving stack calls attention and MoE kernels as custom ops next to compiled elementwise code.
EAGER_IN_COMPILED = {"attention_forward", "paged_attention_decode", "fused_moe"}


def compile_reference(op: str, model):
    """torch.compile with dynamic shapes (one graph serves prefill and decode sizes)."""
    import torch

    return model if op in EAGER_IN_COMPILED else torch.compile(model, dynamic=True)


def decoder_steps(device: str, quick: bool):
    """Two prefill steps (1024 and 900 tokens: one bucket) and four decode steps (16 and 13 sequences)."""
    import torch

    from atrex_mcp.trace.synthetic import OpCall, Step

    hidden, heads, kv_heads, head_dim, inter, vocab, experts = (
        (256, 4, 2, 64, 512, 4096, 8) if quick else (2048, 16, 4, 128, 4096, 32000, 8)
    )
    ctx = 256 if quick else 1024

    def gemm(rows: int, k: int, n: int):
        a = torch.randn(rows, k, dtype=torch.bfloat16, device=device)
        w = torch.randn(n, k, dtype=torch.bfloat16, device=device) * k**-0.5
        return lambda: torch.nn.functional.linear(a, w)

    def layer(tokens: int, seqs: int, prefill: bool, moe: bool) -> list:
        qkv_width = (heads + 2 * kv_heads) * head_dim
        items = [
            OpCall("rms_norm", {"token_count": tokens, "hidden_size": hidden}, {"eps": 1e-6}),
            gemm(tokens, hidden, qkv_width),
            OpCall(
                "fused_qkv_rope",
                {
                    "total_tokens": tokens,
                    "num_heads": heads,
                    "num_kv_heads": kv_heads,
                    "head_dim": head_dim,
                    "dtype": "bf16",
                    "with_bias": False,
                },
                {
                    "num_heads": heads,
                    "num_kv_heads": kv_heads,
                    "head_dim": head_dim,
                    "rope_dim": head_dim,
                    "rope_base": 10000.0,
                },
            ),
            OpCall("reshape_and_cache", {"shape": [tokens, kv_heads, head_dim], "block_size": 16}),
        ]
        if prefill:
            per_seq = [tokens // seqs + (1 if i < tokens % seqs else 0) for i in range(seqs)]
            items.append(OpCall("attention_forward", {"num_heads": heads, "head_dim": head_dim, "seq_lens": per_seq}))
        else:
            items.append(
                OpCall(
                    "paged_attention_decode",
                    {
                        "num_seqs": seqs,
                        "ctx_len": ctx,
                        "num_query_heads": heads,
                        "num_kv_heads": kv_heads,
                        "head_size": head_dim,
                        "block_size": 16,
                        "dtype": "bf16",
                    },
                )
            )
        items += [
            gemm(tokens, heads * head_dim, hidden),
            OpCall("fused_add_rms_norm", {"token_count": tokens, "hidden_size": hidden}, {"eps": 1e-6}),
        ]
        if moe:
            items += [
                gemm(tokens, hidden, experts),
                OpCall(
                    "moe_topk_gating_softmax",
                    {"token_count": tokens, "num_experts": experts},
                    {"top_k": 2, "num_expert_groups": 0, "topk_group": 0},
                ),
                OpCall(
                    "fused_moe",
                    {
                        "token_count": tokens,
                        "hidden_size": hidden,
                        "intermediate_size": inter // 4,
                        "num_experts": experts,
                        "top_k": 2,
                    },
                    {"num_experts": experts, "intermediate_size": inter // 4, "top_k": 2},
                ),
            ]
        else:
            items += [
                gemm(tokens, hidden, 2 * inter),
                OpCall("silu_and_mul", {"shape": [tokens, 2 * inter]}),
                gemm(tokens, inter, hidden),
            ]
        return items

    def step(tokens: int, seqs: int, prefill: bool) -> Step:
        items = layer(tokens, seqs, prefill, moe=False) + layer(tokens, seqs, prefill, moe=True)
        items += [
            gemm(seqs, hidden, vocab),
            OpCall("topk_filter", {"seq_len": seqs, "hidden_size": vocab}, {"top_k": 50}),
        ]
        return Step("prefill" if prefill else "decode", items)

    big = 256 if quick else 1024
    return [
        step(big, 2, True),
        step(big - big // 8, 2, True),
        step(16, 16, False),
        step(16, 16, False),
        step(13, 13, False),
        step(13, 13, False),
    ]


def summarise(content) -> dict:
    manifest, weights = content.manifest, content.weights["weights"]
    return {
        "device": manifest.device,
        "unmapped_share": manifest.unmapped_share,
        "device_time_coverage": 1.0 - manifest.unmapped_share,
        "excluded_share": manifest.excluded_share,
        "unmapped_by_phase": manifest.unmapped_by_app_phase,
        "device_us_by_phase": manifest.device_us_by_app_phase,
        "links": manifest.inputs[0].links if len(manifest.inputs) == 1 else [i.links for i in manifest.inputs],
        "operators_found": sorted(manifest.operators),
        "operators_retained": sorted(op for op, r in manifest.operators.items() if r.retained),
        "weights": dict(sorted(weights.items(), key=lambda kv: -kv[1])),
        "shapes": {
            op: {
                "count": len(r.shapes),
                "calls": r.calls,
                "unresolved_calls": r.unresolved_calls,
                "buckets": [
                    {"id": sid, "count": s.count, "device_us": round(s.device_us, 1), "phases": s.phases}
                    for sid, s in r.shapes.items()
                ],
            }
            for op, r in manifest.operators.items()
        },
    }


def markdown(summary: dict) -> str:
    lines = [
        f"# Trace import of a reference decoder on {summary['hardware']}",
        "",
        f"{summary['date']} · torch {summary['torch']} · rules {summary['rules_version']} · "
        f"`python3 measurements/trace_decoder_gpu.py`",
        "",
        "Two decoder layers (dense + MoE) from the benchmark references, 2 prefill + 4 decode steps; "
        "projection GEMMs are plain torch (the expected 'other' time). Compiled variants keep "
        f"{', '.join(sorted(EAGER_IN_COMPILED))} eager. See the script's docstring for the variants.",
        "",
        "| variant | coverage | unmapped | mapped, not retained | operators found | retained | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, v in summary["variants"].items():
        if "error" in v:
            lines.append(f"| {name} | — | — | — | error: {v['error'][:80]} | | |")
            continue
        lines.append(
            f"| {name} | {100 * v['device_time_coverage']:.1f}% | {100 * v['unmapped_share']:.1f}% | "
            f"{100 * v['excluded_share']:.1f}% | {len(v['operators_found'])} | {len(v['operators_retained'])} | "
            f"{v['seconds']:.0f} |"
        )
    for name, v in [
        *summary["variants"].items(),
        ("eager+compiled (two apps, equal shares)", summary.get("combined", {})),
    ]:
        if not v or "error" in v:
            continue
        lines += [
            "",
            f"## {name}",
            "",
            f"links: {v['links']}",
            "",
            "| operator | weight | shapes | calls | unresolved |",
            "|---|---|---|---|---|",
        ]
        for op in v["operators_found"]:
            s = v["shapes"][op]
            w = v["weights"].get(op)
            lines.append(
                f"| {op} | {'—' if w is None else f'{100 * w:.2f}%'} | {s['count']} | {s['calls']} | "
                f"{s['unresolved_calls']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes (CPU smoke run)")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ", ".join(VARIANTS)
    )
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results")
    parser.add_argument("--keep", type=Path, help="keep the traces in this directory")
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=120.0,
        help="start no variant after this many seconds (keeps the run near 3 minutes)",
    )
    args = parser.parse_args()

    import torch

    from atrex_mcp.trace import TraceSpec, build_snapshot
    from atrex_mcp.trace.rules import Rules
    from atrex_mcp.trace.synthetic import record_trace

    work = args.keep or Path(tempfile.mkdtemp(prefix="atrex-trace-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    steps = decoder_steps(args.device, args.quick)
    hardware = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    summary: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "hardware": hardware,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "rules_version": Rules.load().version,
        "quick": args.quick,
        "variants": {},
    }
    traces: dict[str, Path] = {}
    begin = time.time()
    for name in args.variants.split(","):
        form, compiled = VARIANTS[name]
        started = time.time()
        if started - begin > args.deadline_s:
            summary["variants"][name] = {
                "error": f"not run: the {args.deadline_s:.0f} s deadline was reached",
                "seconds": 0.0,
            }
            continue
        try:
            for step in steps:
                for item in step.items:
                    if hasattr(item, "form"):
                        item.form = form
            trace = record_trace(
                steps,
                work / f"{name}.json",
                device=args.device,
                warmup=2,
                compile_model=compile_reference if compiled else None,
            )
            content = build_snapshot([TraceSpec(name, trace)])
            summary["variants"][name] = {
                **summarise(content),
                "seconds": time.time() - started,
                "trace_mb": trace.stat().st_size / 1e6,
            }
            traces[name] = trace
        except Exception as exc:  # noqa: BLE001 - one failing variant is reported, the others still run
            summary["variants"][name] = {"error": f"{type(exc).__name__}: {exc}", "seconds": time.time() - started}
        shown = ("unmapped_share", "operators_retained", "error", "seconds")
        print(f"{name}: {json.dumps({k: v for k, v in summary['variants'][name].items() if k in shown})}", flush=True)
    if "eager" in traces and "compiled" in traces:
        apps = work / "apps.yaml"
        apps.write_text("eager: 0.5\ncompiled: 0.5\n")
        try:
            summary["combined"] = summarise(
                build_snapshot(
                    [TraceSpec("eager", traces["eager"]), TraceSpec("compiled", traces["compiled"])], apps_file=apps
                )
            )
        except Exception as exc:  # noqa: BLE001 - reported in the summary
            summary["combined"] = {"error": f"{type(exc).__name__}: {exc}"}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "trace_h200_summary" if not args.quick else "trace_quick_summary"
    (args.out / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(summary))
    print(f"wrote {args.out / stem}.json and .md; traces in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
