"""Inputs for fused_rmsnorm_quant: x (T, H), residual (T, H) and weight (H,), all bf16 ~ N(0,1)
(the weight is not near one; its signs vary). Draw order: x, residual, weight."""

import torch


def make_inputs(
    *, seed: int, device: str | torch.device = "cpu", token_count: int, hidden_size: int
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device=device, generator=gen)
    residual = torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device=device, generator=gen)
    weight = torch.randn(hidden_size, dtype=torch.bfloat16, device=device, generator=gen)
    return {"x": x, "residual": residual, "weight": weight}
