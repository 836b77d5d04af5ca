"""Inputs for fp8_dynamic_per_token_quant: x (T, H) bf16 ~ N(0,1)."""

import torch


def make_inputs(
    *, seed: int, device: str | torch.device = "cpu", token_count: int, hidden_size: int
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    return {"x": torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device=device, generator=gen)}
