"""moe_topk_gating_softmax: the MoE router. Softmax over the expert logits, then the k most
probable experts per token with their raw (not renormalised) probabilities, in descending order.

Optional group-limited routing (num_expert_groups > 0 and topk_group > 0): the E experts form
num_expert_groups contiguous groups, a group scores the max probability inside it, and every
expert outside the topk_group best groups gets probability 0 before the top-k.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, top_k: int = 8, num_expert_groups: int = 0, topk_group: int = 0):
        super().__init__()
        self.top_k = int(top_k)
        self.num_expert_groups = int(num_expert_groups)
        self.topk_group = int(topk_group)

    def forward(self, gating_output: torch.Tensor) -> dict[str, torch.Tensor]:
        """gating_output (T, E) fp32 -> topk_weights (T, k) fp32, topk_ids (T, k) int32."""
        probs = torch.softmax(gating_output.float(), dim=-1)
        if self.num_expert_groups > 0 and self.topk_group > 0:
            probs = self._keep_best_groups(probs)
        topk_weights, topk_ids = torch.topk(probs, self.top_k, dim=-1, largest=True, sorted=True)
        return {"topk_weights": topk_weights, "topk_ids": topk_ids.to(torch.int32)}

    def _keep_best_groups(self, probs: torch.Tensor) -> torch.Tensor:
        tokens, experts = probs.shape
        groups = self.num_expert_groups
        if experts % groups:
            raise ValueError(f"{experts} experts do not split into {groups} equal groups")
        grouped = probs.view(tokens, groups, experts // groups)
        best = torch.topk(grouped.amax(dim=-1), self.topk_group, dim=-1).indices
        keep = torch.zeros(tokens, groups, dtype=torch.bool, device=probs.device).scatter_(1, best, True)
        return grouped.masked_fill(~keep.unsqueeze(-1), 0.0).view(tokens, experts)
