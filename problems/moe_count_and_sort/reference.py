"""moe_count_and_sort: per-expert counts of the flattened (token, slot) assignments, their
exclusive prefix sum, and a stable counting sort of the assignment positions by expert.

f = topk_ids flattened row-major (position p = t * k + s).
expert_token_counts[e] = #{p : f[p] = e}; cumsum = [0, c0, c0 + c1, ...] (E + 1 entries);
sorted_token_ids = for e ascending, the increasing positions p with f[p] = e.
Ids outside [0, E) are not counted and their positions go last, in increasing order
(the generator never draws them). block_size does not enter the math.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, num_experts: int = 128, block_size: int = 128):
        super().__init__()
        self.num_experts = int(num_experts)
        self.block_size = int(block_size)

    def forward(self, topk_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """topk_ids (T, k) int32 -> sorted_token_ids (T*k,), expert_token_counts (E,), cumsum (E+1,), all int32."""
        flat = topk_ids.reshape(-1).long()
        valid = (flat >= 0) & (flat < self.num_experts)
        sort_key = torch.where(valid, flat, self.num_experts)
        sorted_token_ids = torch.argsort(sort_key, stable=True)
        counts = torch.bincount(flat[valid], minlength=self.num_experts)
        cumsum = torch.cat([counts.new_zeros(1), torch.cumsum(counts, dim=0)])
        return {
            "sorted_token_ids": sorted_token_ids.to(torch.int32),
            "expert_token_counts": counts.to(torch.int32),
            "cumsum": cumsum.to(torch.int32),
        }
