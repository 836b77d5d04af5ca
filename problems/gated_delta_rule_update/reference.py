"""gated_delta_rule_update: the recurrent (token-by-token) gated delta rule of Gated DeltaNet.

All arithmetic in fp32. Per batch entry b, value head j (q/k head min(j // r, Hq-1), r = max(Hv // Hq, 1)):
  gamma_t = -exp(A_log[j]) * softplus(a[b, t, j] + dt_bias[j])   (softplus with beta and threshold)
  w_t     = sigmoid(b[b, t, j])
  q^, k^  = the mapped q/k vectors, each divided by max(||.||_2, 1e-6) when use_qk_l2norm
  St      = initial_state[initial_state_indices[b], j]                      (K x V)
  for t in order:  St <- St * exp(gamma_t)               (decay before the read)
                   p  = St^T k^ ;  delta = (v_t - p) * w_t
                   St <- St + k^ (outer) delta
                   out[b, t, j] = bf16( St^T (q^ * scale) )  (read after the update)
final_state = copy of initial_state with slot initial_state_indices[b] replaced by St.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def __init__(
        self,
        *,
        softplus_beta: float = 1.0,
        softplus_threshold: float = 20.0,
        scale: float | None = None,
        use_qk_l2norm: bool = True,
    ):
        super().__init__()
        self.softplus_beta = float(softplus_beta)
        self.softplus_threshold = float(softplus_threshold)
        self.scale = scale
        self.use_qk_l2norm = bool(use_qk_l2norm)

    def forward(
        self,
        A_log: torch.Tensor,
        a: torch.Tensor,
        dt_bias: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        b: torch.Tensor,
        initial_state: torch.Tensor,
        initial_state_indices: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """A_log (Hv,) fp32; a, b (B, T, Hv) bf16; dt_bias (Hv,) bf16; q, k (B, T, Hq, K) bf16;
        v (B, T, Hv, V) bf16; initial_state (S, Hv, K, V) fp32; initial_state_indices (B,) int32
        -> out (B, T, Hv, V) bf16, final_state (S, Hv, K, V) fp32."""
        batch, tokens, q_heads, key_dim = q.shape
        v_heads = v.shape[2]
        scale = key_dim**-0.5 if self.scale is None else float(self.scale)

        decay = torch.exp(
            -torch.exp(A_log.float())
            * F.softplus(a.float() + dt_bias.float(), beta=self.softplus_beta, threshold=self.softplus_threshold)
        )
        write = torch.sigmoid(b.float())

        ratio = max(v_heads // q_heads, 1)
        head_map = torch.clamp(torch.arange(v_heads, device=q.device) // ratio, max=q_heads - 1)
        qh, kh = q.float()[:, :, head_map], k.float()[:, :, head_map]
        if self.use_qk_l2norm:
            qh = qh / qh.norm(dim=-1, keepdim=True).clamp_min(1e-6)
            kh = kh / kh.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        qh = qh * scale
        vf = v.float()

        slots = initial_state_indices.long()
        state = initial_state[slots].float()  # (B, Hv, K, V), a copy
        out = torch.empty(batch, tokens, v_heads, v.shape[3], dtype=torch.float32, device=v.device)
        for t in range(tokens):
            state = state * decay[:, t, :, None, None]
            kt = kh[:, t]
            predicted = torch.einsum("bhkv,bhk->bhv", state, kt)
            delta = (vf[:, t] - predicted) * write[:, t, :, None]
            state = state + kt.unsqueeze(-1) * delta.unsqueeze(-2)
            out[:, t] = torch.einsum("bhkv,bhk->bhv", state, qh[:, t])

        final_state = initial_state.clone()
        final_state[slots] = state
        return {"out": out.to(torch.bfloat16), "final_state": final_state}
