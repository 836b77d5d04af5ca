"""chunk_gated_delta_rule_state: the state-propagation stage of chunked gated delta-rule linear
attention. Walks the chunks in order, emits the state at the start of every chunk and the
corrected values v_new = u - w * state, and writes the end state into a copy of the state pool.

Per batch b and value head j (key head min(j // r, Hk-1), r = max(Hv // Hk, 1)), with
St = initial_state[initial_state_indices[b], j] (K x V, fp32), for chunk c = rows
[cC, min(cC + C, T)) of length n (the last chunk may be shorter; no padding):
  h[b, c, j]  = bf16(St)                                   (state before this chunk)
  Vn          = U_c - W_c fp32(bf16(St))                   (fp32, n x V)
  v_new rows  = bf16(Vn)
  gamma       = G_c[n-1];  f_i = exp(gamma - G_c[i]) if gamma - G_c[i] <= 0 else 0  (literal sign test)
  Vs          = fp32(bf16(Vn * f))                         (scale rows, then round)
  St          = St * exp(gamma) + K_c^T Vs                 (fp32)
final_state = copy of initial_state with slot initial_state_indices[b] replaced by St.
The generator's gates are i.i.d. per position rather than cumulative sums, so the sign test
zeroes about half of each chunk's rows; that is the operator's defined behaviour here.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, chunk_size: int = 64):
        super().__init__()
        self.chunk_size = int(chunk_size)

    def forward(
        self,
        k: torch.Tensor,
        w: torch.Tensor,
        u: torch.Tensor,
        g: torch.Tensor,
        initial_state: torch.Tensor,
        initial_state_indices: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """k (B, T, Hk, K) bf16; w (B, T, Hv, K) bf16; u (B, T, Hv, V) bf16; g (B, T, Hv) fp32;
        initial_state (S, Hv, K, V) fp32; initial_state_indices (B,) int32
        -> h (B, NC, Hv, K, V) bf16, v_new (B, T, Hv, V) bf16, final_state (S, Hv, K, V) fp32."""
        batch, tokens, k_heads, key_dim = k.shape
        v_heads, value_dim = u.shape[2], u.shape[3]
        size = self.chunk_size
        chunks = -(-tokens // size)

        ratio = max(v_heads // k_heads, 1)
        head_map = torch.clamp(torch.arange(v_heads, device=k.device) // ratio, max=k_heads - 1)

        slots = initial_state_indices.long()
        state = initial_state[slots].float()  # (B, Hv, K, V), a copy
        h = torch.empty(batch, chunks, v_heads, key_dim, value_dim, dtype=torch.bfloat16, device=k.device)
        v_new = torch.empty(batch, tokens, v_heads, value_dim, dtype=torch.bfloat16, device=k.device)
        for c in range(chunks):
            rows = slice(c * size, min((c + 1) * size, tokens))
            kc = k[:, rows][:, :, head_map].float()  # (B, n, Hv, K)
            wc = w[:, rows].float()  # (B, n, Hv, K)
            uc = u[:, rows].float()  # (B, n, Hv, V)
            gc = g[:, rows].float()  # (B, n, Hv)

            state_bf16 = state.to(torch.bfloat16)
            h[:, c] = state_bf16
            corrected = uc - torch.einsum("bnhk,bhkv->bnhv", wc, state_bf16.float())
            v_new[:, rows] = corrected.to(torch.bfloat16)

            last = gc[:, -1]  # (B, Hv)
            gap = last.unsqueeze(1) - gc  # (B, n, Hv)
            row_factor = torch.where(gap <= 0, torch.exp(gap), torch.zeros_like(gap))
            scaled = (corrected * row_factor.unsqueeze(-1)).to(torch.bfloat16).float()
            state = state * torch.exp(last)[:, :, None, None]
            state = state + torch.einsum("bnhk,bnhv->bhkv", kc, scaled)

        final_state = initial_state.clone()
        final_state[slots] = state
        return {"h": h, "v_new": v_new, "final_state": final_state}
