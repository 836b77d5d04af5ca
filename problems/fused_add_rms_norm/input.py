"""Inputs for fused_add_rms_norm: x (T, H) bf16 ~ 0.02*N(0,1); residual (T, H) bf16 ~ N(0,1)
(unscaled); weight (H,) bf16 ~ 1 + 0.02*N(0,1). Draw order: x, residual, weight."""

import torch


def make_inputs(
    *, seed: int, device: str | torch.device = "cpu", token_count: int, hidden_size: int
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device=device, generator=gen) * 0.02
    residual = torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device=device, generator=gen)
    weight = torch.randn(hidden_size, dtype=torch.bfloat16, device=device, generator=gen) * 0.02 + 1.0
    return {"x": x, "residual": residual, "weight": weight}
