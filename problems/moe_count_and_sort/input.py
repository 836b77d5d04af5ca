"""Inputs for moe_count_and_sort: (T, k) int32 expert ids, independent uniform integers in
[0, num_experts) (a token may repeat an expert)."""

import torch


def make_inputs(*, seed: int, device="cpu", token_count: int, top_k: int, num_experts: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    topk_ids = torch.randint(0, num_experts, (token_count, top_k), generator=gen, dtype=torch.int32, device=device)
    return {"topk_ids": topk_ids}
