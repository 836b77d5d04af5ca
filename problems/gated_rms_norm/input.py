"""Inputs for gated_rms_norm: x (R, H) bf16 ~ 0.02*N(0,1); weight (H,) bf16 ~ 1 + 0.02*N(0,1);
z (R, H) bf16 ~ N(0,1) (unscaled). Draw order: x, weight, z."""

import torch


def make_inputs(
    *, seed: int, device: str | torch.device = "cpu", rows: int, hidden_size: int
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, hidden_size, dtype=torch.bfloat16, device=device, generator=gen) * 0.02
    weight = torch.randn(hidden_size, dtype=torch.bfloat16, device=device, generator=gen) * 0.02 + 1.0
    z = torch.randn(rows, hidden_size, dtype=torch.bfloat16, device=device, generator=gen)
    return {"x": x, "weight": weight, "z": z}
