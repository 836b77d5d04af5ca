"""Closed-form W/Q (atrex_mcp.problemset.formulas) against values worked out by hand from the
SPEC §3 formulas, one or more shapes per operator family; conventions of docs/roofline.md."""

import math

import pytest
import torch

from atrex_mcp.problemset import formulas as wf
from atrex_mcp.problemset.catalog import Catalog

# (op, shape id, the shape's inputs the hand computation assumes, label, W, Q_read, Q_write)
HAND = [
    # rms_norm: W = 3TH + T, Qr = 2TH + 2H, Qw = 2TH with T=2500, H=1024.
    (
        "rms_norm",
        "0",
        {"token_count": 2500, "hidden_size": 1024},
        "bf16",
        3 * 2500 * 1024 + 2500,
        2 * 2500 * 1024 + 2 * 1024,
        2 * 2500 * 1024,
    ),
    # silu_and_mul: rows=1630, d=768: W = 5*rows*d, Qr = 2*rows*2d, Qw = 2*rows*d.
    ("silu_and_mul", "1", {"shape": [1630, 1536]}, "bf16", 5 * 1630 * 768, 2 * 1630 * 1536, 2 * 1630 * 768),
    # layer_norm: numel = 276*1152: W = 7 numel, Qr = 2 numel + 4H.
    ("layer_norm", "0", {"shape": [276, 1, 1152]}, "bf16", 7 * 276 * 1152, 2 * 276 * 1152 + 4 * 1152, 2 * 276 * 1152),
    # block_scaled_mm: M=349, N=K=2048, nkb=16: W = 2MNK + 3 nkb MN - MN; Qr = MK + NK + 4 M nkb + 4 (N/128) nkb.
    (
        "block_scaled_mm",
        "0",
        {"m": 349, "n": 2048, "k": 2048},
        "fp8_e4m3",
        2 * 349 * 2048 * 2048 + 3 * 16 * 349 * 2048 - 349 * 2048,
        349 * 2048 + 2048 * 2048 + 4 * 349 * 16 + 4 * 16 * 16,
        4 * 349 * 2048,
    ),
    # attention_forward: H=16, D=72, one sequence of 720: W = 4 H D L^2; Qr = 6 T H D + 8 (n+1).
    (
        "attention_forward",
        "0",
        {"num_heads": 16, "head_dim": 72, "seq_lens": [720]},
        "bf16",
        4 * 16 * 72 * 720**2,
        6 * 720 * 16 * 72 + 8 * 2,
        2 * 720 * 16 * 72,
    ),
    # unified_attention: one sequence of 16, Hq=16, Hkv=1, D=128, bs=16: W = 4 Hq D L(L+1)/2; live KV only.
    (
        "unified_attention",
        "3",
        {"seq_lens": [16], "num_query_heads": 16, "num_kv_heads": 1, "head_size": 128},
        "bf16",
        4 * 16 * 128 * (16 * 17 // 2),
        2 * 16 * 16 * 128 + 4 * 16 * 1 * 128 + 4 * 2 + 4 * 1 + 4 * 1 * 1,
        2 * 16 * 16 * 128,
    ),
    # paged_attention_decode: S=1, ctx=128, Hq=16, Hkv=2, D=256, MB=8; KV of the 128 live tokens only.
    (
        "paged_attention_decode",
        "1",
        {"num_seqs": 1, "ctx_len": 128, "num_query_heads": 16, "num_kv_heads": 2, "head_size": 256},
        "bf16",
        4 * 16 * 128 * 256 + 2 * 128,
        2 * 16 * 256 + 4 * 128 * 2 * 256 + 4 * 8 + 4,
        2 * 16 * 256,
    ),
    # mla_decode_attention: B=4, ctx=128, Hn=128, L=512, Rr=64.
    (
        "mla_decode_attention",
        "0",
        {"batch_size": 4, "ctx_len": 128, "nhead": 128},
        "bf16",
        4 * 128 * 576 + 3 * 4 * 128 * 128 * 576 + 2 * 4 * 128 * 128 * 512,
        2 * 4 * 128 * 576 + 2 * 4 * 128 * 576 + 16,
        2 * 4 * 128 * 512,
    ),
    # fused_moe: one token, E=128, k=8: A = P = round(128 (1 - (127/128)^8)) = round(7.78) = 8;
    # W = A T (2k-1) + P (6DI + 5I + D); Qr counts the 8 routed experts' weights (SPEC's stored figure).
    (
        "fused_moe",
        "8",
        {"token_count": 1, "hidden_size": 2048, "intermediate_size": 768, "num_experts": 128, "top_k": 8},
        "bf16",
        8 * 1 * 15 + 8 * (6 * 2048 * 768 + 5 * 768 + 2048),
        2 * 2048 + 6 * 8 * 768 * 2048 + 8 * 8,
        4 * 2048,
    ),
    # fp8_blockscale_fused_moe: T=32, E=256, k=8: E_a = round(256 (1 - (31/32)^32)) = round(163.3) = 163.
    (
        "fp8_blockscale_fused_moe",
        "3",
        {"token_count": 32, "hidden_size": 7168, "intermediate_size": 2048, "num_experts": 256},
        "fp8_e4m3",
        32 * 7168 + 3 * 163 * 2048 * 7168 + 32 * 8 * (6 * 7168 * 2048 + 5 * 2048) + 32 * 8 * 7168 + 32 * 7 * 7168,
        32 * 7168 + 3 * 163 * 2048 * 7168 + 8 * 32 * 8 + 4 * 32 * 56 + 4 * 163 * 32 * 56 + 4 * 163 * 56 * 16,
        32 * 7168,
    ),
    # moe_align_block_size: one token, 8 ids: 8 blocks expected -> Qw = 4 (8*128 + 8 + 1) = 4132 (SPEC's example).
    ("moe_align_block_size", "0", {"token_count": 1, "top_k": 8}, "int", 0, 4 * 8, 4132),
    # moe_count_and_sort: T=76, k=8, E=128: Qw = 4 (Tk + 2E + 1).
    ("moe_count_and_sort", "1", {"token_count": 76, "top_k": 8}, "int", 0, 4 * 608, 4 * (608 + 2 * 128 + 1)),
    # chunk_gated_delta_rule_state: B=1, T=2048, Hk=1, Hv=2, K=V=128, NC=32, S=474: the whole pool is read and written.
    (
        "chunk_gated_delta_rule_state",
        "0",
        {"token_count": 2048, "num_v_heads": 2, "num_k_heads": 1, "state_count": 474},
        "bf16",
        2 * (4 * 2048 * 128 * 128 + 2 * 2048 * 128 + 2048 + 2 * 32 * 128 * 128),
        2 * 2048 * 128 + 2 * 2048 * 2 * 128 + 2 * 2048 * 2 * 128 + 4 * 2048 * 2 + 4 * 474 * 2 * 128 * 128 + 4,
        2 * 32 * 2 * 128 * 128 + 2 * 2048 * 2 * 128 + 4 * 474 * 2 * 128 * 128,
    ),
    # gated_delta_rule_update: B=T=1, Hq=16, Hv=32, K=V=128, S=2.
    (
        "gated_delta_rule_update",
        "0",
        {"token_count": 1, "num_q_heads": 16, "num_v_heads": 32, "state_count": 2},
        "bf16",
        32 * (7 * 128 * 128 + 3 * 128 + 2),
        4 * 32 + 2 * 32 + 4 * 32 + 4 * 16 * 128 + 2 * 32 * 128 + 4 * 2 * 32 * 128 * 128 + 4,
        2 * 32 * 128 + 4 * 2 * 32 * 128 * 128,
    ),
    # reshape_and_cache: N=144 tokens fill all 9 blocks x 16 slots: the input caches' old contents are never read.
    (
        "reshape_and_cache",
        "1",
        {"shape": [144, 2, 256], "block_size": 16},
        "bf16",
        0,
        4 * 144 * 512 + 8 * 144,
        4 * 144 * 512,
    ),
    # fused_qkv_rope: a bf16 shape, W filed under fp16 as SPEC stores it: W = R + T R/2 + 3 T (Hq+Hkv) R.
    (
        "fused_qkv_rope",
        "0",
        {"total_tokens": 1, "num_heads": 32, "num_kv_heads": 4, "dtype": "bf16"},
        "fp16",
        128 + 64 + 3 * 36 * 128,
        2 * 40 * 128 + 4,
        2 * 40 * 128,
    ),
]

# SPEC §3's own figure where our convention differs (docs/roofline.md): (op, id, Q_read, Q_write).
SPEC_HAND = [
    # all NB = MB*S + 16 = 24 blocks of both caches
    ("paged_attention_decode", "1", 2 * 16 * 256 + 4 * 24 * 2 * 256 * 16 + 4 * 8 + 4, 2 * 16 * 256),
    # both whole input caches
    ("reshape_and_cache", "1", 4 * 144 * 512 + 4 * 144 * 512 + 8 * 144, 4 * 144 * 512),
    # one state slot per batch entry instead of the 474-slot pool
    (
        "chunk_gated_delta_rule_state",
        "0",
        2 * 2048 * 128 + 2 * 2048 * 2 * 128 + 2 * 2048 * 2 * 128 + 4 * 2048 * 2 + 4 * 1 * 2 * 128 * 128 + 4,
        2 * 32 * 2 * 128 * 128 + 2 * 2048 * 2 * 128 + 4 * 1 * 2 * 128 * 128,
    ),
    # E_a = 164 experts of the traced draw
    (
        "fp8_blockscale_fused_moe",
        "3",
        32 * 7168 + 3 * 164 * 2048 * 7168 + 8 * 32 * 8 + 4 * 32 * 56 + 4 * 164 * 32 * 56 + 4 * 164 * 56 * 16,
        32 * 7168,
    ),
]


@pytest.fixture(scope="module")
def catalog():
    return Catalog()


def _shape(catalog, op, sid):
    return catalog.visible(op).shape(sid)


@pytest.mark.parametrize("op, sid, assumed, label, w, q_read, q_write", HAND, ids=[f"{c[0]}-{c[1]}" for c in HAND])
def test_closed_form_equals_hand_value(catalog, op, sid, assumed, label, w, q_read, q_write):
    shape = _shape(catalog, op, sid)
    assert {k: shape.inputs[k] for k in assumed} == assumed
    assert wf.workload(op, shape.init, shape.inputs).model_dump() == {
        "flops": {label: w},
        "bytes_read": q_read,
        "bytes_written": q_write,
    }


@pytest.mark.parametrize("op, sid, q_read, q_write", SPEC_HAND, ids=[f"{c[0]}-{c[1]}" for c in SPEC_HAND])
def test_spec_figure_equals_hand_value(catalog, op, sid, q_read, q_write):
    shape = _shape(catalog, op, sid)
    figure = wf.spec_figure(op, sid, shape.init, shape.inputs)
    assert (figure.bytes_read, figure.bytes_written) == (q_read, q_write)


def test_spec_figure_is_absent_where_conventions_agree(catalog):
    for op in ("rms_norm", "unified_attention", "fused_moe"):
        for shape in catalog.visible(op).scored_shapes:
            assert wf.spec_figure(op, shape.id, shape.init, shape.inputs) is None


def test_every_shipped_operator_has_a_formula_for_every_shape(catalog):
    assert set(catalog.names()) <= set(wf.operators())
    for op in catalog.names():
        for shape in catalog.visible(op).shapes:
            w = wf.workload(op, shape.init, shape.inputs)
            assert w.total_bytes > 0 and len(w.flops) == 1


def test_expected_blocks_matches_a_simulation():
    # moe_align_block_size with T*k = 296 draws over 128 experts, blocks of 128: E[blocks] = E[#non-empty experts]
    # because no expert reaches 129 ids; that expectation is 128 (1 - (127/128)^296).
    assert wf.expected_blocks(296, 128, 128) == pytest.approx(128 * (1 - (127 / 128) ** 296), rel=1e-9)
    gen = torch.Generator().manual_seed(0)
    draws = torch.randint(0, 16, (4000, 200), generator=gen)
    simulated = sum(math.ceil(c / 8) for row in draws for c in torch.bincount(row, minlength=16).tolist()) / 4000
    assert wf.expected_blocks(200, 16, 8) == pytest.approx(simulated, rel=0.01)


def test_data_dependent_counts_can_be_given_exactly(catalog):
    shape = _shape(catalog, "fused_moe", "8")
    seven = wf.fused_moe(shape.init, shape.inputs, active_experts=7, routed_pairs=7)
    assert seven.bytes_read == 2 * 2048 + 6 * 7 * 768 * 2048 + 64
    aligned = wf.moe_align_block_size(
        _shape(catalog, "moe_align_block_size", "0").init, {"token_count": 1, "top_k": 8}, blocks=7
    )
    assert aligned.bytes_written == 4 * (7 * 128 + 7 + 1)
