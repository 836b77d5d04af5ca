"""Inputs for moe_topk_gating_softmax: (T, E) fp32 router logits drawn as N(0, 1)."""

import torch


def make_inputs(*, seed: int, device="cpu", token_count: int, num_experts: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    gating_output = torch.randn((token_count, num_experts), generator=gen, dtype=torch.float32, device=device)
    return {"gating_output": gating_output}
