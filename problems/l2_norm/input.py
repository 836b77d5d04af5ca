"""Inputs for l2_norm: x (num_tokens, hidden_size) ~ N(0,1) in the named torch dtype ('bfloat16')."""

import torch


def make_inputs(
    *, seed: int, device: str | torch.device = "cpu", num_tokens: int, hidden_size: int, dtype: str
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    return {"x": torch.randn(num_tokens, hidden_size, dtype=getattr(torch, dtype), device=device, generator=gen)}
