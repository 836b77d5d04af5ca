"""Problem references, batch B (gating, top-k, KV-cache scatter, rotary embeddings, block-scaled
fp8 GEMM, attention): each reference at its smoke shape keeps the SPEC's output contract, is
deterministic, leaves its inputs alone and agrees with an independent float64 loop
implementation on tiny inputs; the scored shapes equal the shared source data; and the inputs
are not degenerate (trivial candidates fail the evaluator's own comparison)."""

from __future__ import annotations

import inspect
import json
import math
import sys
from functools import cache
from typing import Any, Callable

import numpy as np
import pytest
import torch

from atrex_mcp.catalog import Catalog, Shape
from atrex_mcp.evaluate.compare import compare_outputs
from atrex_mcp.paths import REPO_ROOT

PROBLEMS = REPO_ROOT / "problems"
SHARED_SHAPES = REPO_ROOT.parent / "shared" / "atrex-ops" / "shapes"

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
DTYPES = {"bf16": BF16, "fp16": F16}

# op -> (container, fn(shape) -> [(key or tuple index or None, output shape, dtype)])
Outputs = Callable[[Shape], list[tuple[Any, tuple[int, ...], torch.dtype]]]


def _reshape_and_cache_out(s: Shape) -> list[tuple[Any, tuple[int, ...], torch.dtype]]:
    n, heads, dim = s.inputs["shape"]
    bs = s.inputs["block_size"]
    cache_shape = (math.ceil(n / bs), bs, heads, dim)
    return [("key_cache", cache_shape, BF16), ("value_cache", cache_shape, BF16)]


def _qkv_rope_out(s: Shape) -> list[tuple[Any, tuple[int, ...], torch.dtype]]:
    i, dtype = s.inputs, DTYPES[s.inputs["dtype"]]
    t, d = i["total_tokens"], i["head_dim"]
    return [(0, (t, i["num_heads"], d), dtype), (1, (t, i["num_kv_heads"], d), dtype), (2, (t, i["num_kv_heads"], d), dtype)]


def _mrope_out(s: Shape) -> list[tuple[Any, tuple[int, ...], torch.dtype]]:
    i = s.inputs
    return [("q", (i["token_count"], i["num_query_heads"] * i["head_size"]), BF16),
            ("k", (i["token_count"], i["num_kv_heads"] * i["head_size"]), BF16)]


CONTRACTS: dict[str, tuple[str, Outputs]] = {
    "linear_sigmoid_mul": ("tensor", lambda s: [(None, (s.inputs["token_count"], s.inputs["out_features"]), BF16)]),
    "topk_filter": ("tensor", lambda s: [(None, (s.inputs["seq_len"], s.inputs["hidden_size"]), F32)]),
    "reshape_and_cache": ("dict", _reshape_and_cache_out),
    "fused_qkv_rope": ("tuple", _qkv_rope_out),
    "mrope": ("dict", _mrope_out),
    "block_scaled_mm": ("tensor", lambda s: [(None, (s.inputs["m"], s.inputs["n"]), F32)]),
    "attention_forward": (
        "tensor",
        lambda s: [(None, (sum(s.inputs["seq_lens"]), s.inputs["num_heads"], s.inputs["head_dim"]), BF16)],
    ),
    "paged_attention_decode": (
        "tensor",
        lambda s: [(None, (s.inputs["num_seqs"], s.inputs["num_query_heads"], s.inputs["head_size"]),
                    DTYPES[s.inputs["dtype"]])],
    ),
    "unified_attention": (
        "tensor",
        lambda s: [(None, (sum(s.inputs["seq_lens"]), s.inputs["num_query_heads"], s.inputs["head_size"]), BF16)],
    ),
    "mla_decode_attention": (
        "tensor",
        lambda s: [(None, (s.inputs["batch_size"], s.inputs["nhead"], s.inputs["kv_lora_rank"]), BF16)],
    ),
}
OPS = list(CONTRACTS)


@cache
def _catalog() -> Catalog:
    return Catalog(PROBLEMS)


def _model(op: str, init: dict[str, Any]) -> torch.nn.Module:
    return _catalog().load_reference(op)(**init)


def _inputs(op: str, seed: int, **shape_inputs: Any) -> dict[str, torch.Tensor]:
    return _catalog().load_make_inputs(op)(seed=seed, **shape_inputs)


def _smoke(op: str) -> Shape:
    return _catalog().visible(op).smoke_shape


def _entries(out: Any, container: str) -> list[tuple[Any, torch.Tensor]]:
    if container == "tensor":
        assert isinstance(out, torch.Tensor)
        return [(None, out)]
    if container == "tuple":
        assert isinstance(out, tuple)
        return list(enumerate(out))
    assert isinstance(out, dict)
    return list(out.items())


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor, so that fp8 tensors and -0/NaN compare bit-for-bit."""
    return t.detach().contiguous().view(-1).view(torch.uint8)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


# ---------------------------------------------------------------- shapes.json


@pytest.mark.parametrize("op", OPS)
def test_scored_shapes_equal_shared_data(op: str) -> None:
    shared_file = SHARED_SHAPES / f"{op}.json"
    if not shared_file.is_file():
        pytest.skip(f"shared operator data not present at {SHARED_SHAPES}")
    shared = json.loads(shared_file.read_text())["shapes"]
    scored = [s for s in json.loads((PROBLEMS / op / "shapes.json").read_text())["shapes"] if not s.get("smoke")]
    assert [s["id"] for s in scored] == [str(s["id"]) for s in shared]
    for mine, theirs in zip(scored, shared, strict=True):
        assert mine == {"id": str(theirs["id"]), "init": theirs["init"], "inputs": theirs["inputs"]}


@pytest.mark.parametrize("op", OPS)
def test_shapes_file_has_one_trailing_smoke_shape_of_the_same_form(op: str) -> None:
    data = json.loads((PROBLEMS / op / "shapes.json").read_text())
    assert data["op"] == op
    *scored, smoke = data["shapes"]
    assert smoke == {"id": "smoke", "smoke": True, "init": smoke["init"], "inputs": smoke["inputs"]}
    assert not any(s.get("smoke") for s in scored)
    assert all(s["init"].keys() == smoke["init"].keys() and s["inputs"].keys() == smoke["inputs"].keys() for s in scored)


# ---------------------------------------------------------------- generator and contract


@pytest.mark.parametrize("op", OPS)
def test_input_keys_are_forward_parameters(op: str) -> None:
    shape = _smoke(op)
    params = inspect.signature(_model(op, shape.init).forward).parameters
    required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
    keys = set(_inputs(op, 0, **shape.inputs))
    assert required <= keys <= set(params)


@pytest.mark.parametrize("op", OPS)
def test_inputs_are_seeded_locally(op: str) -> None:
    shape = _smoke(op)
    rng_before = torch.random.get_rng_state()
    first, again, other = (_inputs(op, seed, **shape.inputs) for seed in (11, 11, 12))
    assert torch.equal(rng_before, torch.random.get_rng_state()), "make_inputs touched the global RNG"
    for name in first:
        assert _same_bits(first[name], again[name]), name
        if first[name].dtype.is_floating_point:
            assert not _same_bits(first[name], other[name]), name


@pytest.mark.parametrize("op", OPS)
def test_reference_output_contract_at_smoke_shape(op: str) -> None:
    shape = _smoke(op)
    container, expected = CONTRACTS[op]
    model = _model(op, shape.init)
    assert not list(model.parameters()) and not list(model.buffers())
    inputs = _inputs(op, 3, **shape.inputs)
    pristine = {k: v.clone() for k, v in inputs.items()}
    out = model(**inputs)
    for name, tensor in inputs.items():
        assert _same_bits(tensor, pristine[name]), f"input {name} was modified"

    entries = _entries(out, container)
    assert [k for k, _ in entries] == [k for k, _, _ in expected(shape)]
    for (key, tensor), (_, want_shape, want_dtype) in zip(entries, expected(shape), strict=True):
        assert tensor.dtype == want_dtype, key
        assert tuple(tensor.shape) == want_shape, key
        assert torch.isfinite(tensor.float()).any(), key
        if op != "topk_filter":  # the only op whose outputs are -inf by design
            assert torch.isfinite(tensor.float()).all(), key
        assert all(tensor.data_ptr() != t.data_ptr() for t in inputs.values()), f"output {key} aliases an input"

    again = _entries(model(**_inputs(op, 3, **shape.inputs)), container)
    other = _entries(model(**_inputs(op, 4, **shape.inputs)), container)
    assert all(_same_bits(a, b) for (_, a), (_, b) in zip(entries, again, strict=True))
    assert not _same_bits(entries[0][1], other[0][1])


# ---------------------------------------------------------------- independent math

HALF_ULP = {BF16: 2.0**-8, F16: 2.0**-11}  # relative bound of one correct rounding
SLACK = 1.0 + 1e-3  # fp32 evaluation error may push a value just past a midpoint
FP32_NOISE = 1e-5  # absolute fp32 evaluation error of a softmax-weighted sum / cancellation


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.double().numpy()


def _assert_one_rounding(actual: torch.Tensor, exact: np.ndarray) -> None:
    """`actual` (bf16/fp16) is the float64 `exact` rounded once, up to fp32 evaluation noise."""
    err = np.abs(_f64(actual) - exact)
    bound = HALF_ULP[actual.dtype] * SLACK * np.abs(exact) + FP32_NOISE
    assert (err <= bound).all(), f"max error {err.max():.3g}, worst excess {(err - bound).max():.3g}"


def _softmax_attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool = False) -> np.ndarray:
    """One head: q (Lq, D), k (Lk, D), v (Lk, Dv) in float64, row by row."""
    out = np.zeros((q.shape[0], v.shape[1]))
    for j in range(q.shape[0]):
        keys = j + 1 if causal else k.shape[0]
        s = np.array([q[j] @ k[p] * scale for p in range(keys)])
        w = np.exp(s - s.max())
        out[j] = (w / w.sum()) @ v[:keys]
    return out


def _module_of(model: torch.nn.Module):
    return sys.modules[type(model).__module__]


def test_linear_sigmoid_mul_matches_float64_formula() -> None:
    inp = _inputs("linear_sigmoid_mul", 5, token_count=7, hidden_size=96, out_features=40)
    out = _model("linear_sigmoid_mul", {})(**inp)
    x, w, b, post = (_f64(inp[k]) for k in ("hidden_states", "weight", "bias", "post_mul_mat"))
    gate = _f64(torch.from_numpy(x @ w.T + b).to(BF16))  # the gate is rounded to bf16 first
    exact = post / (1.0 + np.exp(-gate))
    # fp32 and float64 GEMM sums may land on opposite sides of a bf16 midpoint of the gate:
    # rare, and then the output moves by at most sigmoid' * one gate ulp * |post|.
    err = np.abs(_f64(out) - exact)
    within = err <= HALF_ULP[BF16] * SLACK * np.abs(exact) + FP32_NOISE
    assert within.mean() > 0.99
    assert (err[~within] <= 0.25 * 2.0**-7 * np.abs(gate[~within]) * np.abs(post[~within]) + 2.0**-8 * np.abs(exact[~within])).all()


def test_topk_filter_matches_sorted_rows_and_keeps_ties() -> None:
    inp = _inputs("topk_filter", 2, seq_len=4, hidden_size=300)
    out = _model("topk_filter", {"top_k": 7})(**inp)
    for row, got in zip(inp["logits"].tolist(), out.tolist(), strict=True):
        tau = sorted(row, reverse=True)[6]
        assert got == [x if x >= tau else -math.inf for x in row]

    ties = torch.tensor([[3.0, 1.0, 2.0, 2.0, 2.0, 0.0]])
    assert _model("topk_filter", {"top_k": 2})(logits=ties).tolist() == [[3.0, -math.inf, 2.0, 2.0, 2.0, -math.inf]]
    short = torch.tensor([[0.5, -1.0, 2.0]])
    assert torch.equal(_model("topk_filter", {"top_k": 50})(logits=short), short)


def test_reshape_and_cache_matches_slot_loop_and_skips_negative_slots() -> None:
    inp = _inputs("reshape_and_cache", 8, shape=[21, 2, 8], block_size=4)
    inp["slot_mapping"] = inp["slot_mapping"].clone()
    inp["slot_mapping"][3] = -1
    out = _model("reshape_and_cache", {})(**inp)
    for name, src in (("key_cache", "key"), ("value_cache", "value")):
        expected = inp[name].clone()
        for n, slot in enumerate(inp["slot_mapping"].tolist()):
            if slot >= 0:
                expected[slot // 4, slot % 4] = inp[src][n]
        assert _same_bits(out[name], expected)
    assert not (out["key_cache"].view(-1, 2, 8) == inp["key"][3]).all(dim=(1, 2)).any()


def test_fused_qkv_rope_matches_float64_rotation() -> None:
    heads, kv_heads, dim = 3, 2, 16
    init = {"num_heads": heads, "num_kv_heads": kv_heads, "head_dim": dim, "rope_dim": dim, "rope_base": 10000.0}
    for dtype, with_bias in (("fp16", False), ("bf16", True)):
        inp = _inputs("fused_qkv_rope", 4, total_tokens=5, num_heads=heads, num_kv_heads=kv_heads, head_dim=dim,
                      dtype=dtype, with_bias=with_bias, max_position=64)
        q, k, v = _model("fused_qkv_rope", init)(**inp)
        qkv = inp["qkv"] + inp["qkv_bias"] if with_bias else inp["qkv"]  # the bias add rounds in the input dtype
        rows = _f64(qkv).reshape(5, heads + 2 * kv_heads, dim)
        half = dim // 2
        expected = rows.copy()
        for t, pos in enumerate(inp["positions"].tolist()):
            for h in range(heads + kv_heads):
                for i in range(half):
                    theta = pos * 10000.0 ** (-2 * i / dim)
                    x1, x2 = rows[t, h, i], rows[t, h, i + half]
                    expected[t, h, i] = x1 * math.cos(theta) - x2 * math.sin(theta)
                    expected[t, h, i + half] = x2 * math.cos(theta) + x1 * math.sin(theta)
        _assert_one_rounding(q, expected[:, :heads])
        _assert_one_rounding(k, expected[:, heads:heads + kv_heads])
        assert _same_bits(v, qkv[:, (heads + kv_heads) * dim:].reshape(5, kv_heads, dim))


@pytest.mark.parametrize(("interleaved", "neox"), [(False, True), (True, True), (False, False)])
def test_mrope_matches_float64_loops(interleaved: bool, neox: bool) -> None:
    section, hs, rot, tokens = [4, 6, 6], 40, 32, 3
    inp = _inputs("mrope", 6, token_count=tokens, num_query_heads=2, num_kv_heads=1, head_size=hs, rotary_dim=rot)
    init = {"head_size": hs, "rotary_dim": rot, "mrope_section": section, "mrope_interleaved": interleaved,
            "is_neox_style": neox}
    out = _model("mrope", init)(**inp)
    cos, sin = _f64(inp["cos"]), _f64(inp["sin"])

    def axis(f: int) -> int:
        if interleaved:
            return 1 if f % 3 == 1 and f <= 3 * section[1] else 2 if f % 3 == 2 and f <= 3 * section[2] else 0
        return 0 if f < section[0] else 1 if f < section[0] + section[1] else 2

    for name in ("q", "k"):
        x = _f64(inp[name]).reshape(tokens, -1, hs)
        expected = x.copy()
        for t in range(tokens):
            for f in range(rot // 2):
                c, s = cos[axis(f), t, f], sin[axis(f), t, f]
                i, j = (f, f + rot // 2) if neox else (2 * f, 2 * f + 1)
                expected[t, :, i] = x[t, :, i] * c - x[t, :, j] * s
                expected[t, :, j] = x[t, :, j] * c + x[t, :, i] * s
        _assert_one_rounding(out[name], expected.reshape(tokens, -1))


def test_block_scaled_mm_generator_and_float64_blocks() -> None:
    m, n, k, g = 9, 256, 384, 128
    inp = _inputs("block_scaled_mm", 7, m=m, n=n, k=k, group_n=g, group_k=g)
    a, b = _f64(inp["a"].float()), _f64(inp["b"].float())
    a_s, b_s = _f64(inp["a_scales"]), _f64(inp["b_scales"])
    # The generator maps each activation group's largest magnitude, and each weight tile's
    # signed maximum, exactly onto the e4m3fn maximum.
    assert (np.abs(a.reshape(m, k // g, g)).max(-1) == 448.0).all()
    assert (b.reshape(n // g, g, k // g, g).max(axis=(1, 3)) == 448.0).all()
    assert (a_s > 0).all() and (b_s > 0).all()

    out = _model("block_scaled_mm", {"group_n": g, "group_k": g})(**inp)
    expected = np.zeros((m, n))
    for j in range(k // g):
        cols = slice(j * g, (j + 1) * g)
        partial = a[:, cols] @ b[:, cols].T
        expected += partial * a_s[:, j:j + 1] * np.repeat(b_s[:, j], g)[None, :]
    np.testing.assert_allclose(_f64(out), expected, rtol=1e-5, atol=1e-4)


def test_attention_forward_matches_float64_per_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    seq_lens, heads, dim = [6, 1, 4], 2, 12
    inp = _inputs("attention_forward", 9, num_heads=heads, head_dim=dim, seq_lens=seq_lens)
    model = _model("attention_forward", {})
    q, k, v = (_f64(inp[n]) for n in ("q", "k", "v"))
    expected = np.zeros_like(q)
    start = 0
    for length in seq_lens:
        rows = slice(start, start + length)
        for h in range(heads):
            expected[rows, h] = _softmax_attend(q[rows, h], k[rows, h], v[rows, h], 1 / math.sqrt(dim))
        start += length
    _assert_one_rounding(model(**inp), expected)
    monkeypatch.setattr(_module_of(model), "SCORE_BLOCK_ELEMENTS", 2 * heads * 6)  # two query rows per chunk
    _assert_one_rounding(model(**inp), expected)


def _paged_keys_values(inp: dict[str, torch.Tensor], i: int, length: int, block_size: int, x: int):
    """Spec's index formulas, element by element: K[p, h, d], V[p, h, d] of sequence i."""
    kc, vc, table = _f64(inp["k_cache"]), _f64(inp["v_cache"]), inp["block_tables"].tolist()
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
    inp = _inputs("paged_attention_decode", 10, num_seqs=seqs, ctx_len=ctx, num_query_heads=heads,
                  num_kv_heads=kv_heads, head_size=dim, block_size=bs, dtype=dtype)
    inp["seq_lens"] = torch.tensor([ctx, 5, 0], dtype=torch.int32)  # a shorter and an empty sequence
    out = _model("paged_attention_decode", {})(**inp)
    q = _f64(inp["query"])
    expected = np.zeros_like(q)
    for i, length in enumerate(inp["seq_lens"].tolist()):
        if length <= 0:
            continue
        keys, values = _paged_keys_values(inp, i, length, bs, x=8)
        for hq in range(heads):
            h = hq // (heads // kv_heads)
            expected[i, hq] = _softmax_attend(q[i, hq:hq + 1], keys[:, h], values[:, h], 1 / math.sqrt(dim))[0]
    _assert_one_rounding(out, expected)


def test_unified_attention_matches_float64_flat_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    kv_lens, heads, kv_heads, dim, bs = [7, 5, 4], 4, 2, 8, 4
    inp = _inputs("unified_attention", 11, num_seqs=3, seq_lens=kv_lens, num_query_heads=heads,
                  num_kv_heads=kv_heads, head_size=dim, block_size=bs)
    # Sequence 0 gets 3 queries against 7 cached keys (the unmasked case); 1 and 2 stay causal.
    q_lens = [3, 5, 4]
    inp["q"] = torch.cat([inp["q"][0:3], inp["q"][7:16]])
    inp["cu_seqlens_q"] = torch.tensor([0, 3, 8, 12], dtype=torch.int32)
    model = _model("unified_attention", {})

    q = _f64(inp["q"])
    flat_k = _f64(inp["k_cache"]).reshape(-1, kv_heads, dim)
    flat_v = _f64(inp["v_cache"]).reshape(-1, kv_heads, dim)
    table = inp["block_table"].tolist()
    expected = np.zeros_like(q)
    start = 0
    for i, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens, strict=True)):
        slots = [table[i][p // bs] * bs + p % bs for p in range(kv_len)]
        for hq in range(heads):
            h = hq // (heads // kv_heads)
            expected[start:start + q_len, hq] = _softmax_attend(
                q[start:start + q_len, hq], flat_k[slots, h], flat_v[slots, h], dim**-0.5, causal=q_len == kv_len)
        start += q_len
    _assert_one_rounding(model(**inp), expected)
    monkeypatch.setattr(_module_of(model), "SCORE_BLOCK_ELEMENTS", 2 * heads * 7)  # two query rows per chunk
    _assert_one_rounding(model(**inp), expected)


def test_mla_decode_attention_matches_float64_per_head() -> None:
    batch, ctx, heads, latent, rope = 2, 5, 3, 16, 8
    inp = _inputs("mla_decode_attention", 12, batch_size=batch, ctx_len=ctx, nhead=heads,
                  kv_lora_rank=latent, qk_rope_head_dim=rope)
    out = _model("mla_decode_attention", {"nhead": heads, "kv_lora_rank": latent, "qk_rope_head_dim": rope})(**inp)
    q, cache_rows = _f64(inp["q"]), _f64(inp["kv_cache"])[:, 0]
    expected = np.zeros((batch, heads, latent))
    for i in range(batch):
        rows = cache_rows[i * ctx:(i + 1) * ctx]
        for h in range(heads):
            expected[i, h] = _softmax_attend(q[i, h:h + 1], rows, rows[:, :latent], 1 / math.sqrt(latent + rope))[0]
    _assert_one_rounding(out, expected)


# ---------------------------------------------------------------- non-degenerate inputs


def _fails_judge(op: str, reference: Any, candidate: Any) -> bool:
    return not compare_outputs(reference, candidate, op).ok


def test_fused_qkv_rope_identity_fails_on_every_scored_shape() -> None:
    for shape in _catalog().visible("fused_qkv_rope").scored_shapes:
        model = _model("fused_qkv_rope", shape.init)
        for seed in range(3):
            inp = _inputs("fused_qkv_rope", seed, **shape.inputs)
            q, k, v = model(**inp)
            assert (inp["positions"] > 0).all()
            flat = inp["qkv"]
            identity = (flat[:, :q.shape[1] * q.shape[2]].reshape(q.shape),
                        flat[:, q.shape[1] * q.shape[2]:q.shape[1] * q.shape[2] + k[0].numel()].reshape(k.shape), v)
            assert _fails_judge("fused_qkv_rope", (q, k, v), identity), shape.id


def test_mrope_identity_fails() -> None:
    shape = _smoke("mrope")
    inp = _inputs("mrope", 0, **shape.inputs)
    out = _model("mrope", shape.init)(**inp)
    assert _fails_judge("mrope", out, {"q": inp["q"], "k": inp["k"]})


def test_linear_sigmoid_mul_needs_gate_and_bias() -> None:
    shape = _smoke("linear_sigmoid_mul")
    inp = _inputs("linear_sigmoid_mul", 0, **shape.inputs)
    model = _model("linear_sigmoid_mul", {})
    out = model(**inp)
    half_post = (0.5 * inp["post_mul_mat"].float()).to(BF16)
    no_bias = model(**{**inp, "bias": torch.zeros_like(inp["bias"])})
    assert _fails_judge("linear_sigmoid_mul", out, half_post)
    assert _fails_judge("linear_sigmoid_mul", out, no_bias)


def test_reshape_and_cache_keeps_untouched_slots() -> None:
    shape = _smoke("reshape_and_cache")
    inp = _inputs("reshape_and_cache", 0, **shape.inputs)
    model = _model("reshape_and_cache", {})
    out = model(**inp)
    fresh = model(**{**inp, "key_cache": torch.zeros_like(inp["key_cache"]),
                     "value_cache": torch.zeros_like(inp["value_cache"])})
    assert _fails_judge("reshape_and_cache", out, fresh)
    assert not torch.equal(inp["slot_mapping"], torch.arange(len(inp["slot_mapping"])))


@pytest.mark.parametrize(("op", "table"), [("paged_attention_decode", "block_tables"), ("unified_attention", "block_table")])
def test_block_tables_are_shuffled_distinct_and_matter(op: str, table: str) -> None:
    shape = _smoke(op)
    inp = _inputs(op, 0, **shape.inputs)
    model = _model(op, shape.init)
    bs = shape.inputs["block_size"]
    lens = [shape.inputs["ctx_len"]] * shape.inputs["num_seqs"] if op == "paged_attention_decode" else shape.inputs["seq_lens"]
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
    assert _fails_judge(op, model(**inp), model(**{**inp, table: sequential}))
