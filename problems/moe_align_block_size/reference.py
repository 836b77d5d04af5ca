"""moe_align_block_size: MoE routing preprocessing. Groups the flattened (token, slot)
assignments by expert, pads each expert's group to a multiple of block_size with the sentinel
T * k, and lists the expert of every block.

f = topk_ids flattened row-major (position p = t * k + s), N = T * k. For e = 0 .. E-1: P_e = the
increasing positions with f[p] = e; an empty P_e contributes nothing; otherwise append P_e and
(-|P_e| mod block_size) sentinels N to sorted_token_ids, and e once per block to expert_ids.
The outputs are compact: their lengths depend on the data. Ids outside [0, E) are dropped
(the generator never draws them).
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, block_size: int = 128, num_experts: int = 128):
        super().__init__()
        self.block_size = int(block_size)
        self.num_experts = int(num_experts)

    def forward(self, topk_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """topk_ids (T, k) int32 -> sorted_token_ids (L,), expert_ids (L / block_size,),
        num_tokens_post_pad (1,) = [L], all int32."""
        experts, block = self.num_experts, self.block_size
        flat = topk_ids.reshape(-1).long()
        sentinel = flat.numel()
        valid = (flat >= 0) & (flat < experts)
        counts = torch.bincount(flat[valid], minlength=experts)
        padded = (counts + block - 1) // block * block

        # Positions grouped by expert, increasing within an expert; dropped ids sort last.
        order = torch.argsort(torch.where(valid, flat, experts), stable=True)[: int(valid.sum())]
        expert_of = flat[order]
        rank_in_expert = torch.arange(order.numel(), device=flat.device) - (torch.cumsum(counts, 0) - counts)[expert_of]
        destination = (torch.cumsum(padded, 0) - padded)[expert_of] + rank_in_expert

        total = int(padded.sum())
        sorted_token_ids = torch.full((total,), sentinel, dtype=torch.int32, device=flat.device)
        sorted_token_ids[destination] = order.to(torch.int32)
        expert_ids = torch.repeat_interleave(torch.arange(experts, device=flat.device), padded // block)
        return {
            "sorted_token_ids": sorted_token_ids,
            "expert_ids": expert_ids.to(torch.int32),
            "num_tokens_post_pad": torch.tensor([total], dtype=torch.int32, device=flat.device),
        }
