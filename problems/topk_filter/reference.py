"""topk_filter: top-k logit masking before sampling.

Per row: k' = min(top_k, V); tau = the k'-th largest logit of the row;
out = logits where logits >= tau, -inf where logits < tau.
Every value equal to tau is kept, so a row with ties can keep more than k' entries.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, top_k: int = 50):
        super().__init__()
        self.top_k = top_k

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """logits (S, V) fp32 -> out (S, V) fp32."""
        k = min(self.top_k, logits.shape[-1])
        tau = torch.topk(logits, k, dim=-1).values[:, -1:]
        return logits.masked_fill(logits < tau, float("-inf"))
