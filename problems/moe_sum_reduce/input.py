"""Inputs for moe_sum_reduce: (T, k, H) bf16 expert outputs drawn as 0.02 * N(0, 1)."""

import torch


def make_inputs(*, seed: int, device="cpu", token_count: int, top_k: int, hidden_size: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    expert_outputs = (
        torch.randn((token_count, top_k, hidden_size), generator=gen, dtype=torch.bfloat16, device=device) * 0.02
    )
    return {"expert_outputs": expert_outputs}
