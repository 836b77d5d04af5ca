"""Inputs for mla_decode_attention.

Draw order: q (B, Hn, L + Rr) bf16 N(0, 1); kv_cache (B * ctx, 1, L + Rr) bf16 N(0, 1) with the
sequences stored back to back. seq_lens (B,) int32 = ctx_len for every sequence.
"""

import torch


def make_inputs(
    *,
    seed: int,
    device="cpu",
    batch_size: int,
    ctx_len: int,
    nhead: int,
    kv_lora_rank: int = 512,
    qk_rope_head_dim: int = 64,
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    width = kv_lora_rank + qk_rope_head_dim
    q = torch.randn(batch_size, nhead, width, generator=gen, dtype=torch.bfloat16, device=device)
    kv_cache = torch.randn(batch_size * ctx_len, 1, width, generator=gen, dtype=torch.bfloat16, device=device)
    seq_lens = torch.full((batch_size,), ctx_len, dtype=torch.int32, device=device)
    return {"q": q, "kv_cache": kv_cache, "seq_lens": seq_lens}
