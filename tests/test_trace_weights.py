"""Eq. 2–3 against a hand computation on hand-written GPU traces with known kernel times, and the
links from kernels to host operators (correlation id, External id, time containment, kernel
name, GPU-side ranges)."""

from __future__ import annotations

import json

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.trace import TraceSpec, build_snapshot, import_traces
from atrex_mcp.trace.weights import read_app_shares
from tests.trace_fixtures import KinetoBuilder, attention_args, mm_args, paged_args, rms_norm_args


def chat_trace(path):
    b = KinetoBuilder()
    b.range("prefill", 0, 1000)
    b.kernel(
        "void vllm::rms_norm_kernel<c10::BFloat16, 8>(...)", 30, b.op("_C::rms_norm", 10, 50, rms_norm_args(100, 64))
    )
    b.kernel(
        "fmha_cutlassF_bf16",
        50,
        b.op("atrex::attention_forward", 100, 50, attention_args([60, 40])),
        link="external_id",
    )
    b.kernel("sm90_xmma_gemm_bf16bf16", 20, b.op("aten::mm", 200, 50, mm_args(100, 64, 256)))
    b.range("decode", 2000, 1000)
    b.kernel(
        "void vllm::rms_norm_kernel<c10::BFloat16, 8>(...)", 10, b.op("_C::rms_norm", 2010, 50, rms_norm_args(4, 64))
    )
    b.kernel(
        "void vllm::paged_attention_v1_kernel<...>", 60, b.op("_C::paged_attention_v1", 2100, 50, paged_args(4, 100))
    )
    b.kernel("sm90_xmma_gemm_bf16bf16", 30, b.op("aten::mm", 2200, 50, mm_args(4, 64, 256)))
    return b.write(path)


def code_trace(path):
    b = KinetoBuilder()
    b.range("prefill", 0, 1000)
    b.kernel(
        "void vllm::rms_norm_kernel<c10::BFloat16, 8>(...)", 40, b.op("_C::rms_norm", 10, 50, rms_norm_args(200, 64))
    )
    b.kernel("sm90_xmma_gemm_bf16bf16", 60, b.op("aten::mm", 200, 50, mm_args(200, 64, 256)))
    return b.write(path)


def test_weights_match_hand_computation_of_eq2_eq3(tmp_path):
    apps = tmp_path / "apps.yaml"
    apps.write_text("# card-hour shares\nchat: 3\ncode: 1   # a quarter\n")
    specs = [
        TraceSpec("chat", chat_trace(tmp_path / "chat.json")),
        TraceSpec("code", code_trace(tmp_path / "code.json")),
    ]
    manifest = import_traces(specs, tmp_path / "snap", apps_file=apps)

    # Eq. 2 — chat/prefill: rms 30, attention 50, other 20 of 100; chat/decode: rms 10, paged 60,
    # other 30 of 100; code/prefill: rms 40, other 60 of 100.
    # Eq. 3 — chat: rms (0.3+0.1)/2, attention 0.5, paged 0.6, other (0.2+0.3)/2; code: rms 0.4, other 0.6;
    # apps chat 0.75, code 0.25.
    raw = {"rms_norm": 0.75 * 0.2 + 0.25 * 0.4, "attention_forward": 0.75 * 0.5, "paged_attention_decode": 0.75 * 0.6}
    doc = json.loads((tmp_path / "snap" / "weights.json").read_text())
    assert doc["raw"] == pytest.approx(raw)
    assert doc["raw_sum"] == pytest.approx(sum(raw.values()))
    assert doc["weights"] == pytest.approx({op: w / sum(raw.values()) for op, w in raw.items()})
    assert manifest.unmapped_share == pytest.approx(0.75 * 0.25 + 0.25 * 0.6)
    assert manifest.unmapped_by_app_phase["chat"] == pytest.approx({"prefill": 0.2, "decode": 0.3})
    assert manifest.unmapped_by_app_phase["code"] == pytest.approx({"prefill": 0.6})
    assert manifest.apps == pytest.approx({"chat": 0.75, "code": 0.25})
    assert manifest.device == "gpu"
    assert manifest.inputs[0].links == {"correlation": 5, "external_id": 1}
    assert manifest.inputs[0].device_names == ["Test GPU"]
    assert Catalog(tmp_path / "snap").weights() == pytest.approx(doc["weights"])


def test_framework_ops_give_bucketed_shapes(tmp_path):
    specs = [
        TraceSpec("chat", chat_trace(tmp_path / "chat.json")),
        TraceSpec("code", code_trace(tmp_path / "code.json")),
    ]
    manifest = import_traces(specs, tmp_path / "snap")
    catalog = Catalog(tmp_path / "snap")
    rms = {s.inputs["token_count"]: s for s in catalog.visible("rms_norm").scored_shapes}
    assert set(rms) == {128, 4, 256}  # 100 → 128, 4 → 4, 200 → 256
    assert rms[128].inputs["hidden_size"] == 64 and rms[128].init == {"eps": 1e-06}
    assert manifest.operators["rms_norm"].shapes[rms[4].id].phases == ["decode"]
    (attention,) = catalog.visible("attention_forward").scored_shapes
    assert attention.inputs == {"num_heads": 2, "head_dim": 64, "seq_lens": [64, 64]}
    (paged,) = catalog.visible("paged_attention_decode").scored_shapes
    assert paged.inputs == {
        "num_seqs": 4,
        "ctx_len": 128,
        "num_query_heads": 4,
        "num_kv_heads": 2,
        "head_size": 64,
        "block_size": 16,
        "dtype": "bf16",
    }


def fallback_trace(path):
    """No phase ranges on the host; links other than correlation ids; a GPU-side range."""
    b = KinetoBuilder()
    big = b.op("_C::rms_norm", 0, 100, rms_norm_args(1000, 64))
    b.kernel("void vllm::rms_norm_kernel<c10::BFloat16, 8>(...)", 40, big, link="none", ts=10)  # inside the op
    b.kernel("sm90_xmma_gemm_bf16bf16", 20, b.op("aten::mm", 150, 50, mm_args(1000, 64, 256)))
    b.kernel(
        "void vllm::rms_norm_kernel<c10::BFloat16, 8>(...)", 10, b.op("_C::rms_norm", 400, 50, rms_norm_args(8, 64))
    )
    b.kernel("void vllm::rms_norm_kernel<c10::BFloat16, 8>(...)", 5, b.op("aten::add", 500, 20, mm_args(8, 64, 64)))
    b.gpu_range("decode", 49_000, 2000)
    b.gpu_range("atrex::silu_and_mul", 49_500, 100)
    b.kernel("triton_poi_fused_mul_silu_0", 7, None, link="none", ts=49_510)
    return b.write(path)


def test_fallback_links_and_token_phases(tmp_path):
    manifest = import_traces([TraceSpec("chat", fallback_trace(tmp_path / "t.json"))], tmp_path / "snap")
    assert manifest.inputs[0].links == {
        "time_containment": 1,
        "correlation": 3,
        "none": 1,
        "kernel_name": 1,
        "gpu_range": 1,
    }
    # prefill (by the 1000-token call): rms 40, other 20; decode (8 tokens, the GPU range): rms 10+5, silu 7.
    assert manifest.device_us_by_app_phase == {"chat": {"prefill": 60.0, "decode": 22.0}}
    rms = manifest.operators["rms_norm"]
    assert rms.calls == 3 and rms.unresolved_calls == 1
    assert rms.unresolved_reasons == {"matched by kernel name only": 1}
    silu = manifest.operators["silu_and_mul"]
    assert not silu.retained and silu.dropped_reason == "no call's shape could be read from the trace"
    assert manifest.unmapped_share == pytest.approx(1 / 3)
    assert manifest.excluded_share == pytest.approx(7 / 22)
    doc = json.loads((tmp_path / "snap" / "weights.json").read_text())
    assert doc["raw"] == pytest.approx({"rms_norm": (40 / 60 + 15 / 22) / 2})
    assert doc["weights"] == {"rms_norm": 1.0}


def test_forced_phase_and_decode_threshold(tmp_path):
    trace = fallback_trace(tmp_path / "t.json")
    forced = import_traces([TraceSpec("chat", trace)], tmp_path / "a", phase="decode")
    assert set(forced.device_us_by_app_phase["chat"]) == {"decode"}
    high = import_traces([TraceSpec("chat", trace)], tmp_path / "b", decode_max_tokens=4096)
    assert high.decode_max_tokens == 4096
    assert set(high.device_us_by_app_phase["chat"]) == {"decode"}  # GPU range and 1000 ≤ 4096


def test_app_shares_file_formats(tmp_path):
    lines = tmp_path / "apps.yaml"
    lines.write_text("---\n'chat': 0.6\ncode: 4e-1  # comment\n\n")
    assert read_app_shares(lines) == {"chat": 0.6, "code": 0.4}
    js = tmp_path / "apps.json"
    js.write_text('{"chat": 2, "code": 1}')
    assert read_app_shares(js) == {"chat": 2.0, "code": 1.0}
    for text, fragment in [
        ("chat 0.5\n", "expected `name: share`"),
        ("chat: -1\n", "non-negative"),
        ("a: 1\na: 2\n", "line 2: application 'a' is listed twice"),
        ("a: 0\n", "positive"),
        ("{bad json", "line 1"),
    ]:
        lines.write_text(text)
        with pytest.raises(AtrexError, match=fragment):
            read_app_shares(lines)


def test_app_missing_from_apps_file_is_an_error(tmp_path):
    apps = tmp_path / "apps.yaml"
    apps.write_text("chat: 1\n")
    with pytest.raises(AtrexError) as err:
        import_traces([TraceSpec("code", code_trace(tmp_path / "code.json"))], tmp_path / "snap", apps_file=apps)
    assert err.value.info.category == "app_without_share"
    assert not (tmp_path / "snap").exists()


def test_trace_without_recorded_shapes(tmp_path):
    b = KinetoBuilder()
    op = b.op("_C::rms_norm", 10, 50, rms_norm_args(100, 64))
    del op["args"]["Input Dims"]
    b.kernel("void vllm::rms_norm_kernel<float>(...)", 30, op)
    content = build_snapshot([TraceSpec("chat", b.write(tmp_path / "t.json"))])
    rms = content.manifest.operators["rms_norm"]
    assert not rms.retained
    assert rms.unresolved_reasons == {"no recorded argument shapes (profile with record_shapes=True)": 1}
    with pytest.raises(AtrexError, match="No benchmark operator could be kept"):
        import_traces([TraceSpec("chat", tmp_path / "t.json")], tmp_path / "snap")
