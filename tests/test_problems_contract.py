"""The contract every problem folder keeps, checked once for each of the operators: shapes.json
has the scored shapes of the shared source data plus one trailing smoke shape, and every shape
binds to Model and make_inputs; make_inputs returns Model.forward's inputs, seeded locally and
reproducibly; the reference at its smoke shape has no state, leaves its inputs alone, returns
the outputs SPEC §3 names (container, keys, dtypes, shapes), and is deterministic per seed.
The operators' own arithmetic is tested in tests/test_problems_refs_{a,b,c}.py."""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from atrex_mcp.problemset.catalog import Shape
from problem_contract import (
    BF16,
    F16,
    F32,
    FN,
    I32,
    PROBLEMS,
    SHARED_SHAPES,
    catalog,
    leaves,
    make_inputs,
    model,
    same_bits,
    smoke,
)

OPS = catalog().names()

DTYPES = {"bf16": BF16, "fp16": F16}

# Inputs fixed by the shape parameters alone (sequence lengths and their prefix sums); every
# other input must change with the seed.
SHAPE_DETERMINED_INPUTS = {
    "attention_forward": {"cu_seqlens_q", "cu_seqlens_k"},
    "mla_decode_attention": {"seq_lens"},
    "paged_attention_decode": {"seq_lens"},
    "unified_attention": {"cu_seqlens_q", "seqused_k"},
}
SMOKE_INPUT_ELEMENTS = 1 << 20  # a smoke shape is for a quick CPU run
# fp8_blockscale_fused_moe's smoke shape holds the one-byte weight codes of 8 experts (2.4 M).
SMOKE_INPUT_ELEMENTS_OVERRIDE = {"fp8_blockscale_fused_moe": 1 << 22}
INFINITE_OUTPUTS = {"topk_filter"}  # its filtered-out entries are -inf by design

Leaf = tuple[Any, tuple[int, ...], torch.dtype]  # (key as in problem_contract.leaves, shape, dtype)
Outputs = Callable[[Shape, dict[str, torch.Tensor]], list[Leaf]]


def _th(s: Shape) -> tuple[int, int]:
    return (s.inputs["token_count"], s.inputs["hidden_size"])


def _reshape_and_cache(s: Shape, _: dict) -> list[Leaf]:
    n, heads, dim = s.inputs["shape"]
    cache_shape = (math.ceil(n / s.inputs["block_size"]), s.inputs["block_size"], heads, dim)
    return [("key_cache", cache_shape, BF16), ("value_cache", cache_shape, BF16)]


def _fused_qkv_rope(s: Shape, _: dict) -> list[Leaf]:
    i, dtype = s.inputs, DTYPES[s.inputs["dtype"]]
    t, d = i["total_tokens"], i["head_dim"]
    return [
        (0, (t, i["num_heads"], d), dtype),
        (1, (t, i["num_kv_heads"], d), dtype),
        (2, (t, i["num_kv_heads"], d), dtype),
    ]


def _mrope(s: Shape, _: dict) -> list[Leaf]:
    i = s.inputs
    return [
        ("q", (i["token_count"], i["num_query_heads"] * i["head_size"]), BF16),
        ("k", (i["token_count"], i["num_kv_heads"] * i["head_size"]), BF16),
    ]


def _moe_count_and_sort(s: Shape, _: dict) -> list[Leaf]:
    e = s.init["num_experts"]
    return [
        ("sorted_token_ids", (s.inputs["token_count"] * s.inputs["top_k"],), I32),
        ("expert_token_counts", (e,), I32),
        ("cumsum", (e + 1,), I32),
    ]


def _moe_align_block_size(s: Shape, inputs: dict) -> list[Leaf]:
    block = s.init["block_size"]
    counts = [int((inputs["topk_ids"] == e).sum()) for e in range(s.init["num_experts"])]
    blocks = sum(-(-c // block) for c in counts)
    return [
        ("sorted_token_ids", (blocks * block,), I32),
        ("expert_ids", (blocks,), I32),
        ("num_tokens_post_pad", (1,), I32),
    ]


def _gated_delta_rule_update(s: Shape, _: dict) -> list[Leaf]:
    d = s.inputs
    return [
        ("out", (d["batch_size"], d["token_count"], d["num_v_heads"], d["value_dim"]), BF16),
        ("final_state", (d["state_count"], d["num_v_heads"], d["key_dim"], d["value_dim"]), F32),
    ]


def _chunk_gated_delta_rule_state(s: Shape, _: dict) -> list[Leaf]:
    d = s.inputs
    chunks = -(-d["token_count"] // s.init["chunk_size"])
    hv, kd, vd = d["num_v_heads"], d["key_dim"], d["value_dim"]
    return [
        ("h", (d["batch_size"], chunks, hv, kd, vd), BF16),
        ("v_new", (d["batch_size"], d["token_count"], hv, vd), BF16),
        ("final_state", (d["state_count"], hv, kd, vd), F32),
    ]


# op -> the outputs SPEC §3 names, from the shape (and, for data-dependent lengths, the inputs)
OUTPUTS: dict[str, Outputs] = {
    "rms_norm": lambda s, _: [(None, _th(s), BF16)],
    "silu_and_mul": lambda s, _: [(None, (s.inputs["shape"][0], s.inputs["shape"][1] // 2), BF16)],
    "fused_add_rms_norm": lambda s, _: [("out", _th(s), BF16), ("residual", _th(s), BF16)],
    "fused_qk_rmsnorm": lambda s, _: [
        (
            None,
            (s.inputs["num_tokens"], (s.init["head_num"] + 2 * s.init["kv_head_num"]) * s.init["size_per_head"]),
            F16,
        )
    ],
    "gated_rms_norm": lambda s, _: [(None, (s.inputs["rows"], s.inputs["hidden_size"]), BF16)],
    "l2_norm": lambda s, _: [(None, (s.inputs["num_tokens"], s.inputs["hidden_size"]), BF16)],
    "layer_norm": lambda s, _: [(None, tuple(s.inputs["shape"]), BF16)],
    "fp8_dynamic_per_token_quant": lambda s, _: [(0, _th(s), FN), (1, _th(s)[:1], F32)],
    "per_token_group_quant_fp8": lambda s, _: [
        ("quantized", _th(s), FN),
        ("scales", (s.inputs["token_count"], s.inputs["hidden_size"] // s.init["group_size"]), F32),
    ],
    "fused_rmsnorm_quant": lambda s, _: [(0, _th(s), FN), (1, (s.inputs["token_count"], 1), F32), (2, _th(s), BF16)],
    "linear_sigmoid_mul": lambda s, _: [(None, (s.inputs["token_count"], s.inputs["out_features"]), BF16)],
    "topk_filter": lambda s, _: [(None, (s.inputs["seq_len"], s.inputs["hidden_size"]), F32)],
    "reshape_and_cache": _reshape_and_cache,
    "fused_qkv_rope": _fused_qkv_rope,
    "mrope": _mrope,
    "block_scaled_mm": lambda s, _: [(None, (s.inputs["m"], s.inputs["n"]), F32)],
    "attention_forward": lambda s, _: [
        (None, (sum(s.inputs["seq_lens"]), s.inputs["num_heads"], s.inputs["head_dim"]), BF16)
    ],
    "paged_attention_decode": lambda s, _: [
        (None, (s.inputs["num_seqs"], s.inputs["num_query_heads"], s.inputs["head_size"]), DTYPES[s.inputs["dtype"]])
    ],
    "unified_attention": lambda s, _: [
        (None, (sum(s.inputs["seq_lens"]), s.inputs["num_query_heads"], s.inputs["head_size"]), BF16)
    ],
    "mla_decode_attention": lambda s, _: [
        (None, (s.inputs["batch_size"], s.inputs["nhead"], s.inputs["kv_lora_rank"]), BF16)
    ],
    "moe_sum_reduce": lambda s, _: [(None, _th(s), BF16)],
    "moe_topk_gating_softmax": lambda s, _: [
        ("topk_weights", (s.inputs["token_count"], s.init["top_k"]), F32),
        ("topk_ids", (s.inputs["token_count"], s.init["top_k"]), I32),
    ],
    "moe_count_and_sort": _moe_count_and_sort,
    "moe_align_block_size": _moe_align_block_size,
    "causal_conv1d": lambda s, _: [(None, (s.inputs["dim"], s.inputs["token_count"]), BF16)],
    "gated_delta_rule_update": _gated_delta_rule_update,
    "chunk_delta_rule_output": lambda s, _: [
        (None, (s.inputs["batch_size"], s.inputs["token_count"], s.inputs["num_v_heads"], s.inputs["value_dim"]), BF16)
    ],
    "chunk_gated_delta_rule_state": _chunk_gated_delta_rule_state,
    "fused_moe": lambda s, _: [(None, _th(s), F32)],
    "fp8_blockscale_fused_moe": lambda s, _: [(None, _th(s), FN)],
}


def _shapes_file(op: str) -> dict[str, Any]:
    return json.loads((PROBLEMS / op / "shapes.json").read_text())


@pytest.mark.parametrize("op", OPS)
def test_shapes_file_has_one_trailing_smoke_shape_and_every_shape_binds(op: str) -> None:
    data = _shapes_file(op)
    assert data["op"] == op
    *scored, smoke_entry = data["shapes"]
    assert smoke_entry == {"id": "smoke", "smoke": True, "init": smoke_entry["init"], "inputs": smoke_entry["inputs"]}
    assert all(set(s) == {"id", "init", "inputs"} for s in scored)
    assert "smoke" not in {s["id"] for s in scored}
    assert all(
        s["init"].keys() == smoke_entry["init"].keys() and s["inputs"].keys() == smoke_entry["inputs"].keys()
        for s in scored
    )
    reference, generator = catalog().load_reference(op), catalog().load_make_inputs(op)
    for shape in data["shapes"]:
        inspect.signature(reference).bind(**shape["init"])
        inspect.signature(generator).bind(seed=0, **shape["inputs"])


@pytest.mark.parametrize("op", OPS)
def test_scored_shapes_equal_shared_data(op: str) -> None:
    source = SHARED_SHAPES / f"{op}.json"
    if not source.is_file():
        pytest.skip(f"shared operator data not present at {source}")
    shared = json.loads(source.read_text())["shapes"]
    scored = _shapes_file(op)["shapes"][:-1]
    assert scored == [{"id": str(s["id"]), "init": s["init"], "inputs": s["inputs"]} for s in shared]


@pytest.mark.parametrize("op", OPS)
def test_make_inputs_gives_forward_inputs_seeded_locally(op: str) -> None:
    shape = smoke(op)
    rng_before = torch.random.get_rng_state()
    first, again, other = (make_inputs(op, seed, **shape.inputs) for seed in (11, 11, 12))
    assert torch.equal(rng_before, torch.random.get_rng_state()), "make_inputs touched the global RNG"

    params = inspect.signature(model(op, shape.init).forward).parameters
    # forward's parameters in order; only those with a default may be left out
    assert list(first) == [n for n, p in params.items() if n in first or p.default is inspect.Parameter.empty]
    assert all(t.device.type == "cpu" for t in first.values())
    limit = SMOKE_INPUT_ELEMENTS_OVERRIDE.get(op, SMOKE_INPUT_ELEMENTS)
    assert sum(t.numel() for t in first.values()) <= limit, "smoke shape too large for a quick CPU run"
    assert next(iter(first.values())).shape[0] > 1, "smoke shape should have more than one row"
    for name in first:
        assert same_bits(first[name], again[name]), name
        if name not in SHAPE_DETERMINED_INPUTS.get(op, ()):
            assert not same_bits(first[name], other[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_reference_output_contract_at_smoke_shape(op: str) -> None:
    shape = smoke(op)
    reference = model(op, shape.init)
    assert not list(reference.parameters()) and not list(reference.buffers())
    inputs = make_inputs(op, 11, **shape.inputs)
    pristine = {k: v.clone() for k, v in inputs.items()}
    out = leaves(reference(**inputs))
    for name, tensor in inputs.items():
        assert same_bits(tensor, pristine[name]), f"input {name} was modified"

    expected = OUTPUTS[op](shape, inputs)
    assert [k for k, _ in out] == [k for k, _, _ in expected]
    for (key, tensor), (_, want_shape, want_dtype) in zip(out, expected, strict=True):
        assert tensor.dtype == want_dtype, key
        assert tuple(tensor.shape) == want_shape, key
        values = tensor.float()
        if op in INFINITE_OUTPUTS:
            assert torch.isfinite(values).any() and not values.isnan().any(), key
        else:
            assert torch.isfinite(values).all(), key
        assert all(tensor.data_ptr() != t.data_ptr() for t in inputs.values()), f"output {key} aliases an input"

    again = leaves(reference(**make_inputs(op, 11, **shape.inputs)))
    other = leaves(reference(**make_inputs(op, 12, **shape.inputs)))
    for (key, first), (_, same_seed), (_, other_seed) in zip(out, again, other, strict=True):
        assert same_bits(first, same_seed), key
        assert not same_bits(first, other_seed), key
