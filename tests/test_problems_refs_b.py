"""Problem references, batch B (gating, top-k, KV-cache scatter, rotary embeddings, block-scaled
fp8 GEMM, attention): each reference agrees with an independent float64 loop implementation on
tiny inputs, and the inputs are not degenerate (trivial candidates fail the evaluator's own
comparison). The contract every problem folder keeps is tested in tests/test_problems_contract.py."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import pytest
import torch

from atrex_mcp.evaluate.compare import compare_outputs
from problem_contract import (
    BF16,
    HALF_ULP,
    SLACK,
    assert_one_rounding,
    catalog,
    f64,
    make_inputs,
    model,
    same_bits,
    smoke,
)

# ---------------------------------------------------------------- against float64 loops

FP32_NOISE = 1e-5  # absolute fp32 evaluation error of a softmax-weighted sum / cancellation


def _softmax_attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool = False) -> np.ndarray:
    """One head: q (Lq, D), k (Lk, D), v (Lk, Dv) in float64, row by row."""
    out = np.zeros((q.shape[0], v.shape[1]))
    for j in range(q.shape[0]):
        keys = j + 1 if causal else k.shape[0]
        s = np.array([q[j] @ k[p] * scale for p in range(keys)])
        w = np.exp(s - s.max())
        out[j] = (w / w.sum()) @ v[:keys]
    return out


def _module_of(reference: torch.nn.Module):
    return sys.modules[type(reference).__module__]


def test_linear_sigmoid_mul_matches_float64_formula() -> None:
    inp = make_inputs("linear_sigmoid_mul", 5, token_count=7, hidden_size=96, out_features=40)
    out = model("linear_sigmoid_mul", {})(**inp)
    x, w, b, post = (f64(inp[k]) for k in ("hidden_states", "weight", "bias", "post_mul_mat"))
    gate = f64(torch.from_numpy(x @ w.T + b).to(BF16))  # the gate is rounded to bf16 first
    exact = post / (1.0 + np.exp(-gate))
    # fp32 and float64 GEMM sums may land on opposite sides of a bf16 midpoint of the gate:
    # rare, and then the output moves by at most sigmoid' * one gate ulp * |post|.
    err = np.abs(f64(out) - exact)
    within = err <= HALF_ULP[BF16] * SLACK * np.abs(exact) + FP32_NOISE
    assert within.mean() > 0.99
    assert (
        err[~within]
        <= 0.25 * 2.0**-7 * np.abs(gate[~within]) * np.abs(post[~within]) + 2.0**-8 * np.abs(exact[~within])
    ).all()


def test_topk_filter_matches_sorted_rows_and_keeps_ties() -> None:
    inp = make_inputs("topk_filter", 2, seq_len=4, hidden_size=300)
    out = model("topk_filter", {"top_k": 7})(**inp)
    for row, got in zip(inp["logits"].tolist(), out.tolist(), strict=True):
        tau = sorted(row, reverse=True)[6]
        assert got == [x if x >= tau else -math.inf for x in row]

    ties = torch.tensor([[3.0, 1.0, 2.0, 2.0, 2.0, 0.0]])
    assert model("topk_filter", {"top_k": 2})(logits=ties).tolist() == [[3.0, -math.inf, 2.0, 2.0, 2.0, -math.inf]]
    short = torch.tensor([[0.5, -1.0, 2.0]])
    assert torch.equal(model("topk_filter", {"top_k": 50})(logits=short), short)


def test_reshape_and_cache_matches_slot_loop_and_skips_negative_slots() -> None:
    inp = make_inputs("reshape_and_cache", 8, shape=[21, 2, 8], block_size=4)
    inp["slot_mapping"] = inp["slot_mapping"].clone()
    inp["slot_mapping"][3] = -1
    out = model("reshape_and_cache", {})(**inp)
    for name, src in (("key_cache", "key"), ("value_cache", "value")):
        expected = inp[name].clone()
        for n, slot in enumerate(inp["slot_mapping"].tolist()):
            if slot >= 0:
                expected[slot // 4, slot % 4] = inp[src][n]
        assert same_bits(out[name], expected)
    assert not (out["key_cache"].view(-1, 2, 8) == inp["key"][3]).all(dim=(1, 2)).any()


def test_fused_qkv_rope_matches_float64_rotation() -> None:
    heads, kv_heads, dim = 3, 2, 16
    init = {"num_heads": heads, "num_kv_heads": kv_heads, "head_dim": dim, "rope_dim": dim, "rope_base": 10000.0}
    for dtype, with_bias in (("fp16", False), ("bf16", True)):
        inp = make_inputs(
            "fused_qkv_rope",
            4,
            total_tokens=5,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=dim,
            dtype=dtype,
            with_bias=with_bias,
            max_position=64,
        )
        q, k, v = model("fused_qkv_rope", init)(**inp)
        qkv = inp["qkv"] + inp["qkv_bias"] if with_bias else inp["qkv"]  # the bias add rounds in the input dtype
        rows = f64(qkv).reshape(5, heads + 2 * kv_heads, dim)
        half = dim // 2
        expected = rows.copy()
        for t, pos in enumerate(inp["positions"].tolist()):
            for h in range(heads + kv_heads):
                for i in range(half):
                    theta = pos * 10000.0 ** (-2 * i / dim)
                    x1, x2 = rows[t, h, i], rows[t, h, i + half]
                    expected[t, h, i] = x1 * math.cos(theta) - x2 * math.sin(theta)
                    expected[t, h, i + half] = x2 * math.cos(theta) + x1 * math.sin(theta)
        assert_one_rounding(q, expected[:, :heads], noise=FP32_NOISE)
        assert_one_rounding(k, expected[:, heads : heads + kv_heads], noise=FP32_NOISE)
        assert same_bits(v, qkv[:, (heads + kv_heads) * dim :].reshape(5, kv_heads, dim))


@pytest.mark.parametrize(("interleaved", "neox"), [(False, True), (True, True), (False, False)])
def test_mrope_matches_float64_loops(interleaved: bool, neox: bool) -> None:
    section, hs, rot, tokens = [4, 6, 6], 40, 32, 3
    inp = make_inputs("mrope", 6, token_count=tokens, num_query_heads=2, num_kv_heads=1, head_size=hs, rotary_dim=rot)
    init = {
        "head_size": hs,
        "rotary_dim": rot,
        "mrope_section": section,
        "mrope_interleaved": interleaved,
        "is_neox_style": neox,
    }
    out = model("mrope", init)(**inp)
    cos, sin = f64(inp["cos"]), f64(inp["sin"])

    def axis(f: int) -> int:
        if interleaved:
            return 1 if f % 3 == 1 and f <= 3 * section[1] else 2 if f % 3 == 2 and f <= 3 * section[2] else 0
        return 0 if f < section[0] else 1 if f < section[0] + section[1] else 2

    for name in ("q", "k"):
        x = f64(inp[name]).reshape(tokens, -1, hs)
        expected = x.copy()
        for t in range(tokens):
            for f in range(rot // 2):
                c, s = cos[axis(f), t, f], sin[axis(f), t, f]
                i, j = (f, f + rot // 2) if neox else (2 * f, 2 * f + 1)
                expected[t, :, i] = x[t, :, i] * c - x[t, :, j] * s
                expected[t, :, j] = x[t, :, j] * c + x[t, :, i] * s
        assert_one_rounding(out[name], expected.reshape(tokens, -1), noise=FP32_NOISE)


def test_block_scaled_mm_generator_and_float64_blocks() -> None:
    m, n, k, g = 9, 256, 384, 128
    inp = make_inputs("block_scaled_mm", 7, m=m, n=n, k=k, group_n=g, group_k=g)
    a, b = f64(inp["a"].float()), f64(inp["b"].float())
    a_s, b_s = f64(inp["a_scales"]), f64(inp["b_scales"])
    # The generator maps each activation group's largest magnitude, and each weight tile's
    # signed maximum, exactly onto the e4m3fn maximum.
    assert (np.abs(a.reshape(m, k // g, g)).max(-1) == 448.0).all()
    assert (b.reshape(n // g, g, k // g, g).max(axis=(1, 3)) == 448.0).all()
    assert (a_s > 0).all() and (b_s > 0).all()

    out = model("block_scaled_mm", {"group_n": g, "group_k": g})(**inp)
    expected = np.zeros((m, n))
    for j in range(k // g):
        cols = slice(j * g, (j + 1) * g)
        partial = a[:, cols] @ b[:, cols].T
        expected += partial * a_s[:, j : j + 1] * np.repeat(b_s[:, j], g)[None, :]
    np.testing.assert_allclose(f64(out), expected, rtol=1e-5, atol=1e-4)


def test_attention_forward_matches_float64_per_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    seq_lens, heads, dim = [6, 1, 4], 2, 12
    inp = make_inputs("attention_forward", 9, num_heads=heads, head_dim=dim, seq_lens=seq_lens)
    reference = model("attention_forward", {})
    q, k, v = (f64(inp[n]) for n in ("q", "k", "v"))
    expected = np.zeros_like(q)
    start = 0
    for length in seq_lens:
        rows = slice(start, start + length)
        for h in range(heads):
            expected[rows, h] = _softmax_attend(q[rows, h], k[rows, h], v[rows, h], 1 / math.sqrt(dim))
        start += length
    assert_one_rounding(reference(**inp), expected, noise=FP32_NOISE)
    monkeypatch.setattr(_module_of(reference), "SCORE_BLOCK_ELEMENTS", 2 * heads * 6)  # two query rows per chunk
    assert_one_rounding(reference(**inp), expected, noise=FP32_NOISE)


def _paged_keys_values(inp: dict[str, torch.Tensor], i: int, length: int, block_size: int, x: int):
    """Spec's index formulas, element by element: K[p, h, d], V[p, h, d] of sequence i."""
    kc, vc, table = f64(inp["k_cache"]), f64(inp["v_cache"]), inp["block_tables"].tolist()
    kv_heads, dim = vc.shape[1], vc.shape[2]
    keys, values = np.zeros((length, kv_heads, dim)), np.zeros((length, kv_heads, dim))
    for p in range(length):
        block, o = table[i][p // block_size], p % block_size
        for h in range(kv_heads):
            for d in range(dim):
                keys[p, h, d] = kc[block, h, d // x, o, d % x]
                values[p, h, d] = vc[block, h, d, o]
    return keys, values


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_paged_attention_decode_matches_float64_index_formula(dtype: str) -> None:
    seqs, ctx, heads, kv_heads, dim, bs = 3, 11, 4, 2, 16, 4
    inp = make_inputs(
        "paged_attention_decode",
        10,
        num_seqs=seqs,
        ctx_len=ctx,
        num_query_heads=heads,
        num_kv_heads=kv_heads,
        head_size=dim,
        block_size=bs,
        dtype=dtype,
    )
    inp["seq_lens"] = torch.tensor([ctx, 5, 0], dtype=torch.int32)  # a shorter and an empty sequence
    out = model("paged_attention_decode", {})(**inp)
    q = f64(inp["query"])
    expected = np.zeros_like(q)
    for i, length in enumerate(inp["seq_lens"].tolist()):
        if length <= 0:
            continue
        keys, values = _paged_keys_values(inp, i, length, bs, x=8)
        for hq in range(heads):
            h = hq // (heads // kv_heads)
            expected[i, hq] = _softmax_attend(q[i, hq : hq + 1], keys[:, h], values[:, h], 1 / math.sqrt(dim))[0]
    assert_one_rounding(out, expected, noise=FP32_NOISE)


def test_unified_attention_matches_float64_flat_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    kv_lens, heads, kv_heads, dim, bs = [7, 5, 4], 4, 2, 8, 4
    inp = make_inputs(
        "unified_attention",
        11,
        num_seqs=3,
        seq_lens=kv_lens,
        num_query_heads=heads,
        num_kv_heads=kv_heads,
        head_size=dim,
        block_size=bs,
    )
    # Sequence 0 gets 3 queries against 7 cached keys (the unmasked case); 1 and 2 stay causal.
    q_lens = [3, 5, 4]
    inp["q"] = torch.cat([inp["q"][0:3], inp["q"][7:16]])
    inp["cu_seqlens_q"] = torch.tensor([0, 3, 8, 12], dtype=torch.int32)
    reference = model("unified_attention", {})

    q = f64(inp["q"])
    flat_k = f64(inp["k_cache"]).reshape(-1, kv_heads, dim)
    flat_v = f64(inp["v_cache"]).reshape(-1, kv_heads, dim)
    table = inp["block_table"].tolist()
    expected = np.zeros_like(q)
    start = 0
    for i, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens, strict=True)):
        slots = [table[i][p // bs] * bs + p % bs for p in range(kv_len)]
        for hq in range(heads):
            h = hq // (heads // kv_heads)
            expected[start : start + q_len, hq] = _softmax_attend(
                q[start : start + q_len, hq], flat_k[slots, h], flat_v[slots, h], dim**-0.5, causal=q_len == kv_len
            )
        start += q_len
    assert_one_rounding(reference(**inp), expected, noise=FP32_NOISE)
    monkeypatch.setattr(_module_of(reference), "SCORE_BLOCK_ELEMENTS", 2 * heads * 7)  # two query rows per chunk
    assert_one_rounding(reference(**inp), expected, noise=FP32_NOISE)


def test_mla_decode_attention_matches_float64_per_head() -> None:
    batch, ctx, heads, latent, rope = 2, 5, 3, 16, 8
    inp = make_inputs(
        "mla_decode_attention",
        12,
        batch_size=batch,
        ctx_len=ctx,
        nhead=heads,
        kv_lora_rank=latent,
        qk_rope_head_dim=rope,
    )
    out = model("mla_decode_attention", {"nhead": heads, "kv_lora_rank": latent, "qk_rope_head_dim": rope})(**inp)
    q, cache_rows = f64(inp["q"]), f64(inp["kv_cache"])[:, 0]
    expected = np.zeros((batch, heads, latent))
    for i in range(batch):
        rows = cache_rows[i * ctx : (i + 1) * ctx]
        for h in range(heads):
            expected[i, h] = _softmax_attend(q[i, h : h + 1], rows, rows[:, :latent], 1 / math.sqrt(latent + rope))[0]
    assert_one_rounding(out, expected, noise=FP32_NOISE)


# ---------------------------------------------------------------- non-degenerate inputs


def _fails_judge(op: str, reference: Any, candidate: Any) -> bool:
    return not compare_outputs(reference, candidate, op).ok


def test_fused_qkv_rope_identity_fails_on_every_scored_shape() -> None:
    for shape in catalog().visible("fused_qkv_rope").scored_shapes:
        reference = model("fused_qkv_rope", shape.init)
        for seed in range(3):
            inp = make_inputs("fused_qkv_rope", seed, **shape.inputs)
            q, k, v = reference(**inp)
            assert (inp["positions"] > 0).all()
            flat = inp["qkv"]
            identity = (
                flat[:, : q.shape[1] * q.shape[2]].reshape(q.shape),
                flat[:, q.shape[1] * q.shape[2] : q.shape[1] * q.shape[2] + k[0].numel()].reshape(k.shape),
                v,
            )
            assert _fails_judge("fused_qkv_rope", (q, k, v), identity), shape.id


def test_mrope_identity_fails() -> None:
    shape = smoke("mrope")
    inp = make_inputs("mrope", 0, **shape.inputs)
    out = model("mrope", shape.init)(**inp)
    assert _fails_judge("mrope", out, {"q": inp["q"], "k": inp["k"]})


def test_linear_sigmoid_mul_needs_gate_and_bias() -> None:
    shape = smoke("linear_sigmoid_mul")
    inp = make_inputs("linear_sigmoid_mul", 0, **shape.inputs)
    reference = model("linear_sigmoid_mul", {})
    out = reference(**inp)
    half_post = (0.5 * inp["post_mul_mat"].float()).to(BF16)
    no_bias = reference(**{**inp, "bias": torch.zeros_like(inp["bias"])})
    assert _fails_judge("linear_sigmoid_mul", out, half_post)
    assert _fails_judge("linear_sigmoid_mul", out, no_bias)


def test_reshape_and_cache_keeps_untouched_slots() -> None:
    shape = smoke("reshape_and_cache")
    inp = make_inputs("reshape_and_cache", 0, **shape.inputs)
    reference = model("reshape_and_cache", {})
    out = reference(**inp)
    fresh = reference(
        **{**inp, "key_cache": torch.zeros_like(inp["key_cache"]), "value_cache": torch.zeros_like(inp["value_cache"])}
    )
    assert _fails_judge("reshape_and_cache", out, fresh)
    assert not torch.equal(inp["slot_mapping"], torch.arange(len(inp["slot_mapping"])))


@pytest.mark.parametrize(
    ("op", "table"), [("paged_attention_decode", "block_tables"), ("unified_attention", "block_table")]
)
def test_block_tables_are_shuffled_distinct_and_matter(op: str, table: str) -> None:
    shape = smoke(op)
    inp = make_inputs(op, 0, **shape.inputs)
    reference = model(op, shape.init)
    bs = shape.inputs["block_size"]
    lens = (
        [shape.inputs["ctx_len"]] * shape.inputs["num_seqs"]
        if op == "paged_attention_decode"
        else shape.inputs["seq_lens"]
    )
    used = [row[: math.ceil(n / bs)] for row, n in zip(inp[table].tolist(), lens, strict=True)]
    referenced = [b for row in used for b in row]
    num_blocks = inp["k_cache"].shape[0]
    assert len(set(referenced)) == len(referenced) and all(0 <= b < num_blocks for b in referenced)

    sequential = torch.zeros_like(inp[table])
    start = 0
    for i, row in enumerate(used):
        sequential[i, : len(row)] = torch.arange(start, start + len(row))
        start += len(row)
    assert not torch.equal(inp[table], sequential)
    assert _fails_judge(op, reference(**inp), reference(**{**inp, table: sequential}))
