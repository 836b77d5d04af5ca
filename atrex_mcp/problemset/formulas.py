"""Closed-form work (W) and traffic (Q) of the 30 shipped operators, from SPEC §3.

One function per operator, registered under its name, taking the shape's `init` and `inputs`
dicts. W is filed under the operator's SPEC dtype label. Q follows the convention of
docs/roofline.md: the bytes of every input and output tensor (SPEC §0.5), except input data that
cannot influence any output for the shape's generated index data (KV-cache blocks no live token
maps to, cache slots that are overwritten, weights of experts no token is routed to). Where that
differs from the figure SPEC §3 states, `spec_figure()` gives SPEC's figure for comparison.

Data-dependent counts (MoE routing) use their expectation under the shape's input generator,
rounded to an integer; each such function also accepts the actual count as a keyword, so a
count taken from a generated input can be checked exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from atrex_mcp.errors import unknown_choice
from atrex_mcp.problemset.hardware import DtypePath
from atrex_mcp.problemset.roofline import Workload

Params = dict[str, Any]
Formula = Callable[[Params, Params], Workload]

FORMULAS: dict[str, Formula] = {}
SPEC_FIGURES: dict[str, Callable[[str, Params, Params], Workload]] = {}
NOTES: dict[str, str] = {}


def formula(op: str, note: str = "") -> Callable[[Formula], Formula]:
    def register(fn: Formula) -> Formula:
        FORMULAS[op] = fn
        if note:
            NOTES[op] = note
        return fn

    return register


def _work(label: DtypePath, w: int | float, q_read: int | float, q_write: int | float) -> Workload:
    return Workload(flops={label: int(w)}, bytes_read=int(q_read), bytes_written=int(q_write))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def expected_distinct(categories: int, draws: int) -> float:
    """Expected number of categories hit by `draws` independent uniform draws."""
    return categories * (1.0 - (1.0 - 1.0 / categories) ** draws)


def expected_blocks(draws: int, categories: int, block: int) -> float:
    """E[sum_e ceil(c_e / block)] for c_e ~ Binomial(draws, 1/categories), summed in log space."""
    p = 1.0 / categories
    log_p, log_q = math.log(p), math.log1p(-p)
    per_category = 0.0
    for c in range(1, draws + 1):
        log_pmf = (
            math.lgamma(draws + 1) - math.lgamma(c + 1) - math.lgamma(draws - c + 1) + c * log_p + (draws - c) * log_q
        )
        if log_pmf < -745.0 and c > draws * p:  # past the mode and below the smallest double
            break
        per_category += math.exp(log_pmf) * _ceil_div(c, block)
    return categories * per_category


# --- attention -------------------------------------------------------------------------------


@formula("attention_forward")
def attention_forward(init: Params, x: Params) -> Workload:
    h, d, lens = x["num_heads"], x["head_dim"], x["seq_lens"]
    t, n = sum(lens), len(lens)
    return _work("bf16", 4 * h * d * sum(L * L for L in lens), 2 * 3 * t * h * d + 4 * 2 * (n + 1), 2 * t * h * d)


@formula(
    "unified_attention",
    "Q counts KV-cache bytes of live tokens only and the block table without its 2 spare columns "
    "(as SPEC §3.30 states): the 64 spare blocks and the spare columns are never read.",
)
def unified_attention(init: Params, x: Params) -> Workload:
    lens, hq, hkv, d, bs = x["seq_lens"], x["num_query_heads"], x["num_kv_heads"], x["head_size"], x["block_size"]
    n, s = sum(lens), len(lens)
    w = 4 * hq * d * sum(L * (L + 1) // 2 for L in lens)
    q_read = 2 * n * hq * d + 2 * 2 * n * hkv * d + 4 * (s + 1) + 4 * s + 4 * s * _ceil_div(max(lens), bs)
    return _work("bf16", w, q_read, 2 * n * hq * d)


def _paged_dims(x: Params) -> tuple[int, int, int, int, int, int, int, DtypePath]:
    label: DtypePath = "fp16" if x["dtype"] == "fp16" else "bf16"
    s, ctx, bs = x["num_seqs"], x["ctx_len"], x["block_size"]
    return s, ctx, x["num_query_heads"], x["num_kv_heads"], x["head_size"], bs, _ceil_div(ctx, bs), label


@formula(
    "paged_attention_decode",
    "Q counts KV-cache bytes of the live context only; SPEC §3.24 counts the whole cache "
    "(MB*S + 16 blocks), whose 16 spare blocks are never referenced.",
)
def paged_attention_decode(init: Params, x: Params) -> Workload:
    s, ctx, hq, hkv, d, _bs, mb, label = _paged_dims(x)
    q_read = 2 * s * hq * d + 2 * 2 * s * ctx * hkv * d + 4 * s * mb + 4 * s
    return _work(label, 4 * s * hq * ctx * d + 2 * s * ctx, q_read, 2 * s * hq * d)


def _paged_attention_spec(shape_id: str, init: Params, x: Params) -> Workload:
    s, ctx, hq, hkv, d, bs, mb, label = _paged_dims(x)
    nb = mb * s + 16
    q_read = 2 * s * hq * d + 2 * 2 * nb * hkv * d * bs + 4 * s * mb + 4 * s
    return _work(label, 4 * s * hq * ctx * d + 2 * s * ctx, q_read, 2 * s * hq * d)


SPEC_FIGURES["paged_attention_decode"] = _paged_attention_spec


@formula("mla_decode_attention")
def mla_decode_attention(init: Params, x: Params) -> Workload:
    b, ctx, hn, lr, rr = x["batch_size"], x["ctx_len"], x["nhead"], x["kv_lora_rank"], x["qk_rope_head_dim"]
    w = b * hn * (lr + rr) + 3 * b * hn * ctx * (lr + rr) + 2 * b * hn * ctx * lr
    return _work("bf16", w, 2 * b * hn * (lr + rr) + 2 * b * ctx * (lr + rr) + 4 * b, 2 * b * hn * lr)


# --- GEMM and MoE ---------------------------------------------------------------------------


@formula("block_scaled_mm")
def block_scaled_mm(init: Params, x: Params) -> Workload:
    m, n, k, gn, gk = x["m"], x["n"], x["k"], x["group_n"], x["group_k"]
    nkb = _ceil_div(k, gk)
    w = 2 * m * n * k + 3 * nkb * m * n - m * n
    return _work("fp8_e4m3", w, m * k + n * k + 4 * m * nkb + 4 * _ceil_div(n, gn) * nkb, 4 * m * n)


@formula("linear_sigmoid_mul")
def linear_sigmoid_mul(init: Params, x: Params) -> Workload:
    t, h, o = x["token_count"], x["hidden_size"], x["out_features"]
    return _work("bf16", 2 * t * h * o + t * o, 2 * t * h + 2 * o * h + 2 * o + 2 * t * o, 2 * t * o)


@formula(
    "fused_moe",
    "Routing ids are i.i.d. uniform, so the active experts A and the distinct (token, expert) pairs P "
    "are data dependent: their expectations are used, rounded. Q counts the weights of the A active "
    "experts only (SPEC's stored figure for shape 8 does the same; elsewhere A = E to rounding).",
)
def fused_moe(
    init: Params, x: Params, *, active_experts: int | None = None, routed_pairs: int | None = None
) -> Workload:
    t, d, i, e, k = x["token_count"], x["hidden_size"], x["intermediate_size"], x["num_experts"], x["top_k"]
    a = active_experts if active_experts is not None else round(expected_distinct(e, t * k))
    p = routed_pairs if routed_pairs is not None else round(t * expected_distinct(e, k))
    w = a * t * (2 * k - 1) + p * (6 * d * i + 5 * i + d)
    return _work("bf16", w, 2 * t * d + 2 * 3 * a * i * d + 8 * t * k, 4 * t * d)


def fp8_moe_active_experts(t: int, e: int, k: int) -> float:
    """Each token picks k distinct experts uniformly (top-k of a uniform draw)."""
    return e * (1.0 - (1.0 - k / e) ** t)


def _fp8_moe(x: Params, e_a: int) -> Workload:
    t, d, i, k = x["token_count"], x["hidden_size"], x["intermediate_size"], x["top_k"]
    bn, bk = x["scale_block_n"], x["scale_block_k"]
    w = t * d + 3 * e_a * i * d + t * k * (6 * d * i + 5 * i) + t * k * d + t * (k - 1) * d
    scales = (
        4 * t * _ceil_div(d, bk)
        + 4 * e_a * _ceil_div(2 * i, bn) * _ceil_div(d, bk)
        + 4 * e_a * _ceil_div(d, bn) * _ceil_div(i, bk)
    )
    return _work("fp8_e4m3", w, t * d + 3 * e_a * i * d + 8 * t * k + scales, t * d)


@formula(
    "fp8_blockscale_fused_moe",
    "E_a (experts with at least one token) is data dependent: its expectation E*(1-(1-k/E)^T) is used, "
    "rounded; weights, their scales and the dequantisation work count the E_a active experts only.",
)
def fp8_blockscale_fused_moe(init: Params, x: Params, *, active_experts: int | None = None) -> Workload:
    e_a = (
        active_experts
        if active_experts is not None
        else round(fp8_moe_active_experts(x["token_count"], x["num_experts"], x["top_k"]))
    )
    return _fp8_moe(x, e_a)


# E_a of the traced draw behind SPEC's stored figures (SPEC §3.6); other shapes use E.
_FP8_MOE_STORED_ACTIVE = {"2": 8, "3": 164, "4": 8}


def _fp8_moe_spec(shape_id: str, init: Params, x: Params) -> Workload:
    stored = _FP8_MOE_STORED_ACTIVE.get(shape_id)
    return _fp8_moe(x, x["num_experts"] if stored is None else stored)


SPEC_FIGURES["fp8_blockscale_fused_moe"] = _fp8_moe_spec


@formula("moe_sum_reduce")
def moe_sum_reduce(init: Params, x: Params) -> Workload:
    t, k, h = x["token_count"], x["top_k"], x["hidden_size"]
    return _work("bf16", t * k * h, 2 * t * k * h, 2 * t * h)


@formula("moe_topk_gating_softmax")
def moe_topk_gating_softmax(init: Params, x: Params) -> Workload:
    t, e, k = x["token_count"], x["num_experts"], init["top_k"]
    return _work("fp32", 4 * t * e - t, 4 * t * e, 8 * t * k)


@formula(
    "moe_align_block_size",
    "The output length is data dependent: Q_write uses the expected number of blocks "
    "E * E[ceil(c/bs)], c ~ Binomial(T*k, 1/E), rounded (one token: 8 blocks, 4132 bytes as SPEC).",
)
def moe_align_block_size(init: Params, x: Params, *, blocks: int | None = None) -> Workload:
    t, k, bs = x["token_count"], x["top_k"], init["block_size"]
    n_blocks = blocks if blocks is not None else round(expected_blocks(t * k, init["num_experts"], bs))
    return _work("int", 0, 4 * t * k, 4 * (bs * n_blocks + n_blocks + 1))


@formula("moe_count_and_sort")
def moe_count_and_sort(init: Params, x: Params) -> Workload:
    t, k, e = x["token_count"], x["top_k"], init["num_experts"]
    return _work("int", 0, 4 * t * k, 4 * (t * k + 2 * e + 1))


# --- normalisation ---------------------------------------------------------------------------


@formula("rms_norm")
def rms_norm(init: Params, x: Params) -> Workload:
    t, h = x["token_count"], x["hidden_size"]
    return _work("bf16", 3 * t * h + t, 2 * t * h + 2 * h, 2 * t * h)


@formula("fused_add_rms_norm")
def fused_add_rms_norm(init: Params, x: Params) -> Workload:
    t, h = x["token_count"], x["hidden_size"]
    return _work("bf16", 4 * t * h + t, 4 * t * h + 2 * h, 4 * t * h)


@formula("gated_rms_norm")
def gated_rms_norm(init: Params, x: Params) -> Workload:
    r, h = x["rows"], x["hidden_size"]
    return _work("bf16", r * (8 * h + 1), 4 * r * h + 2 * h, 2 * r * h)


@formula("l2_norm")
def l2_norm(init: Params, x: Params) -> Workload:
    t, h = x["num_tokens"], x["hidden_size"]
    return _work("bf16", 3 * t * h, 2 * t * h, 2 * t * h)


@formula("layer_norm")
def layer_norm(init: Params, x: Params) -> Workload:
    numel, h = math.prod(x["shape"]), x["shape"][-1]
    return _work("bf16", 7 * numel, 2 * numel + 4 * h, 2 * numel)


@formula("fused_qk_rmsnorm")
def fused_qk_rmsnorm(init: Params, x: Params) -> Workload:
    t, hq, hkv, d = x["num_tokens"], x["head_num"], x["kv_head_num"], x["size_per_head"]
    r = t * (hq + hkv)
    label: DtypePath = "fp16" if x["dtype"] == "fp16" else "bf16"
    return _work(label, 3 * r * d + r, 2 * t * (hq + 2 * hkv) * d + 4 * d, 2 * t * (hq + 2 * hkv) * d)


@formula("fused_rmsnorm_quant")
def fused_rmsnorm_quant(init: Params, x: Params) -> Workload:
    t, h = x["token_count"], x["hidden_size"]
    return _work("fp8_e4m3", 5 * t * h + 2 * t, 4 * t * h + 2 * h, t * h + 4 * t + 2 * t * h)


# --- quantisation ----------------------------------------------------------------------------


@formula("fp8_dynamic_per_token_quant")
def fp8_dynamic_per_token_quant(init: Params, x: Params) -> Workload:
    t, h = x["token_count"], x["hidden_size"]
    return _work("fp8_e4m3", t * h + t, 2 * t * h, t * h + 4 * t)


@formula("per_token_group_quant_fp8")
def per_token_group_quant_fp8(init: Params, x: Params) -> Workload:
    t, h, g = x["token_count"], x["hidden_size"], init["group_size"]
    groups = t * _ceil_div(h, g)
    return _work("fp8_e4m3", t * h + groups, 2 * t * h, t * h + 4 * groups)


# --- elementwise, rotary, conv ---------------------------------------------------------------


@formula("silu_and_mul")
def silu_and_mul(init: Params, x: Params) -> Workload:
    rows, two_d = x["shape"]
    d = two_d // 2
    return _work("bf16", 5 * rows * d, 2 * rows * two_d, 2 * rows * d)


@formula("topk_filter")
def topk_filter(init: Params, x: Params) -> Workload:
    s, v = x["seq_len"], x["hidden_size"]
    return _work("fp32", 0, 4 * s * v, 4 * s * v)


@formula("mrope")
def mrope(init: Params, x: Params) -> Workload:
    t, hq, hkv, hs, r = x["token_count"], x["num_query_heads"], x["num_kv_heads"], x["head_size"], x["rotary_dim"]
    return _work(
        "bf16", 3 * t * (hq + hkv) * r, 2 * t * (hq + hkv) * hs + 2 * 4 * 3 * t * (r // 2), 2 * t * (hq + hkv) * hs
    )


@formula(
    "fused_qkv_rope",
    "W is filed under fp16 for every shape, bf16 ones included, as SPEC §3.11 stores it. With a bias "
    "(no shape has one) the bias bytes and one add per element would be added.",
)
def fused_qkv_rope(init: Params, x: Params) -> Workload:
    t, hq, hkv, dh, r = x["total_tokens"], init["num_heads"], init["num_kv_heads"], init["head_dim"], init["rope_dim"]
    width = (hq + 2 * hkv) * dh
    bias = bool(x.get("with_bias"))
    w = r + t * r // 2 + 3 * t * (hq + hkv) * r + (t * width if bias else 0)
    return _work("fp16", w, 2 * t * width + 4 * t + (2 * width if bias else 0), 2 * t * width)


@formula("causal_conv1d")
def causal_conv1d(init: Params, x: Params) -> Workload:
    t, dm, wd = x["token_count"], x["dim"], x["width"]
    return _work("bf16", 2 * wd * dm * t + 4 * dm * t, 2 * (dm * t + dm * wd + dm + dm * (wd - 1)), 2 * dm * t)


def _reshape_dims(x: Params) -> tuple[int, int, int, int]:
    n, hkv, d = x["shape"]
    bs = x["block_size"]
    return n, hkv * d, bs, _ceil_div(n, bs)


@formula(
    "reshape_and_cache",
    "The slot mapping is the identity, so cache slots [0, N) are overwritten: Q_read counts the "
    "input caches' other slots only. SPEC §3.26 counts both whole input caches.",
)
def reshape_and_cache(init: Params, x: Params) -> Workload:
    n, hd, bs, nb = _reshape_dims(x)
    return _work("bf16", 0, 2 * 2 * n * hd + 2 * 2 * (nb * bs - n) * hd + 8 * n, 2 * 2 * nb * bs * hd)


def _reshape_spec(shape_id: str, init: Params, x: Params) -> Workload:
    n, hd, bs, nb = _reshape_dims(x)
    return _work("bf16", 0, 2 * 2 * n * hd + 2 * 2 * nb * bs * hd + 8 * n, 2 * 2 * nb * bs * hd)


SPEC_FIGURES["reshape_and_cache"] = _reshape_spec


# --- linear attention ------------------------------------------------------------------------


@formula("chunk_delta_rule_output")
def chunk_delta_rule_output(init: Params, x: Params) -> Workload:
    b, t, hq, hv, k, v = (
        x["batch_size"],
        x["token_count"],
        x["num_q_heads"],
        x["num_v_heads"],
        x["key_dim"],
        x["value_dim"],
    )
    c = init["chunk_size"]
    nc = _ceil_div(t, c)
    w = b * hv * nc * (2 * c * k * v + 2 * c * c * k + 2 * c * c * v + 3 * c * v + 2 * c * c)
    q_read = 2 * 2 * b * t * hq * k + 2 * b * t * hv * v + 2 * b * nc * hv * k * v + 4 * b * t * hv
    return _work("bf16", w, q_read, 2 * b * t * hv * v)


def _chunk_state(x: Params, init: Params, slots: int) -> Workload:
    b, t, hk, hv, k, v = (
        x["batch_size"],
        x["token_count"],
        x["num_k_heads"],
        x["num_v_heads"],
        x["key_dim"],
        x["value_dim"],
    )
    nc = _ceil_div(t, init["chunk_size"])
    w = b * hv * (4 * t * k * v + 2 * t * v + t + 2 * nc * k * v)
    q_read = (
        2 * b * t * hk * k + 2 * b * t * hv * k + 2 * b * t * hv * v + 4 * b * t * hv + 4 * slots * hv * k * v + 4 * b
    )
    q_write = 2 * b * nc * hv * k * v + 2 * b * t * hv * v + 4 * slots * hv * k * v
    return _work("bf16", w, q_read, q_write)


@formula(
    "chunk_gated_delta_rule_state",
    "Q counts the whole S-slot state pool, read and written (the output is a full copy of the pool); "
    "SPEC's stored figures count one slot per batch entry.",
)
def chunk_gated_delta_rule_state(init: Params, x: Params) -> Workload:
    return _chunk_state(x, init, x["state_count"])


SPEC_FIGURES["chunk_gated_delta_rule_state"] = lambda shape_id, init, x: _chunk_state(x, init, x["batch_size"])


@formula("gated_delta_rule_update")
def gated_delta_rule_update(init: Params, x: Params) -> Workload:
    b, t, hq, hv, k, v, s = (
        x[n] for n in ("batch_size", "token_count", "num_q_heads", "num_v_heads", "key_dim", "value_dim", "state_count")
    )
    w = b * t * hv * (7 * k * v + 3 * k + 2)
    q_read = (
        4 * hv + 2 * hv + 2 * 2 * b * t * hv + 2 * 2 * b * t * hq * k + 2 * b * t * hv * v + 4 * s * hv * k * v + 4 * b
    )
    return _work("bf16", w, q_read, 2 * b * t * hv * v + 4 * s * hv * k * v)


# --- lookup ----------------------------------------------------------------------------------


def operators() -> list[str]:
    return sorted(FORMULAS)


def workload(op: str, init: Params, inputs: Params) -> Workload:
    """W/Q of one shape of a shipped operator under our convention."""
    try:
        fn = FORMULAS[op]
    except KeyError:
        raise unknown_choice("operator", op, operators()) from None
    return fn(init, inputs)


def spec_figure(op: str, shape_id: str, init: Params, inputs: Params) -> Workload | None:
    """SPEC §3's stated figure where it differs from `workload()` (else None)."""
    fn = SPEC_FIGURES.get(op)
    if fn is None:
        return None
    figure = fn(shape_id, init, inputs)
    return None if figure == workload(op, init, inputs) else figure
