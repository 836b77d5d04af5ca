"""Problem references of the MoE routing/compute and linear-attention operators: each reference
checked against an independent, naive float64 / pure-Python version of SPEC §3 on tiny inputs.
The contract every problem folder keeps is tested in tests/test_problems_contract.py."""

from __future__ import annotations

import math

import pytest
import torch

from problem_contract import BF16, FN, make_inputs, model, same_bits


def build(op: str, init: dict, shape_inputs: dict, seed: int = 0):
    """A reference Model and its inputs at the given init and generator parameters."""
    return model(op, init), make_inputs(op, seed, **shape_inputs)


def bf16(x: float) -> float:
    return torch.tensor(x, dtype=torch.float64).to(BF16).item()


def assert_bf16_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """bf16 output against a float64 value that followed the same roundings: all within about
    one bf16 step, and almost all identical (fp32 vs float64 arithmetic may rarely decide a
    rounding differently; a missing intermediate rounding changes many)."""
    assert actual.dtype == BF16
    torch.testing.assert_close(actual.double(), expected.double(), rtol=2**-7, atol=1e-7)
    differing = int((actual != expected.to(BF16)).sum())
    assert differing <= max(1, actual.numel() // 50), f"{differing} of {actual.numel()} bf16 values differ"


# --- independent checks on tiny inputs -----------------------------------------------------


def test_moe_sum_reduce_matches_naive_sum():
    reference, x = build(
        "moe_sum_reduce", {"routed_scaling_factor": 2.5}, {"token_count": 3, "top_k": 4, "hidden_size": 5}
    )
    src = x["expert_outputs"].double()
    expected = torch.tensor(
        [[bf16(sum(src[t, s, h].item() for s in range(4)) * 2.5) for h in range(5)] for t in range(3)]
    )
    assert_bf16_close(reference(**x), expected)


def _naive_router(logits: torch.Tensor, top_k: int, groups: int = 0, keep_groups: int = 0):
    weights, ids = [], []
    for row in logits.double().tolist():
        top = max(row)
        exps = [math.exp(v - top) for v in row]
        probs = [e / sum(exps) for e in exps]
        if groups:
            size = len(probs) // groups
            score = [max(probs[g * size : (g + 1) * size]) for g in range(groups)]
            kept = sorted(range(groups), key=lambda g: -score[g])[:keep_groups]
            probs = [p if i // size in kept else 0.0 for i, p in enumerate(probs)]
        order = sorted(range(len(probs)), key=lambda i: -probs[i])[:top_k]
        ids.append(order)
        weights.append([probs[i] for i in order])
    return torch.tensor(weights, dtype=torch.float64), torch.tensor(ids, dtype=torch.int32)


@pytest.mark.parametrize("groups,keep", [(0, 0), (4, 2)])
def test_moe_topk_gating_softmax_matches_naive_router(groups, keep):
    init = {"top_k": 3, "num_expert_groups": groups, "topk_group": keep}
    reference, x = build("moe_topk_gating_softmax", init, {"token_count": 7, "num_experts": 8})
    out = reference(**x)
    weights, ids = _naive_router(x["gating_output"], 3, groups, keep)
    assert torch.equal(out["topk_ids"], ids)
    torch.testing.assert_close(out["topk_weights"].double(), weights, rtol=1e-6, atol=1e-7)


def test_moe_count_and_sort_matches_hand_sort():
    reference, x = build(
        "moe_count_and_sort", {"num_experts": 6, "block_size": 4}, {"token_count": 5, "top_k": 3, "num_experts": 6}
    )
    flat = x["topk_ids"].flatten().tolist()
    counts = [flat.count(e) for e in range(6)]
    order = [p for e in range(6) for p in range(len(flat)) if flat[p] == e]
    out = reference(**x)
    assert out["expert_token_counts"].tolist() == counts
    assert out["cumsum"].tolist() == [sum(counts[:e]) for e in range(7)]
    assert out["sorted_token_ids"].tolist() == order


@pytest.mark.parametrize("tokens,top_k,experts,block", [(21, 4, 6, 4), (3, 2, 16, 4), (1, 8, 128, 128)])
def test_moe_align_block_size_matches_hand_alignment(tokens, top_k, experts, block):
    reference, x = build(
        "moe_align_block_size",
        {"block_size": block, "num_experts": experts},
        {"token_count": tokens, "top_k": top_k, "num_experts": experts},
    )
    flat = x["topk_ids"].flatten().tolist()
    sentinel = len(flat)
    sorted_ids, expert_ids = [], []
    for e in range(experts):
        group = [p for p in range(len(flat)) if flat[p] == e]
        if not group:
            continue
        pad = -len(group) % block
        sorted_ids += group + [sentinel] * pad
        expert_ids += [e] * ((len(group) + pad) // block)
    out = reference(**x)
    assert out["sorted_token_ids"].tolist() == sorted_ids
    assert out["expert_ids"].tolist() == expert_ids
    assert out["num_tokens_post_pad"].tolist() == [len(sorted_ids)]


@pytest.mark.parametrize("tokens", [1, 6])
@pytest.mark.parametrize("activation", ["silu", None])
def test_causal_conv1d_matches_naive_loop(tokens, activation):
    reference, x = build("causal_conv1d", {"activation": activation}, {"token_count": tokens, "dim": 5, "width": 4})
    xs, w, bias, state = (x[n].double() for n in ("x", "weight", "bias", "initial_state"))
    expected = torch.empty(5, tokens, dtype=torch.float64)
    for d in range(5):
        seq = state[0, d].tolist() + xs[d].tolist()
        for t in range(tokens):
            y = bf16(bias[d].item() + sum(w[d, j].item() * seq[t + j] for j in range(4)))
            expected[d, t] = y if activation is None else bf16(y / (1 + math.exp(-y)))
    assert_bf16_close(reference(**x), expected)


def test_causal_conv1d_rejects_unknown_activation():
    with pytest.raises(ValueError):
        model("causal_conv1d", {"activation": "relu"})


def _unit(vec: list[float]) -> list[float]:
    norm = max(math.sqrt(sum(v * v for v in vec)), 1e-6)
    return [v / norm for v in vec]


def test_gated_delta_rule_update_matches_naive_recurrence():
    dims = {
        "batch_size": 2,
        "token_count": 5,
        "num_q_heads": 2,
        "num_v_heads": 4,
        "key_dim": 4,
        "value_dim": 3,
        "state_count": 3,
    }
    # A threshold of 0.01 sends about half of the softplus arguments down the linear branch.
    init = {"softplus_beta": 1.5, "softplus_threshold": 0.01, "use_qk_l2norm": True, "scale": None}
    reference, x = build("gated_delta_rule_update", init, dims)
    B, T, Hq, Hv, K, V = (
        dims[n] for n in ("batch_size", "token_count", "num_q_heads", "num_v_heads", "key_dim", "value_dim")
    )
    f = {n: t.double() for n, t in x.items()}
    slots = x["initial_state_indices"].tolist()
    out = torch.empty(B, T, Hv, V, dtype=torch.float64)
    final = f["initial_state"].clone()
    for b in range(B):
        for j in range(Hv):
            hq = min(j // max(Hv // Hq, 1), Hq - 1)
            st = f["initial_state"][slots[b], j].tolist()
            for t in range(T):
                z = f["a"][b, t, j].item() + f["dt_bias"][j].item()
                softplus = math.log1p(math.exp(1.5 * z)) / 1.5 if 1.5 * z <= 0.01 else z
                decay = math.exp(-math.exp(f["A_log"][j].item()) * softplus)
                write = 1 / (1 + math.exp(-f["b"][b, t, j].item()))
                kv = _unit(f["k"][b, t, hq].tolist())
                qv = [v * K**-0.5 for v in _unit(f["q"][b, t, hq].tolist())]
                st = [[s * decay for s in row] for row in st]
                delta = [
                    (f["v"][b, t, j, c].item() - sum(st[i][c] * kv[i] for i in range(K))) * write for c in range(V)
                ]
                st = [[st[i][c] + kv[i] * delta[c] for c in range(V)] for i in range(K)]
                for c in range(V):
                    out[b, t, j, c] = sum(st[i][c] * qv[i] for i in range(K))
            final[slots[b], j] = torch.tensor(st, dtype=torch.float64)
    got = reference(**x)
    assert_bf16_close(got["out"], out.to(BF16))
    torch.testing.assert_close(got["final_state"].double(), final, rtol=1e-5, atol=1e-7)


def test_chunk_delta_rule_output_matches_naive_loop():
    dims = {
        "batch_size": 1,
        "token_count": 11,
        "num_q_heads": 2,
        "num_v_heads": 4,
        "key_dim": 3,
        "value_dim": 2,
        "chunk_size": 4,
    }
    reference, x = build("chunk_delta_rule_output", {"chunk_size": 4, "scale": None}, dims)
    T, Hq, Hv, K, V = 11, 2, 4, 3, 2
    q, k, v, h, g = (x[n].double() for n in ("q", "k", "v", "h", "g"))
    expected = torch.empty(1, T, Hv, V, dtype=torch.float64)
    for j in range(Hv):
        hq = min(j // (Hv // Hq), Hq - 1)
        for t in range(T):
            c, gi = t // 4, g[0, t, j].item()
            qv = q[0, t, hq].tolist()
            gates = {s: g[0, s, j].item() for s in range(c * 4, t + 1)}
            attn = {
                s: bf16(
                    sum(qv[i] * k[0, s, hq, i].item() for i in range(K)) * (math.exp(gi - gl) if gi - gl <= 0 else 0.0)
                )
                for s, gl in gates.items()
            }
            for col in range(V):
                inter = sum(qv[i] * h[0, c, j, i, col].item() for i in range(K)) * math.exp(gi)
                intra = sum(a * v[0, s, j, col].item() for s, a in attn.items())
                expected[0, t, j, col] = (inter + intra) * K**-0.5
    assert_bf16_close(reference(**x), expected.to(BF16))


def test_chunk_gated_delta_rule_state_matches_naive_loop():
    dims = {
        "batch_size": 2,
        "token_count": 11,
        "num_k_heads": 1,
        "num_v_heads": 2,
        "key_dim": 3,
        "value_dim": 2,
        "state_count": 4,
    }
    reference, x = build("chunk_gated_delta_rule_state", {"chunk_size": 4}, dims)
    # Larger w and state make the bf16 rounding of the state visible in v_new.
    x["w"], x["initial_state"] = x["w"] * 40, x["initial_state"] * 40
    B, T, Hv, K, V, C = 2, 11, 2, 3, 2, 4
    k, w, u, g, init = (x[n].double() for n in ("k", "w", "u", "g", "initial_state"))
    slots = x["initial_state_indices"].tolist()
    h = torch.empty(B, 3, Hv, K, V, dtype=torch.float64)
    v_new = torch.empty(B, T, Hv, V, dtype=torch.float64)
    final = init.clone()
    for b in range(B):
        for j in range(Hv):
            st = init[slots[b], j].tolist()
            for c in range(3):
                rows = range(c * C, min(c * C + C, T))
                st_b = [[bf16(s) for s in row] for row in st]
                h[b, c, j] = torch.tensor(st_b)
                corrected = {
                    i: [
                        u[b, i, j, col].item() - sum(w[b, i, j, r].item() * st_b[r][col] for r in range(K))
                        for col in range(V)
                    ]
                    for i in rows
                }
                gamma = g[b, rows[-1], j].item()
                scaled = {}
                for i, vals in corrected.items():
                    v_new[b, i, j] = torch.tensor([bf16(val) for val in vals])
                    gap = gamma - g[b, i, j].item()
                    factor = math.exp(gap) if gap <= 0 else 0.0
                    scaled[i] = [bf16(val * factor) for val in vals]
                st = [
                    [
                        st[r][col] * math.exp(gamma) + sum(k[b, i, 0, r].item() * scaled[i][col] for i in rows)
                        for col in range(V)
                    ]
                    for r in range(K)
                ]
            final[slots[b], j] = torch.tensor(st)
    got = reference(**x)
    assert_bf16_close(got["h"], h)
    assert_bf16_close(got["v_new"], v_new)
    torch.testing.assert_close(got["final_state"].double(), final, rtol=1e-5, atol=1e-7)


def test_fused_moe_matches_per_token_loop():
    dims = {"token_count": 9, "hidden_size": 6, "intermediate_size": 5, "num_experts": 3, "top_k": 3}
    reference, x = build("fused_moe", {"num_experts": 3, "intermediate_size": 5, "top_k": 3}, dims)
    hidden, w1, w2 = (x[n].double() for n in ("hidden_states", "w1", "w2"))
    expected = torch.zeros(9, 6, dtype=torch.float64)
    for t in range(9):
        merged: dict[int, float] = {}
        for e, weight in zip(x["topk_ids"][t].tolist(), x["topk_weights"][t].tolist()):
            merged[e] = merged.get(e, 0.0) + weight
        for e, weight in merged.items():
            gate_up = w1[e] @ hidden[t]
            act = gate_up[:5] / (1 + torch.exp(-gate_up[:5])) * gate_up[5:]
            expected[t] += (w2[e] @ act) * weight
    torch.testing.assert_close(reference(**x).double(), expected, rtol=1e-5, atol=1e-7)


def test_fp8_blockscale_fused_moe_matches_per_slot_loop():
    blocks = {"scale_block_n": 2, "scale_block_k": 4}
    dims = {"token_count": 5, "hidden_size": 8, "intermediate_size": 4, "num_experts": 4, "top_k": 2, **blocks}
    reference, x = build(
        "fp8_blockscale_fused_moe", {"num_experts": 4, "intermediate_size": 4, "top_k": 2, **blocks}, dims
    )
    rows = torch.arange(8)
    a = x["hidden_states"].double() * x["a_scale"].double()[:, rows // 4]
    expected = torch.zeros(5, 8, dtype=torch.float64)
    for t in range(5):
        for e, weight in zip(x["topk_ids"][t].tolist(), x["topk_weights"][t].tolist()):
            w1 = x["w1"][e].double() * x["fc1_scale"][e].double()[rows[:, None] // 2, rows[None, :] // 4]
            w2 = x["w2"][e].double() * x["fc2_scale"][e].double()[rows[:, None] // 2, rows[None, :4] // 4]
            gate_up = w1 @ a[t]
            act = gate_up[:4] / (1 + torch.exp(-gate_up[:4])) * gate_up[4:]
            expected[t] += weight * (w2 @ act)
    mixed = reference.mixture_fp32(**x)
    torch.testing.assert_close(mixed.double(), expected, rtol=1e-5, atol=1e-6)
    assert same_bits(reference(**x), mixed.clamp(-448, 448).to(FN))


def test_fp8_blockscale_fused_moe_quantiser_round_trips():
    x = make_inputs(
        "fp8_blockscale_fused_moe", 0, token_count=3, hidden_size=256, intermediate_size=128, num_experts=2, top_k=2
    )
    codes = x["hidden_states"].float().view(3, 2, 128)
    assert codes.abs().amax(dim=-1).eq(448).all()  # each tile's largest magnitude maps to the fp8 max
    assert tuple(x["fc1_scale"].shape) == (2, 2, 2) and tuple(x["fc2_scale"].shape) == (2, 2, 1)
    assert (x["topk_ids"][:, 0] != x["topk_ids"][:, 1]).all()


@pytest.mark.slow
def test_fp8_blockscale_fused_moe_has_no_nan_at_hidden_7168():
    """Hidden 7168 and intermediate 2048 as scored shapes 1-3, with fewer tokens and experts:
    the fp32 mixture exceeds the e4m3fn range, and the saturating cast still gives no NaN."""
    dims = {"token_count": 4, "hidden_size": 7168, "intermediate_size": 2048, "num_experts": 2, "top_k": 2}
    reference, x = build("fp8_blockscale_fused_moe", {"num_experts": 2, "intermediate_size": 2048, "top_k": 2}, dims)
    mixed = reference.mixture_fp32(**x)
    assert (mixed.abs() > 464).any()  # a non-saturating cast (SPEC §0.3) would produce NaN here
    out = reference(**x)
    assert not out.float().isnan().any()
    assert out.float().abs().max() == 448
