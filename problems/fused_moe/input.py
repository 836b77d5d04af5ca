"""Inputs for fused_moe. Draw order: hidden_states (0.1 * N(0, 1) bf16), w1 (N(0, 1) bf16 * D^-0.5),
w2 (N(0, 1) bf16 * I^-0.5), routing-weight logits (N(0, 1) fp32, softmax over the k slots),
topk_ids (independent uniform integers in [0, E); a token may repeat an expert)."""

import torch


def make_inputs(
    *,
    seed: int,
    device="cpu",
    token_count: int,
    hidden_size: int,
    intermediate_size: int,
    num_experts: int,
    top_k: int,
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=dtype, device=device)

    T, D, I, E = token_count, hidden_size, intermediate_size, num_experts
    hidden_states = normal(T, D) * 0.1
    w1 = normal(E, 2 * I, D) * D**-0.5
    w2 = normal(E, D, I) * I**-0.5
    topk_weights = torch.softmax(normal(T, top_k, dtype=torch.float32), dim=-1)
    topk_ids = torch.randint(0, E, (T, top_k), generator=gen, dtype=torch.int32, device=device)
    return {"hidden_states": hidden_states, "w1": w1, "w2": w2, "topk_weights": topk_weights, "topk_ids": topk_ids}
