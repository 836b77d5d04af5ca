"""Inputs for topk_filter: logits (S, V) fp32, N(0, 1)."""

import torch


def make_inputs(*, seed: int, device="cpu", seq_len: int, hidden_size: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(seq_len, hidden_size, generator=gen, dtype=torch.float32, device=device)
    return {"logits": logits}
