"""
+++
title = "Fused MoE (bf16 SwiGLU experts): expert-sorted token blocks, two grouped GEMMs with fused epilogues"
operator = "fused_moe"
op_family = ["moe", "gemm"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["moe", "grouped gemm", "swiglu", "silu", "expert parallel", "token sorting", "align block size", "gather", "routing weights", "fp32 output", "device-side routing", "tl.sort", "tl.histogram", "dsl share"]
sources = [
  "Shazeer et al., Sparsely-Gated Mixture-of-Experts, ICLR 2017 — https://arxiv.org/abs/1701.06538",
  "Gale et al., MegaBlocks: Efficient Sparse Training with Mixture-of-Experts (block-sparse grouping of tokens by expert), MLSys 2023 — https://arxiv.org/abs/2211.15841",
  "Triton tutorial: Grouped GEMM — https://triton-lang.org/main/getting-started/tutorials/08-grouped-gemm.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 23/23 scored shapes correct"]
gpu_note = "shape 8 (decode, T=1, 128 experts): its CUDA-graph replay is inconclusive (the input refresh of every expert's weights, K = 2 sets, outweighs the 62 us forward), so the judge scores it at its plain burst's wall per call, 0.214 ms, not its 0.062 ms median (full-set judgement, H200 2026-12-02)"

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22"]
shapes_scored = 23
shapes_correct = 23
operator_score = 0.447
median_time_ms = 0.759
median_dsl_share = 1
time_ms = { "0" = 0.105, "1" = 0.082, "2" = 0.15, "3" = 0.238, "4" = 0.26, "5" = 0.447, "6" = 0.759, "7" = 1.45, "8" = 0.214, "9" = 0.746, "10" = 0.981, "11" = 1.61, "12" = 2.52, "13" = 3.99, "14" = 6.99, "15" = 0.504, "16" = 0.498, "17" = 0.667, "18" = 0.929, "19" = 1.79, "20" = 1.51, "21" = 2.83, "22" = 5.26 }
failures = {}
+++
out[t] = Σ_s topk_weights[t, s] · W2[e] (silu(W1g[e] x_t) ⊙ W1u[e] x_t), e = topk_ids[t, s]; out fp32.

Every step is a Triton kernel; forward allocates buffers and launches, nothing else (no torch
sort, bincount, cumsum, scatter or sum), and never reads a device value back.
1. Routing (three small kernels): `_count` histograms each 1024-pair chunk of topk_ids
   (`tl.histogram`); `_plan` (one program) pads each expert's count to a multiple of BM, scans
   the chunk histograms into a destination offset per (chunk, expert) and writes per BM-row
   block its expert and live-row count; `_scatter` sorts each chunk by (expert, index) with
   `tl.sort` and writes every pair to its slot. When all pairs fit one chunk,
   `_route_one_chunk` does the three steps in one launch. The grid is bounded by cdiv(T·k, BM) +
   min(E, T·k); blocks past the real total exit at once. With far fewer pairs than experts
   (decode: T·k ≤ E/4) routing is skipped: one block per pair reads its expert from topk_ids.
2. GEMM 1 (per block × I-tile): gathers the block's token rows of x, multiplies by the
   expert's gate and up rows (two accumulators sharing the x tile), applies SiLU(g)·u in the
   epilogue and writes the activation (bf16) per pair.
3. GEMM 2 (per block × D-tile): activation @ W2[e]ᵀ, scaled by the pair's routing weight in
   the epilogue, written in bf16 per pair.
4. `_sum_slots` adds each token's k slots in fp32 into out.
Both GEMMs run on a 1-D grid in grouped order: 8 consecutive blocks sweep all N-tiles together,
so their gathered rows and their expert's weight tiles come from L2 rather than HBM (with the
block index fastest, a wave would cover every block at one N-tile and re-read all rows per tile).

A token that picked the same expert twice is computed twice and summed (the reference merges
the weights first): equal up to rounding. The activation and the weighted slot outputs are
rounded to bf16 (the reference keeps fp32) — a relative error of ~2^-9 per term, far inside
the tolerance (5 % of |ref|, absolute term ≤ 5 % of the RMS), and it halves the traffic of the
per-pair buffers. Tiles by pairs per expert (BK 64; GEMM 1 has two accumulators, so its BN is
64 where GEMM 2's is 128): BM 16 for decode (many programs streaming the weights), BM 128 with
8 warps and 3 stages for mid sizes and prefill, BN1 128 for prefill, as the H200 tile run chose
(measurements/moe_kernel_tiles.py). The figures in [h200] are this version's.
"""

import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter multiplies bf16 tiles in tl.dot as raw integers (triton-lang/triton issue
# #11584): when interpreting, operands are widened to fp32 first (exact for bf16 products).
_WIDEN_DOT = os.environ.get("TRITON_INTERPRET") == "1"
CHUNK = 1024  # pairs per routing program
GROUP = 8  # blocks that sweep the N-tiles together (L2 reuse)


@triton.jit
def _mma(a, b, acc, WIDEN: tl.constexpr):
    if WIDEN:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _bins(ids_ptr, chunk, n_pairs, E, CH: tl.constexpr):
    """Expert of each pair of one chunk; ids outside [0, E) and the tail go to the dump bin E."""
    r = chunk * CH + tl.arange(0, CH)
    ids = tl.load(ids_ptr + r, mask=r < n_pairs, other=E)
    return tl.where((ids >= 0) & (ids < E), ids, E)


@triton.jit
def _count(ids_ptr, hist_ptr, n_pairs, E, CH: tl.constexpr, EP: tl.constexpr):
    chunk = tl.program_id(0)
    hist = tl.histogram(_bins(ids_ptr, chunk, n_pairs, E, CH), EP)
    tl.store(hist_ptr + chunk * EP + tl.arange(0, EP), hist)


@triton.jit
def _padded_runs(total, BM: tl.constexpr):
    """Start and end row of each expert's run, padded to a multiple of BM."""
    padded = (total + BM - 1) // BM * BM
    pad_end = tl.cumsum(padded, 0)
    return pad_end - padded, pad_end


@triton.jit
def _block_table(
    block_expert_ptr,
    block_live_ptr,
    total,
    pad_start,
    pad_end,
    n_blocks,
    E,
    BM: tl.constexpr,
    EP: tl.constexpr,
    BB: tl.constexpr,
):
    """Per BM-row block: its expert (-1 past the last run) and how many of its rows hold pairs."""
    experts = tl.arange(0, EP)
    real = experts < E
    for b0 in range(0, n_blocks, BB):
        b = b0 + tl.arange(0, BB)
        first_row = b * BM
        e = tl.sum(((pad_end[None, :] <= first_row[:, None]) & real[None, :]).to(tl.int32), axis=1)
        real_end = tl.sum(tl.where(experts[None, :] == e[:, None], (pad_start + total)[None, :], 0), axis=1)
        tl.store(block_expert_ptr + b, tl.where(e < E, e, -1), mask=b < n_blocks)
        tl.store(block_live_ptr + b, tl.minimum(real_end - first_row, BM), mask=b < n_blocks)


@triton.jit
def _place(bins, off_row_ptr, pair_ptr, chunk, E, CH: tl.constexpr):
    """Sort one chunk by (expert, index); sorted position + the chunk's offset for that expert is each
    pair's row."""
    idx = tl.arange(0, CH)
    key = tl.sort(bins * CH + idx)
    e, local = key // CH, key % CH
    tl.store(pair_ptr + tl.load(off_row_ptr + e) + idx, chunk * CH + local, mask=e < E)


@triton.jit
def _plan(
    hist_ptr,
    off_ptr,
    block_expert_ptr,
    block_live_ptr,
    n_chunks,
    n_blocks,
    E,
    BM: tl.constexpr,
    EP: tl.constexpr,
    GB: tl.constexpr,
    BB: tl.constexpr,
):
    """One program: per-expert padded runs, each chunk's destination offsets, the block table."""
    experts = tl.arange(0, EP)
    total = tl.zeros((EP,), dtype=tl.int32)
    for g0 in range(0, n_chunks, GB):
        g = g0 + tl.arange(0, GB)
        tile = tl.load(hist_ptr + g[:, None] * EP + experts[None, :], mask=g[:, None] < n_chunks, other=0)
        total += tl.sum(tile, axis=0)
    total = tl.where(experts < E, total, 0)
    pad_start, pad_end = _padded_runs(total, BM)
    running = tl.zeros((EP,), dtype=tl.int32)
    for g0 in range(0, n_chunks, GB):
        g = g0 + tl.arange(0, GB)
        ok = g[:, None] < n_chunks
        tile = tl.load(hist_ptr + g[:, None] * EP + experts[None, :], mask=ok, other=0)
        before = tl.cumsum(tile, 0) - tile + running[None, :]  # this expert's pairs in earlier chunks
        local_start = tl.cumsum(tile, 1) - tile  # where this expert starts in the chunk's sorted order
        tl.store(off_ptr + g[:, None] * EP + experts[None, :], pad_start[None, :] + before - local_start, mask=ok)
        running += tl.sum(tile, axis=0)
    _block_table(block_expert_ptr, block_live_ptr, total, pad_start, pad_end, n_blocks, E, BM, EP, BB)


@triton.jit
def _scatter(ids_ptr, off_ptr, pair_ptr, n_pairs, E, CH: tl.constexpr, EP: tl.constexpr):
    chunk = tl.program_id(0)
    _place(_bins(ids_ptr, chunk, n_pairs, E, CH), off_ptr + chunk * EP, pair_ptr, chunk, E, CH)


@triton.jit
def _route_one_chunk(
    ids_ptr,
    off_ptr,
    pair_ptr,
    block_expert_ptr,
    block_live_ptr,
    n_pairs,
    n_blocks,
    E,
    BM: tl.constexpr,
    CH: tl.constexpr,
    EP: tl.constexpr,
    BB: tl.constexpr,
):
    """All of routing in one program when every pair fits one chunk (decode and small batches):
    one launch instead of three."""
    experts = tl.arange(0, EP)
    bins = _bins(ids_ptr, 0, n_pairs, E, CH)
    hist = tl.histogram(bins, EP)
    total = tl.where(experts < E, hist, 0)
    pad_start, pad_end = _padded_runs(total, BM)
    tl.store(off_ptr + experts, pad_start - (tl.cumsum(hist, 0) - hist))
    _block_table(block_expert_ptr, block_live_ptr, total, pad_start, pad_end, n_blocks, E, BM, EP, BB)
    tl.debug_barrier()  # the offsets just stored are read back by other threads
    _place(bins, off_ptr, pair_ptr, 0, E, CH)


@triton.jit
def _block_rows(ids_ptr, pair_ptr, block_expert_ptr, block_live_ptr, blk, E, BM: tl.constexpr, DIRECT: tl.constexpr):
    """(expert, pair of each row, live rows) of one block; in DIRECT mode block = pair."""
    r = tl.arange(0, BM)
    if DIRECT:
        e = tl.load(ids_ptr + blk)
        e = tl.where((e >= 0) & (e < E), e, -1)
        live = r < 1
        pairs = tl.where(live, blk, 0)
    else:
        e = tl.load(block_expert_ptr + blk)
        live = r < tl.load(block_live_ptr + blk)
        pairs = tl.load(pair_ptr + blk * BM + r, mask=live, other=0)
    return e.to(tl.int64), pairs.to(tl.int64), live


@triton.jit
def _grouped_tile(n_blocks, n_tiles, GROUP: tl.constexpr):
    """(block, N-tile) of this program in grouped order: GROUP blocks sweep every N-tile together, so
    their gathered rows and the expert's weight tiles are re-read from L2, not HBM."""
    pid = tl.program_id(0)
    width = GROUP * n_tiles
    first = (pid // width) * GROUP
    size = tl.minimum(n_blocks - first, GROUP)
    return first + (pid % width) % size, (pid % width) // size


@triton.jit
def _gate_up(
    x_ptr,
    w1_ptr,
    ids_ptr,
    pair_ptr,
    block_expert_ptr,
    block_live_ptr,
    act_ptr,
    D,
    I,
    E,
    TOP_K,
    n_blocks,
    n_tiles,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    DIRECT: tl.constexpr,
    WIDEN: tl.constexpr,
    GROUP: tl.constexpr,
):
    blk, pid_n = _grouped_tile(n_blocks, n_tiles, GROUP)
    e, pairs, live = _block_rows(ids_ptr, pair_ptr, block_expert_ptr, block_live_ptr, blk, E, BM, DIRECT)
    if e >= 0:
        tokens = pairs // TOP_K
        rn = pid_n * BN + tl.arange(0, BN)
        n_ok = rn < I
        rk = tl.arange(0, BK)
        w_gate = w1_ptr + e * 2 * I * D + rn[:, None].to(tl.int64) * D
        w_up = w_gate + I * D
        g = tl.zeros((BM, BN), dtype=tl.float32)
        u = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, D, BK):
            k_ok = k0 + rk < D
            x = tl.load(x_ptr + tokens[:, None] * D + k0 + rk[None, :], mask=live[:, None] & k_ok[None, :], other=0.0)
            wg = tl.load(w_gate + k0 + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            wu = tl.load(w_up + k0 + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            g = _mma(x, tl.trans(wg), g, WIDEN)
            u = _mma(x, tl.trans(wu), u, WIDEN)
        act = g / (1.0 + tl.exp(-g)) * u
        tl.store(
            act_ptr + pairs[:, None] * I + rn[None, :],
            act.to(act_ptr.dtype.element_ty),
            mask=live[:, None] & n_ok[None, :],
        )


@triton.jit
def _down(
    act_ptr,
    w2_ptr,
    ids_ptr,
    pair_ptr,
    block_expert_ptr,
    block_live_ptr,
    weight_ptr,
    y_ptr,
    D,
    I,
    E,
    n_blocks,
    n_tiles,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    DIRECT: tl.constexpr,
    WIDEN: tl.constexpr,
    GROUP: tl.constexpr,
):
    blk, pid_n = _grouped_tile(n_blocks, n_tiles, GROUP)
    e, pairs, live = _block_rows(ids_ptr, pair_ptr, block_expert_ptr, block_live_ptr, blk, E, BM, DIRECT)
    if e >= 0:
        rn = pid_n * BN + tl.arange(0, BN)
        n_ok = rn < D
        rk = tl.arange(0, BK)
        w = w2_ptr + e * D * I + rn[:, None].to(tl.int64) * I
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, I, BK):
            k_ok = k0 + rk < I
            a = tl.load(act_ptr + pairs[:, None] * I + k0 + rk[None, :], mask=live[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(w + k0 + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            acc = _mma(a, tl.trans(b), acc, WIDEN)
        acc = acc * tl.load(weight_ptr + pairs, mask=live, other=0.0)[:, None]
        tl.store(
            y_ptr + pairs[:, None] * D + rn[None, :], acc.to(y_ptr.dtype.element_ty), mask=live[:, None] & n_ok[None, :]
        )


@triton.jit
def _sum_slots(y_ptr, ids_ptr, out_ptr, D, E, TOP_K: tl.constexpr, BD: tl.constexpr):
    t, pid_d = tl.program_id(0).to(tl.int64), tl.program_id(1)
    d = pid_d * BD + tl.arange(0, BD)
    d_ok = d < D
    acc = tl.zeros((BD,), dtype=tl.float32)
    for s in tl.static_range(TOP_K):
        e = tl.load(ids_ptr + t * TOP_K + s)
        if (e >= 0) & (e < E):
            acc += tl.load(y_ptr + (t * TOP_K + s) * D + d, mask=d_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * D + d, acc, mask=d_ok)


def _tiles(n_pairs: int, n_experts: int) -> dict:
    """Tile rule on pairs per expert (shape arithmetic only, no device read): decode wants many small
    programs streaming the weights, prefill wgmma-sized tiles. GEMM 1 keeps two accumulators (gate,
    up), so its BN is half of GEMM 2's: the same registers as one BM x 128 tile. Chosen on the H200
    (measurements/moe_kernel_tiles.py, 2026-12-01): BM 128 beat BM 64 by 4-16 % on the mid shapes;
    BN1 128 beat 64 by 10 % on the largest prefill."""
    per_expert = n_pairs / n_experts
    if per_expert <= 16:
        return {"BM": 16, "BN1": 64, "BN2": 128, "BK": 64, "num_warps": 4, "num_stages": 4}
    if per_expert <= 512:
        return {"BM": 128, "BN1": 64, "BN2": 128, "BK": 64, "num_warps": 8, "num_stages": 3}
    return {"BM": 128, "BN1": 128, "BN2": 128, "BK": 64, "num_warps": 8, "num_stages": 3}


def route(topk_ids: torch.Tensor, n_experts: int, bm: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pair_ids, block_expert, block_live): pairs grouped by expert in bm-row blocks, on the device."""
    ids = topk_ids.reshape(-1)
    n_pairs, dev = ids.numel(), ids.device
    n_chunks = triton.cdiv(n_pairs, CHUNK)
    n_blocks = triton.cdiv(n_pairs, bm) + min(n_experts, n_pairs)
    ep = triton.next_power_of_2(n_experts + 1)
    off = torch.empty((n_chunks, ep), dtype=torch.int32, device=dev)
    block_expert = torch.empty((n_blocks,), dtype=torch.int32, device=dev)
    block_live = torch.empty((n_blocks,), dtype=torch.int32, device=dev)
    pair_ids = torch.empty((n_blocks * bm,), dtype=torch.int32, device=dev)
    bb = max(1, 8192 // ep)
    if n_chunks == 1:
        _route_one_chunk[(1,)](
            ids,
            off,
            pair_ids,
            block_expert,
            block_live,
            n_pairs,
            n_blocks,
            n_experts,
            BM=bm,
            CH=CHUNK,
            EP=ep,
            BB=bb,
            num_warps=8,
        )
        return pair_ids, block_expert, block_live
    hist = torch.empty((n_chunks, ep), dtype=torch.int32, device=dev)
    _count[(n_chunks,)](ids, hist, n_pairs, n_experts, CH=CHUNK, EP=ep)
    _plan[(1,)](
        hist,
        off,
        block_expert,
        block_live,
        n_chunks,
        n_blocks,
        n_experts,
        BM=bm,
        EP=ep,
        GB=max(1, 4096 // ep),
        BB=bb,
        num_warps=8,
    )
    _scatter[(n_chunks,)](ids, off, pair_ids, n_pairs, n_experts, CH=CHUNK, EP=ep, num_warps=8)
    return pair_ids, block_expert, block_live


class Model(torch.nn.Module):
    def __init__(self, *, num_experts: int, intermediate_size: int, top_k: int):
        super().__init__()
        self.num_experts, self.intermediate_size, self.top_k = int(num_experts), int(intermediate_size), int(top_k)
        self.tiles: dict | None = None  # a fixed tile config instead of the rule (tile measurements)

    def forward(
        self,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
    ) -> torch.Tensor:
        x, w1, w2 = hidden_states.contiguous(), w1.contiguous(), w2.contiguous()
        ids = topk_ids.to(torch.int32).contiguous()
        weights = topk_weights.float().contiguous().reshape(-1)
        T, D = x.shape
        E, I = w1.shape[0], w1.shape[1] // 2
        k = ids.shape[1]
        n_pairs, dev = T * k, x.device
        cfg = self.tiles or _tiles(n_pairs, E)
        bm = cfg["BM"]
        direct = n_pairs * 4 <= E
        if direct:
            pair_ids = block_expert = block_live = ids  # unused in DIRECT mode
            n_blocks = n_pairs
        else:
            pair_ids, block_expert, block_live = route(ids, E, bm)
            n_blocks = block_expert.numel()
        act = torch.empty((n_pairs, I), dtype=x.dtype, device=dev)
        y = torch.empty((n_pairs, D), dtype=x.dtype, device=dev)
        launch = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
        tiles1, tiles2 = triton.cdiv(I, cfg["BN1"]), triton.cdiv(D, cfg["BN2"])
        _gate_up[(n_blocks * tiles1,)](
            x,
            w1,
            ids,
            pair_ids,
            block_expert,
            block_live,
            act,
            D,
            I,
            E,
            k,
            n_blocks,
            tiles1,
            BM=bm,
            BN=cfg["BN1"],
            BK=cfg["BK"],
            DIRECT=direct,
            WIDEN=_WIDEN_DOT,
            GROUP=GROUP,
            **launch,
        )
        _down[(n_blocks * tiles2,)](
            act,
            w2,
            ids,
            pair_ids,
            block_expert,
            block_live,
            weights,
            y,
            D,
            I,
            E,
            n_blocks,
            tiles2,
            BM=bm,
            BN=cfg["BN2"],
            BK=cfg["BK"],
            DIRECT=direct,
            WIDEN=_WIDEN_DOT,
            GROUP=GROUP,
            **launch,
        )
        out = torch.empty((T, D), dtype=torch.float32, device=dev)
        bd = min(1024, triton.next_power_of_2(D))
        _sum_slots[(T, triton.cdiv(D, bd))](y, ids, out, D, E, TOP_K=k, BD=bd, num_warps=4)
        return out
