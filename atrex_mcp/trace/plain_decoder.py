"""A small decoder written the way Hugging Face models are, traced prefill + decode: the workload
behind a user's profiler trace when they serve with plain PyTorch (or torch.compile it).

Per layer: RMSNorm (`F.rms_norm` before attention, the hand-written LlamaRMSNorm after it), q/k/v
projections, rotary embedding from cos/sin (`q * cos + rotate_half(q) * sin`), a static KV cache
written with `index_copy_`, `F.scaled_dot_product_attention` over (B, H, T, D) (causal over the
prompt in prefill; one query against the cache in decode, GQA through `enable_gqa`), the output
projection, and the MLP `down(F.silu(gate(h)) * up(h))`. Embedding, final norm and LM head
around the layers. Used by the tests (tiny, on CPU) and by the GPU bench (H200 sizes).
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function


@dataclass(frozen=True)
class DecoderConfig:
    """Model and workload sizes (defaults: a Llama-style 4096-hidden model, a few layers)."""

    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    intermediate: int = 14336
    layers: int = 2
    vocab: int = 32000
    batch: int = 4
    prompt: int = 512
    decode_steps: int = 4
    eps: float = 1e-6
    dtype: torch.dtype = torch.bfloat16

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def max_len(self) -> int:
        return self.prompt + self.decode_steps


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaRMSNorm(nn.Module):
    """The hand-written RMSNorm of Hugging Face's Llama (upcast, mean of squares, rsqrt, weight)."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.head_dim
        self.input_norm = nn.Parameter(torch.ones(cfg.hidden))
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.heads * d, cfg.hidden, bias=False)
        self.post_norm = LlamaRMSNorm(cfg.hidden, cfg.eps)
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        positions: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        end: int,
    ) -> torch.Tensor:
        cfg, (b, t, _) = self.cfg, x.shape
        h = F.rms_norm(x, (cfg.hidden,), self.input_norm, cfg.eps)
        q = self.q_proj(h).view(b, t, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k_cache.index_copy_(2, positions, k)
        v_cache.index_copy_(2, positions, v)
        if t > 1:  # prefill of an empty cache: causal attention over the prompt itself
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # decode: one query against everything cached so far
            out = F.scaled_dot_product_attention(q, k_cache[:, :, :end], v_cache[:, :, :end], enable_gqa=True)
        x = x + self.o_proj(out.transpose(1, 2).reshape(b, t, cfg.heads * cfg.head_dim))
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class PlainDecoder(nn.Module):
    """Embedding, layers with a static KV cache, final norm, LM head."""

    cos_table: torch.Tensor  # buffers, registered in __init__
    sin_table: torch.Tensor

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = LlamaRMSNorm(cfg.hidden, cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
        angles = torch.outer(torch.arange(cfg.max_len).float(), inv_freq)
        self.register_buffer("cos_table", torch.cat((angles, angles), -1).cos(), persistent=False)
        self.register_buffer("sin_table", torch.cat((angles, angles), -1).sin(), persistent=False)
        shape = (cfg.batch, cfg.kv_heads, cfg.max_len, cfg.head_dim)
        for i in range(cfg.layers):
            self.register_buffer(f"k_cache{i}", torch.zeros(shape), persistent=False)
            self.register_buffer(f"v_cache{i}", torch.zeros(shape), persistent=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, end: int) -> torch.Tensor:
        x = self.embed(tokens)
        cos = self.cos_table[positions].to(x.dtype).expand(tokens.shape[0], -1, -1)
        sin = self.sin_table[positions].to(x.dtype).expand(tokens.shape[0], -1, -1)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, positions, getattr(self, f"k_cache{i}"), getattr(self, f"v_cache{i}"), end)
        return self.lm_head(self.norm(x[:, -1:]))


def build(cfg: DecoderConfig, device: str, seed: int = 0) -> PlainDecoder:
    torch.manual_seed(seed)
    with torch.device(device):
        model = PlainDecoder(cfg)
    return model.to(dtype=cfg.dtype).eval()


def generate(model: nn.Module | Callable[..., Any], cfg: DecoderConfig, device: str, annotate: bool = True) -> None:
    """One prefill of `prompt` tokens, then `decode_steps` single-token steps (greedy)."""
    tokens = torch.randint(
        0, cfg.vocab, (cfg.batch, cfg.prompt), device=device, generator=torch.Generator(device=device).manual_seed(0)
    )

    def step(name: str, toks: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + toks.shape[1], device=device)
        if not annotate:
            return model(toks, positions, start + toks.shape[1])
        with record_function(name):
            return model(toks, positions, start + toks.shape[1])

    with torch.inference_mode():
        logits = step("prefill", tokens, 0)
        for i in range(cfg.decode_steps):
            logits = step(f"decode_{i}", logits.argmax(-1), cfg.prompt + i)
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def record(
    model: nn.Module | Callable[..., Any],
    cfg: DecoderConfig,
    device: str,
    out: Path,
    *,
    warmup: int = 1,
    annotate: bool = True,
) -> Path:
    """Warm up (compiles, autotunes) unprofiled, then profile one prefill + decode with
    record_shapes=True and write the Chrome trace (gzipped when `out` ends in .gz)."""
    for _ in range(warmup):
        generate(model, cfg, device, annotate)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities, record_shapes=True) as prof:
        generate(model, cfg, device, annotate)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plain = out.with_suffix("") if out.suffix == ".gz" else out
    prof.export_chrome_trace(str(plain))
    if plain != out:
        with open(plain, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        plain.unlink()
    return out
