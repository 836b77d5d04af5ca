"""Traces of the stacks people serve with, made here on CPU and imported: a decoder written the
Hugging Face way in plain PyTorch, the same blocks as the project's atrex:: custom ops, and the
decoder under torch.compile. Each asserts which operators are found (and through which rule),
the phase split, the shapes, and what the unmapped time is; the plain snapshot must load as a
problem set and pass `problems check`."""

from __future__ import annotations

import json

import pytest
import torch

from atrex_mcp.cli import main
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.trace import TraceSpec, build_snapshot, import_traces
from atrex_mcp.trace import plain_decoder as pd
from atrex_mcp.trace.synthetic import OpCall, Step, record_trace
from tests.trace_fixtures import COMPILED_TRACE, record_compiled_decoder

# 2 sequences of a 40-token prompt, then 3 decode steps; 4 query heads on 2 KV heads of size 32.
TINY = pd.DecoderConfig(
    hidden=128, heads=4, kv_heads=2, intermediate=256, layers=2, vocab=256, batch=2, prompt=40, decode_steps=3
)
DECODER_OPS = {"rms_norm", "mrope", "reshape_and_cache", "unified_attention", "paged_attention_decode", "silu_and_mul"}


def scored(catalog: Catalog, op: str) -> list:
    return catalog.visible(op).scored_shapes


def assert_breakdown_adds_up(manifest) -> None:
    shares = {name: c.share for name, c in manifest.unmapped_by_category.items()}
    assert sum(shares.values()) == pytest.approx(manifest.unmapped_share)
    assert "unknown" not in shares  # every unmapped microsecond has a name that says what it is


@pytest.fixture(scope="module")
def plain_trace(tmp_path_factory):
    model = pd.build(TINY, "cpu")
    return pd.record(model, TINY, "cpu", tmp_path_factory.mktemp("plain") / "decoder.json.gz")


@pytest.fixture(scope="module")
def plain_snapshot(plain_trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("snap") / "plain"
    return out, import_traces([TraceSpec("chat", plain_trace)], out)


def test_plain_pytorch_decoder_operators_and_rules(plain_snapshot):
    _out, manifest = plain_snapshot
    assert set(manifest.operators) == DECODER_OPS
    assert all(r.retained and r.unresolved_calls == 0 for r in manifest.operators.values())
    sources = {op: set(r.sources) for op, r in manifest.operators.items()}
    # F.rms_norm is one aten op; the hand-written LlamaRMSNorm is a pattern of six.
    assert sources["rms_norm"] == {
        "aten::rms_norm",
        "pattern aten::pow+aten::mean+aten::add+aten::rsqrt+aten::mul+aten::mul",
    }
    assert sources["silu_and_mul"] == {"pattern aten::silu+aten::mul"}
    assert sources["unified_attention"] == sources["paged_attention_decode"] == {"aten::scaled_dot_product_attention"}
    assert sources["reshape_and_cache"] == {"aten::index_copy_"}
    assert next(iter(sources["mrope"])).startswith("pattern aten::mul+aten::neg+aten::cat+aten::mul+aten::add")
    calls = {op: r.calls for op, r in manifest.operators.items()}
    layers, steps = TINY.layers, 1 + TINY.decode_steps
    assert calls == {
        "rms_norm": (2 * layers + 1) * steps,
        "mrope": layers * steps,
        "silu_and_mul": layers * steps,
        "reshape_and_cache": 2 * layers * steps,
        "unified_attention": layers,
        "paged_attention_decode": layers * TINY.decode_steps,
    }
    assert manifest.fused_kernels == []


def test_plain_pytorch_decoder_phases(plain_snapshot):
    _, manifest = plain_snapshot
    assert set(manifest.device_us_by_app_phase["chat"]) == {"prefill", "decode"}
    ops = manifest.operators
    assert set(ops["unified_attention"].device_us) == {"prefill"}  # causal SDPA over the prompt
    assert set(ops["paged_attention_decode"].device_us) == {"decode"}  # one query against the cache
    for op in ("rms_norm", "mrope", "silu_and_mul", "reshape_and_cache"):
        assert set(ops[op].device_us) == {"prefill", "decode"}, op


def test_plain_pytorch_decoder_unmapped_breakdown(plain_snapshot):
    _, manifest = plain_snapshot
    categories = manifest.unmapped_by_category
    assert list(categories)[0] == "gemm"  # the projections and the LM head dominate what is not an operator
    assert categories["gemm"].label == "GEMM (not a benchmark operator)"
    assert set(categories["gemm"].top) <= {"aten::mm", "aten::matmul", "aten::linear", "aten::addmm"}
    # embedding and the cos/sin lookups; which of them makes the top few depends on CPU load while recording
    assert "memory" in categories and {"aten::index_select", "aten::embedding"} & set(categories["memory"].top)
    assert 0 < manifest.unmapped_share < 1
    assert_breakdown_adds_up(manifest)


def test_plain_pytorch_decoder_shapes_run(plain_snapshot):
    out, manifest = plain_snapshot
    catalog = Catalog(out)
    attention = scored(catalog, "unified_attention")
    assert [s.inputs for s in attention] == [
        {
            "num_seqs": 2,
            "seq_lens": [64, 64],
            "num_query_heads": 4,
            "num_kv_heads": 2,
            "head_size": 32,
            "block_size": 16,
        }
    ]
    (decode,) = scored(catalog, "paged_attention_decode")
    assert decode.inputs == {
        "num_seqs": 2,
        "ctx_len": 64,
        "num_query_heads": 4,
        "num_kv_heads": 2,
        "head_size": 32,
        "block_size": 16,
        "dtype": "bf16",
    }
    assert all(s.defaulted == ["block_size"] for s in manifest.operators["paged_attention_decode"].shapes.values())
    rope = {s.inputs["token_count"]: s for s in scored(catalog, "mrope")}
    assert set(rope) == {128, 2}  # 80 prompt tokens, 2 decode tokens
    assert rope[2].inputs == {
        "token_count": 2,
        "num_query_heads": 4,
        "num_kv_heads": 2,
        "head_size": 32,
        "rotary_dim": 32,
    }
    assert rope[2].init["mrope_section"] == [4, 6, 6] and rope[2].init["is_neox_style"] is True
    assert {tuple(s.inputs["shape"]) for s in scored(catalog, "silu_and_mul")} == {(128, 512), (2, 512)}
    assert {tuple(s.inputs["shape"]) for s in scored(catalog, "reshape_and_cache")} == {(128, 2, 32), (2, 2, 32)}
    assert {s.init["eps"] for s in scored(catalog, "rms_norm")} == {1e-6}
    for op in catalog.names():  # every shape builds inputs the reference runs on
        model_cls, make_inputs = catalog.load_reference(op), catalog.load_make_inputs(op)
        for shape in scored(catalog, op):
            model_cls(**shape.init)(**make_inputs(seed=0, **shape.inputs))


def test_plain_snapshot_loads_with_problems_and_passes_check(plain_trace, plain_snapshot, tmp_path, capsys):
    out, _ = plain_snapshot
    assert main(["problems", "--root", str(out), "check", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) == len(DECODER_OPS)
    snap = tmp_path / "via-cli"
    assert (
        main(["trace", "import", str(plain_trace), "--app", "chat", "--problems", "problems", "--out", str(snap)]) == 0
    )
    text = capsys.readouterr().out
    assert "GEMM (not a benchmark operator)" in text and "unified_attention" in text
    assert Catalog(snap).names() == sorted(DECODER_OPS)


def custom_op_step(phase: str, tokens: int, seqs: int) -> Step:
    """The decoder's blocks as the project's atrex:: custom ops, with a projection GEMM between."""
    weight = torch.randn(256, 128, dtype=torch.bfloat16)
    x = torch.randn(tokens, 128, dtype=torch.bfloat16)
    attention = (
        OpCall(
            "unified_attention",
            {
                "num_seqs": seqs,
                "seq_lens": [tokens // seqs] * seqs,
                "num_query_heads": 4,
                "num_kv_heads": 2,
                "head_size": 32,
                "block_size": 16,
            },
        )
        if phase == "prefill"
        else OpCall(
            "paged_attention_decode",
            {
                "num_seqs": seqs,
                "ctx_len": 48,
                "num_query_heads": 4,
                "num_kv_heads": 2,
                "head_size": 32,
                "block_size": 16,
                "dtype": "bf16",
            },
        )
    )
    return Step(
        phase,
        [
            OpCall("rms_norm", {"token_count": tokens, "hidden_size": 128}, {"eps": 1e-6}),
            lambda: torch.nn.functional.linear(x, weight),
            OpCall("reshape_and_cache", {"shape": [tokens, 2, 32], "block_size": 16}),
            attention,
            OpCall("silu_and_mul", {"shape": [tokens, 512]}),
        ],
    )


def test_custom_op_blocks(tmp_path):
    trace = record_trace([custom_op_step("prefill", 80, 2), custom_op_step("decode", 2, 2)], tmp_path / "atrex.json")
    manifest = import_traces([TraceSpec("chat", trace)], tmp_path / "snap")
    ops = manifest.operators
    assert set(ops) == {"rms_norm", "reshape_and_cache", "unified_attention", "paged_attention_decode", "silu_and_mul"}
    assert all(set(r.sources) == {f"atrex::{op}"} and r.retained for op, r in ops.items())
    assert set(ops["unified_attention"].device_us) == {"prefill"}
    assert set(ops["paged_attention_decode"].device_us) == {"decode"}
    assert set(ops["rms_norm"].device_us) == {"prefill", "decode"}
    # The references run aten ops inside the custom ops; those stay with the custom op, so the only
    # unmapped time is the projection GEMM (and the profiler's own bookkeeping ops around it).
    assert list(manifest.unmapped_by_category)[0] == "gemm"
    assert_breakdown_adds_up(manifest)


def assert_compiled_decoder(trace) -> None:
    """torch.compile'd on CPU: Inductor's C++ kernels (named with cpp.enable_kernel_profile) are
    attributed by the aten ops their names list; SDPA stays an aten op with shapes."""
    manifest = build_snapshot([TraceSpec("chat", trace)]).manifest
    ops = manifest.operators
    assert set(ops) == DECODER_OPS
    for op in ("unified_attention", "paged_attention_decode"):
        assert ops[op].retained and ops[op].unresolved_calls == 0
        assert set(ops[op].sources) == {"aten::_scaled_dot_product_flash_attention_for_cpu"}
    for op in ("rms_norm", "silu_and_mul", "mrope", "reshape_and_cache"):
        assert all(s.startswith("cpp_fused_") for s in ops[op].sources), op
        assert ops[op].unresolved_reasons == {
            "shape incomplete: the generated kernel's launch records no argument shapes": ops[op].calls
        }
        assert not ops[op].retained
    assert any({"mrope", "reshape_and_cache"} <= set(k.operators) for k in manifest.fused_kernels)
    assert set(manifest.device_us_by_app_phase["chat"]) == {"prefill", "decode"}
    assert set(ops["unified_attention"].device_us) == {"prefill"}
    assert set(ops["paged_attention_decode"].device_us) == {"decode"}
    # on a CPU, how the GEMMs and the framework's other ops rank depends on the machine's load
    assert "gemm" in list(manifest.unmapped_by_category)[:2]
    assert "generated" in manifest.unmapped_by_category  # kernels that fuse no benchmark operator
    assert_breakdown_adds_up(manifest)


def test_compiled_decoder_recorded():
    assert_compiled_decoder(COMPILED_TRACE)


@pytest.mark.slow
def test_compiled_decoder_live(tmp_path):
    assert_compiled_decoder(record_compiled_decoder(tmp_path / "compiled.json.gz"))


def test_plain_pytorch_router_sampler_and_cache_writes(tmp_path):
    """The rest of the aten-level patterns, as a user's own profiler run records them: a softmax +
    topk MoE router, a GELU-gated MLP, a top-k logits filter, and an index_put_ KV-cache write."""
    from torch.profiler import ProfilerActivity, profile, record_function

    logits_router = torch.randn(48, 64)
    gate, up = torch.randn(48, 256, dtype=torch.bfloat16), torch.randn(48, 256, dtype=torch.bfloat16)
    scores = torch.randn(4, 1000)
    cache, new = torch.zeros(4, 2, 64, 32, dtype=torch.bfloat16), torch.randn(4, 2, 1, 32, dtype=torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, record_function("decode"):
        weights = torch.softmax(logits_router, dim=-1, dtype=torch.float)
        torch.topk(weights, 8, dim=-1)
        torch.nn.functional.gelu(gate) * up
        threshold = torch.topk(scores, 50)[0][..., -1, None]
        scores.masked_fill(scores < threshold, float("-inf"))
        cache[:, :, torch.tensor([7])] = new
    trace = tmp_path / "router.json"
    prof.export_chrome_trace(str(trace))
    content = build_snapshot([TraceSpec("chat", trace)])
    ops = content.manifest.operators
    assert set(ops) == {"moe_topk_gating_softmax", "gelu_and_mul", "topk_filter", "reshape_and_cache"}
    assert ops["moe_topk_gating_softmax"].sources == {"pattern aten::softmax+aten::topk": 1}
    assert ops["topk_filter"].sources == {"pattern aten::topk+aten::lt+aten::masked_fill": 1}
    assert ops["reshape_and_cache"].sources == {"aten::index_put_": 1}
    assert not ops["gelu_and_mul"].retained and not ops["gelu_and_mul"].benchmark
    assert "not in the problem set" in ops["gelu_and_mul"].dropped_reason
    router = json.loads(content.files["moe_topk_gating_softmax/shapes.json"])["shapes"][0]
    assert router["init"] == {"top_k": 8, "num_expert_groups": 0, "topk_group": 0}
    assert router["inputs"] == {"token_count": 64, "num_experts": 64}
    sampler = json.loads(content.files["topk_filter/shapes.json"])["shapes"][0]
    assert (sampler["init"], sampler["inputs"]) == ({"top_k": 50}, {"seq_len": 4, "hidden_size": 1000})
    cache_write = json.loads(content.files["reshape_and_cache/shapes.json"])["shapes"][0]
    assert cache_write["inputs"] == {"shape": [4, 2, 32], "block_size": 16}
