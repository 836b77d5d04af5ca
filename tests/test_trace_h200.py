"""Real H200 traces of the plain-PyTorch decoder (measurements/trace_hf_decoder_gpu.py), eager and compiled:
what `trace import` finds, the phase split and the unmapped breakdown by category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atrex_mcp.trace import TraceSpec, build_snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "trace"
DECODER_OPS = {"rms_norm", "mrope", "reshape_and_cache", "unified_attention", "paged_attention_decode", "silu_and_mul"}


def import_h200(name: str):
    content = build_snapshot([TraceSpec("chat", FIXTURES / name)])
    manifest = content.manifest
    assert manifest.device == "gpu" and any("H200" in d for d in manifest.inputs[0].device_names)
    shares = {k: c.share for k, c in manifest.unmapped_by_category.items()}
    assert sum(shares.values()) == pytest.approx(manifest.unmapped_share)
    assert list(shares)[0] == "gemm" and shares["gemm"] > 0.5 and shares.get("unknown", 0.0) < 0.01
    assert set(manifest.device_us_by_app_phase["chat"]) == {"prefill", "decode"}
    assert set(manifest.operators["unified_attention"].device_us) == {"prefill"}
    assert set(manifest.operators["paged_attention_decode"].device_us) == {"decode"}
    return content, manifest.operators


def test_h200_eager_decoder():
    content, ops = import_h200("h200_plain_decoder_eager.json.gz")
    assert set(ops) == DECODER_OPS
    assert all(r.retained and r.unresolved_calls == 0 for r in ops.values())
    shapes = json.loads(content.files["unified_attention/shapes.json"])["shapes"]
    (scored,) = [s for s in shapes if not s.get("smoke")]
    inputs = scored["inputs"]
    assert (inputs["num_query_heads"], inputs["num_kv_heads"], inputs["head_size"]) == (32, 8, 128)


def test_h200_compiled_decoder():
    _, ops = import_h200("h200_plain_decoder_compiled.json.gz")
    assert set(ops) >= DECODER_OPS
    for op in ("unified_attention", "paged_attention_decode"):
        assert ops[op].retained and ops[op].unresolved_calls == 0
    for op in ("rms_norm", "silu_and_mul"):
        assert ops[op].retained and any(s.startswith("triton_") for s in ops[op].sources), op
    for op in ("mrope", "reshape_and_cache"):  # fused by Inductor; found, but their shapes are not in the trace
        assert not ops[op].retained
