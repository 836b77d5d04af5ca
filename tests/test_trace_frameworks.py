"""Serving frameworks' names on hand-built Kineto traces: vLLM v1's attention op, whose shapes come
from the flash-attention op it calls; SGLang's FA3 op split into decode and extend; sgl-kernel and
FlashInfer norms and activations. Each resolved shape builds inputs the reference runs on."""

from __future__ import annotations

import json

import pytest

from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.trace import TraceSpec, build_snapshot
from tests.trace_fixtures import BF16, KinetoBuilder

NONE = ([], "", "")


def fa3_args(tokens: int, seqs: int, max_q: int, blocks: int, block: int, pool: int) -> list:
    """FlashAttention-3's fwd(q, k_cache, v_cache, k_new, v_new, qv, out, cu_seqlens_q, cu_seqlens_k,
    cu_seqlens_k_new, seqused_q, seqused_k, max_seqlen_q, max_seqlen_k, page_table, …)."""
    cache = ([pool, block, 2, 128], BF16, "")
    return [
        ([tokens, 8, 128], BF16, ""),
        cache,
        cache,
        NONE,
        NONE,
        NONE,
        NONE,
        ([seqs + 1], "int", ""),
        NONE,
        NONE,
        NONE,
        ([seqs], "int", ""),
        ([], "Scalar", str(max_q)),
        ([], "Scalar", "4096"),
        ([seqs, blocks], "int", ""),
    ]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    b = KinetoBuilder()
    b.range("prefill", 0, 100)
    b.op("vllm::unified_attention_with_output", 10, 50, [([96, 8, 128], BF16, "")])  # holds the FA3 call
    b.kernel("void flash::flash_fwd_kernel<...>", 30, b.op("_vllm_fa3_C::fwd", 20, 30, fa3_args(96, 3, 64, 8, 16, 64)))
    b.kernel(
        "void flashinfer::norm::RMSNormKernel<8u, c10::BFloat16>",
        5,
        b.op(
            "sgl_kernel::rmsnorm", 70, 10, [([96, 4096], BF16, "")] * 2 + [([4096], BF16, ""), ([], "Scalar", "1e-06")]
        ),
    )
    b.range("decode", 200, 100)
    b.kernel(
        "void flash::flash_fwd_splitkv_kernel<...>", 20, b.op("sgl_kernel::fwd", 210, 30, fa3_args(5, 5, 1, 40, 1, 200))
    )
    b.kernel(
        "void flashinfer::activation::act_and_mul_kernel<c10::BFloat16, silu>",
        4,
        b.op("flashinfer::silu_and_mul", 250, 10, [([5, 1024], BF16, ""), ([5, 2048], BF16, ""), ([], "Scalar", "1")]),
    )
    trace = b.write(tmp_path_factory.mktemp("fw") / "frameworks.json")
    return build_snapshot([TraceSpec("serve", trace)])


def shapes(content, op: str) -> list[dict]:
    return [s for s in json.loads(content.files[f"{op}/shapes.json"])["shapes"] if not s.get("smoke")]


def test_vllm_attention_shape_from_the_flash_attention_op_inside(snapshot):
    record = snapshot.manifest.operators["unified_attention"]
    assert record.sources == {"vllm::unified_attention_with_output": 1} and record.unresolved_calls == 0
    (shape,) = shapes(snapshot, "unified_attention")
    assert shape["inputs"] == {
        "num_seqs": 4,
        "seq_lens": [32, 32, 32, 32],
        "num_query_heads": 8,
        "num_kv_heads": 2,
        "head_size": 128,
        "block_size": 16,
    }


def test_sglang_fa3_decode_and_framework_norms(snapshot):
    ops = snapshot.manifest.operators
    assert set(ops) == {"unified_attention", "paged_attention_decode", "rms_norm", "silu_and_mul"}
    assert ops["paged_attention_decode"].sources == {"sgl_kernel::fwd": 1}
    assert set(ops["paged_attention_decode"].device_us) == {"decode"}
    (decode,) = shapes(snapshot, "paged_attention_decode")
    assert decode["inputs"] == {
        "num_seqs": 8,
        "ctx_len": 64,
        "num_query_heads": 8,
        "num_kv_heads": 2,
        "head_size": 128,
        "block_size": 1,
        "dtype": "bf16",
    }
    assert shapes(snapshot, "rms_norm")[0]["inputs"] == {"token_count": 128, "hidden_size": 4096}
    assert shapes(snapshot, "silu_and_mul")[0]["inputs"] == {"shape": [8, 2048]}
    assert snapshot.manifest.unmapped_share == 0


def test_framework_shapes_run():
    catalog = Catalog()
    # block_size 1: the page size of SGLang's token-granular KV pool
    shape = {
        "num_seqs": 2,
        "ctx_len": 8,
        "num_query_heads": 8,
        "num_kv_heads": 2,
        "head_size": 64,
        "block_size": 1,
        "dtype": "bf16",
    }
    catalog.load_reference("paged_attention_decode")()(
        **catalog.load_make_inputs("paged_attention_decode")(seed=0, **shape)
    )
