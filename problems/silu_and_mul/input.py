"""Inputs for silu_and_mul: x of the given shape [rows, 2d], bf16 ~ N(0,1)."""

import torch


def make_inputs(*, seed: int, device: str | torch.device = "cpu", shape: list[int]) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    return {"x": torch.randn(*shape, dtype=torch.bfloat16, device=device, generator=gen)}
