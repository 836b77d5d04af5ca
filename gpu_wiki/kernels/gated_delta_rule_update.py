"""
+++
title = "Recurrent gated delta rule (decode/update): state columns split across programs, T steps in registers"
operator = "gated_delta_rule_update"
op_family = ["linear-attention"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["gated delta rule", "gated deltanet", "linear attention", "recurrent", "state", "softplus", "l2 norm", "sigmoid", "sequential scan", "qwen3-next", "state pool"]
sources = [
  "Yang, Kautz, Hatamizadeh, Gated Delta Networks: Improving Mamba2 with Delta Rule, ICLR 2025 — https://arxiv.org/abs/2412.06464",
  "Yang et al., Parallelizing Linear Transformers with the Delta Rule over Sequence Length, NeurIPS 2024 — https://arxiv.org/abs/2406.06484",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 17/17 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "12", "13", "14", "15", "16", "17"]
shapes_scored = 17
shapes_correct = 17
operator_score = 0.00477
median_time_ms = 0.919
median_dsl_share = 0.997
time_ms = { "0" = 0.00992, "1" = 0.242, "2" = 0.473, "3" = 0.986, "4" = 1.86, "5" = 3.68, "6" = 7.39, "7" = 14.6, "8" = 0.0081, "9" = 0.00957, "10" = 0.239, "12" = 0.241, "13" = 0.462, "14" = 0.919, "15" = 1.85, "16" = 3.29, "17" = 5.82 }
failures = {}
+++
Per (batch b, value head j), state S (K × V, fp32) from the pool slot initial_state_indices[b];
for t in order: S ← S·exp(γ_t) with γ_t = −exp(A_log[j])·softplus(a + dt_bias);
p = Sᵀk̂; δ = (v_t − p)·sigmoid(b_t); S ← S + k̂ δᵀ; o_t = Sᵀ(q̂·scale), with q̂, k̂ the
L2-normalised (÷ max(‖·‖, 1e-6)) vectors of the mapped q/k head. Outputs o (bf16) and the
pool with the updated slots (fp32).

Every column v of S evolves independently (p, δ, the update and the read-out are all
per-column), so the grid is (batch, value head, V / BLOCK_V): each program keeps a
[K, BLOCK_V] = [128, 32] slice of the state in registers for all T steps and never writes it
back until the end — the state is read and written once per call instead of once per token.
Per step a program loads q_t, k_t (128 each, shared by the 4 column programs through L2),
v_t's 32 columns and two scalars. The scan over T is inherently sequential; parallelism comes
from B·Hv·V/32 programs (64–128 here). The pool is copied once (clone) and the touched slots
are overwritten by the kernel.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gdr_update(
    alog_ptr,
    a_ptr,
    dtb_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    b_ptr,
    state_ptr,
    idx_ptr,
    out_ptr,
    final_ptr,
    T,
    HQ,
    HV,
    ratio,
    scale,
    beta,
    threshold,
    USE_L2: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    bi = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    cols = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    kk = tl.arange(0, K)
    qh = tl.minimum(j // ratio, HQ - 1)
    slot = tl.load(idx_ptr + bi).to(tl.int64)
    st_off = (slot * HV + j) * K * V + kk[:, None] * V + cols[None, :]
    S = tl.load(state_ptr + st_off)  # [K, BLOCK_V] fp32
    neg_a = -tl.exp(tl.load(alog_ptr + j))
    dt_bias = tl.load(dtb_ptr + j).to(tl.float32)
    for t in range(0, T):
        bt = bi * T + t
        z = (tl.load(a_ptr + bt * HV + j).to(tl.float32) + dt_bias) * beta
        softplus = tl.where(z <= threshold, tl.log(1.0 + tl.exp(z)) / beta, z / beta)
        decay = tl.exp(neg_a * softplus)
        write = tl.sigmoid(tl.load(b_ptr + bt * HV + j).to(tl.float32))
        q = tl.load(q_ptr + (bt * HQ + qh) * K + kk).to(tl.float32)
        k = tl.load(k_ptr + (bt * HQ + qh) * K + kk).to(tl.float32)
        if USE_L2:
            q = q / tl.maximum(tl.sqrt(tl.sum(q * q, axis=0)), 1e-6)
            k = k / tl.maximum(tl.sqrt(tl.sum(k * k, axis=0)), 1e-6)
        q = q * scale
        v = tl.load(v_ptr + (bt * HV + j) * V + cols).to(tl.float32)
        S = S * decay
        pred = tl.sum(S * k[:, None], axis=0)  # [BLOCK_V]
        delta = (v - pred) * write
        S = S + k[:, None] * delta[None, :]
        o = tl.sum(S * q[:, None], axis=0)
        tl.store(out_ptr + (bt * HV + j) * V + cols, o.to(out_ptr.dtype.element_ty))
    tl.store(final_ptr + st_off, S)


class Model(torch.nn.Module):
    def __init__(
        self,
        *,
        softplus_beta: float = 1.0,
        softplus_threshold: float = 20.0,
        scale: float | None = None,
        use_qk_l2norm: bool = True,
    ):
        super().__init__()
        self.softplus_beta, self.softplus_threshold = float(softplus_beta), float(softplus_threshold)
        self.scale, self.use_qk_l2norm = scale, bool(use_qk_l2norm)

    def forward(self, A_log, a, dt_bias, q, k, v, b, initial_state, initial_state_indices) -> dict[str, torch.Tensor]:
        B, T, HQ, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        scale = K**-0.5 if self.scale is None else float(self.scale)
        state = initial_state.float().contiguous()
        final_state = state.clone()
        out = torch.empty((B, T, HV, V), dtype=torch.bfloat16, device=v.device)
        block_v = min(32, V)
        _gdr_update[(B, HV, triton.cdiv(V, block_v))](
            A_log.float().contiguous(),
            a.contiguous(),
            dt_bias.contiguous(),
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            b.contiguous(),
            state,
            initial_state_indices,
            out,
            final_state,
            T,
            HQ,
            HV,
            max(HV // HQ, 1),
            scale,
            self.softplus_beta,
            self.softplus_threshold,
            USE_L2=self.use_qk_l2norm,
            K=K,
            V=V,
            BLOCK_V=block_v,
            num_warps=4,
        )
        return {"out": out, "final_state": final_state}
