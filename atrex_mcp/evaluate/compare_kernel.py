"""The allclose, exact and fp8 code rules of atrex_mcp.evaluate.compare in one pass over both outputs.

Why: on the H200 the torch rule cost 33-59 ms a call on large outputs (block_scaled_mm: 13.8 s
over 235 calls; chunk_gated_delta_rule_state: 8.2 s over 246), and the judge compares about ten
outputs a shape (correctness seeds, timed-output checks, graph-replay checks). Per chunk it made
float64 copies of both sides and ran some fifteen passes over them (finiteness, agreement of
non-finite values, |c − r|, the bound, masks, the relative error, reductions), after a pass of
its own over the reference for the RMS. Here each element of the reference and the candidate is
read from memory once, in its own dtype, and the rule's arithmetic is done in float64 registers.
The fp8 rule cost 0.67 s a call on a quantiser's fp8 output of up to ~6 GiB (int32 code indices,
float and float64 copies of both sides and two tallies per chunk); here it reads each code once.

What it guarantees: the figures the float64 torch rule gives (compare._Tally), bit for bit —
the mismatch and non-finite mismatch counts, max |c − r| over elements finite on both sides,
max |c − r| / |r| over those with r ≠ 0, and the first bad element's flat index:

* both elements are converted to float64 (exactly from the floating dtypes; an integer past
  2^53 rounds to nearest, as torch's `.to(float64)` rounds it), and the bound is
  `|c − r| <= rtol·|r| + atol` with the product rounded before the sum, as the torch rule's
  `refabs.mul(rtol).add_(atol)`; the kernels are compiled without floating-point contraction
  (`enable_fp_fusion=False`, so `ptxas --fmad=false`): a fused multiply-add rounds once and
  would move an element lying on the bound to the other side;
* the quotient is IEEE float64 division (round to nearest); counts are exact int64 sums and the
  maxima are of non-negative floats, taken as int64 atomics on their bits (ordered as the
  floats are), so the order in which programs finish changes nothing;
* non-finite agreement: both NaN, or both the same infinity (compare._nonfinite_agree); the
  exact rule compares the elements in their own dtype (int64 beyond 2^53 included);
* fp8 codes are read as bytes and decoded from their format's definition (sign, exponent,
  mantissa, which codes are NaN or inf: each is a small integer times a power of two, exact in
  float64, as torch's `.to(float64)`); the code's signed position on the number line is
  compare._code_index's. One pass keeps the figures of both of the rule's tallies (every code
  off the reference's bad / only far ones bad, NaN disagreement bad in both and their
  non-finite count) and the count of near codes, from which compare picks the tally.

The RMS pre-pass sums the squares of the reference's finite values in blocks of RMS_BLOCK by the
same pairwise tree as compare._block_sums (element j plus element j + half, halving the width;
each level a sum over a size-2 axis, one addition), so the block sums are the torch path's bit
for bit and the caller adds them exactly (math.fsum) as it does.

Each rule runs on CUDA tensors (CPU ones under TRITON_INTERPRET=1, for the tests); the figures
of a whole output accumulate on the device and are read back once.
"""

from __future__ import annotations

import contextlib
import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any, cast

import torch
import triton
import triton.language as tl

from atrex_mcp.evaluate.compare_figures import ONE_PASS_DTYPES, RMS_BLOCK, CodeFigures, Figures, Rule

BLOCK = 2048  # elements per program of the judging kernel
NUM_WARPS = 8
LAUNCH = {"num_warps": NUM_WARPS, "enable_fp_fusion": False}  # no contraction: every product rounded on its own
LEVELS = RMS_BLOCK.bit_length() - 1  # the pairwise tree's depth
_INF = tl.constexpr(math.inf)
_NO_INDEX = (1 << 63) - 1  # the first-bad slot before any bad element
_NONE = tl.constexpr(_NO_INDEX)  # as a kernel may read it

# fp8 dtype -> (mantissa bits, exponent bias, which codes are not finite): the formats' definitions,
# as torch decodes them
_FP8_FORMATS = {
    torch.float8_e4m3fn: (3, 7, "nan_all_ones"),  # NaN 0x7F and 0xFF; no inf
    torch.float8_e4m3fnuz: (3, 8, "nan_negative_zero"),  # NaN 0x80 alone; no inf, no -0
    torch.float8_e5m2: (2, 15, "ieee"),  # ±inf 0x7C/0xFC, NaN the rest of the top exponent
    torch.float8_e5m2fnuz: (2, 16, "nan_negative_zero"),
}


@triton.jit
def _pairwise_sum(x, WIDTH: tl.constexpr, LEVELS: tl.constexpr):
    """compare._block_sums' tree over one block: x[j] + x[j + half] until one value is left."""
    for level in tl.static_range(LEVELS):
        x = tl.sum(tl.reshape(x, (2, WIDTH >> (level + 1))), axis=0)
    return tl.sum(x, axis=0)


@triton.jit
def _load(ptr, index, n, full):
    """ptr[index], 0 past n. A full block loads without a mask, so in wide vectors whatever n is."""
    if full:
        x = tl.load(ptr + index)
    else:
        x = tl.load(ptr + index, mask=index < n, other=0)
    return x


@triton.jit
def _square_sums(ref_ptr, sums_ptr, counts_ptr, n, BLOCK: tl.constexpr, LEVELS: tl.constexpr):
    """Per block of BLOCK elements: the sum of squares of the finite values and their count."""
    block = tl.program_id(0).to(tl.int64)
    index = block * BLOCK + tl.arange(0, BLOCK)
    inside = index < n
    r = _load(ref_ptr, index, n, (block + 1) * BLOCK <= n).to(tl.float64)  # the padding adds 0, as torch's pad
    finite = tl.abs(r) < _INF
    kept = tl.where(finite, r, 0.0)
    tl.store(sums_ptr + block, _pairwise_sum(kept * kept, BLOCK, LEVELS))
    tl.store(counts_ptr + block, tl.sum((finite & inside).to(tl.int32), axis=0))


@triton.jit
def _judge(ref_ptr, cand_ptr, state_ptr, n, offset, EXACT: tl.constexpr, BLOCK: tl.constexpr):
    """One block of a chunk `n` elements long starting at flat index `offset` of the output:
    its figures merged by atomics into `state`, int64: max |c − r| and max rel as float64 bits,
    mismatches, non-finite mismatches, the first bad flat index; then atol and rtol as bits."""
    start = tl.program_id(0).to(tl.int64) * BLOCK
    local = start + tl.arange(0, BLOCK)
    inside = local < n
    full = start + BLOCK <= n
    r, c = _load(ref_ptr, local, n, full), _load(cand_ptr, local, n, full)
    r64, c64 = r.to(tl.float64), c.to(tl.float64)
    finite = (tl.abs(r64) < _INF) & (tl.abs(c64) < _INF)
    rf, cf = tl.where(finite, r64, 0.0), tl.where(finite, c64, 0.0)  # where not both finite the error is 0
    diff = tl.abs(cf - rf)
    refabs = tl.abs(rf)
    if EXACT:
        bad = (r != c) & inside
        nonfinite_bad = tl.zeros([BLOCK], dtype=tl.int1)
    else:
        atol = tl.load(state_ptr + 5).to(tl.float64, bitcast=True)
        rtol = tl.load(state_ptr + 6).to(tl.float64, bitcast=True)
        within = diff <= refabs * rtol + atol  # two roundings: no contraction (enable_fp_fusion=False)
        agree = ((r64 != r64) & (c64 != c64)) | ((tl.abs(r64) == _INF) & (r64 == c64))
        bad = ~((finite & within) | agree) & inside
        nonfinite_bad = bad & ~finite
    divides = refabs > 0
    rel = tl.where(divides, diff / tl.where(divides, refabs, 1.0), 0.0)
    # Both maxima are >= +0.0, whose float64 bits order as int64 do. The state only grows, so a
    # block whose maximum is no larger than what it reads there skips the atomic (most do).
    max_abs = tl.max(diff, axis=0).to(tl.int64, bitcast=True)
    max_rel = tl.max(rel, axis=0).to(tl.int64, bitcast=True)
    tl.atomic_max(state_ptr + 0, max_abs, mask=max_abs > tl.load(state_ptr + 0), sem="relaxed")
    tl.atomic_max(state_ptr + 1, max_rel, mask=max_rel > tl.load(state_ptr + 1), sem="relaxed")
    count = tl.sum(bad.to(tl.int32), axis=0).to(tl.int64)
    some = count > 0
    tl.atomic_add(state_ptr + 2, count, mask=some, sem="relaxed")
    tl.atomic_add(state_ptr + 3, tl.sum(nonfinite_bad.to(tl.int32), axis=0).to(tl.int64), mask=some, sem="relaxed")
    first = tl.min(tl.where(bad, local + offset, _NONE), axis=0)
    tl.atomic_min(state_ptr + 4, first, mask=some, sem="relaxed")  # relaxed: only atomicity is needed


@triton.jit
def _fp8_decode(code, MANTISSA: tl.constexpr, BIAS: tl.constexpr, SPECIALS: tl.constexpr):
    """fp8 codes (int32, 0-255) -> (the value in float64, exactly, where finite and 0 elsewhere;
    the signed position on the number line, compare._code_index's; NaN; finite)."""
    magnitude = code & 0x7F
    negative = code >= 0x80
    index = tl.where(negative, -magnitude, magnitude)
    if SPECIALS == "nan_all_ones":
        nan = magnitude == 0x7F
        finite = ~nan
    elif SPECIALS == "nan_negative_zero":
        nan = code == 0x80
        finite = ~nan
    else:  # "ieee": the top exponent is inf (mantissa 0) or NaN
        nan = magnitude > 0x7C
        finite = magnitude < 0x7C
    exponent = magnitude >> MANTISSA
    normal = exponent > 0
    significand = (magnitude & ((1 << MANTISSA) - 1)) + tl.where(normal, 1 << MANTISSA, 0)
    # ±significand · 2^(max(exponent, 1) − bias − mantissa bits): a small integer times a signed
    # power of two built from its float64 bits, so exact, and −0.0 for the negative zero code (a
    # negation after the product compiles to 0 − x on the GPU, which gives +0.0)
    power = tl.where(normal, exponent, 1) + (1023 - BIAS - MANTISSA)
    sign = negative.to(tl.int64) << 63
    scale = ((power.to(tl.int64) << 52) | sign).to(tl.float64, bitcast=True)
    value = significand.to(tl.float64) * scale
    return tl.where(finite, value, 0.0), index, nan, finite


@triton.jit
def _judge_codes(
    ref_ptr,
    cand_ptr,
    state_ptr,
    n,
    offset,
    max_steps,
    MANTISSA: tl.constexpr,
    BIAS: tl.constexpr,
    SPECIALS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The fp8 rule (compare._compare_fp8) on one block of a chunk of fp8 codes read as bytes:
    its figures merged by atomics into `state`, int64: max |c − r| and max rel as float64 bits,
    the every-off tally's mismatches, the NaN disagreements (both tallies' non-finite
    mismatches), the every-off tally's first bad flat index, the far-only tally's mismatches
    and first bad flat index, the near codes (off by at most `max_steps`)."""
    start = tl.program_id(0).to(tl.int64) * BLOCK
    local = start + tl.arange(0, BLOCK)
    full = start + BLOCK <= n
    # past n both codes are 0, which is +0 in every format: no mismatch and no error there
    r = _load(ref_ptr, local, n, full).to(tl.int32)
    c = _load(cand_ptr, local, n, full).to(tl.int32)
    rv, ri, rnan, rfinite = _fp8_decode(r, MANTISSA, BIAS, SPECIALS)
    cv, ci, cnan, cfinite = _fp8_decode(c, MANTISSA, BIAS, SPECIALS)
    steps = tl.abs(ri - ci)
    nan_disagree = rnan != cnan
    off = (steps > 0) & ~rnan & ~cnan  # a different code, neither of them NaN
    far = off & (steps > max_steps)
    diff = tl.where(rfinite & cfinite, tl.abs(cv - rv), 0.0)  # exact: both values are short in float64
    refabs = tl.abs(rv)  # 0 where r is not finite
    divides = refabs > 0
    rel = tl.where(divides, diff / tl.where(divides, refabs, 1.0), 0.0)
    max_abs = tl.max(diff, axis=0).to(tl.int64, bitcast=True)  # >= +0.0: the bits order as the floats
    max_rel = tl.max(rel, axis=0).to(tl.int64, bitcast=True)
    tl.atomic_max(state_ptr + 0, max_abs, mask=max_abs > tl.load(state_ptr + 0), sem="relaxed")
    tl.atomic_max(state_ptr + 1, max_rel, mask=max_rel > tl.load(state_ptr + 1), sem="relaxed")
    # each count and first index merged only where the block has some (most blocks have none)
    every_bad = off | nan_disagree
    every_count = tl.sum(every_bad.to(tl.int32), axis=0).to(tl.int64)
    tl.atomic_add(state_ptr + 2, every_count, mask=every_count > 0, sem="relaxed")
    nan_count = tl.sum(nan_disagree.to(tl.int32), axis=0).to(tl.int64)
    tl.atomic_add(state_ptr + 3, nan_count, mask=nan_count > 0, sem="relaxed")
    every_first = tl.min(tl.where(every_bad, local + offset, _NONE), axis=0)
    tl.atomic_min(state_ptr + 4, every_first, mask=every_count > 0, sem="relaxed")
    far_bad = far | nan_disagree
    far_count = tl.sum(far_bad.to(tl.int32), axis=0).to(tl.int64)
    tl.atomic_add(state_ptr + 5, far_count, mask=far_count > 0, sem="relaxed")
    far_first = tl.min(tl.where(far_bad, local + offset, _NONE), axis=0)
    tl.atomic_min(state_ptr + 6, far_first, mask=far_count > 0, sem="relaxed")
    near_count = tl.sum((off & ~far).to(tl.int32), axis=0).to(tl.int64)
    tl.atomic_add(state_ptr + 7, near_count, mask=near_count > 0, sem="relaxed")


def _check_device(t: torch.Tensor) -> None:
    if t.device.type != "cuda" and isinstance(_judge, triton.runtime.JITFunction):
        raise ValueError("the one-pass comparison runs on CUDA tensors (CPU ones under TRITON_INTERPRET=1)")


def _on(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """A launch on the tensors' GPU, whichever is current (CPU tensors: the interpreter)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _bits(value: float) -> int:
    return struct.unpack("<q", struct.pack("<d", value))[0]


def _float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def square_sums(ref: torch.Tensor) -> tuple[Sequence[float], int]:
    """(sums of squares of the finite values of each RMS_BLOCK-element block of ref's flattened
    elements, the last block zero-padded; how many values are finite): compare._block_sums'
    figures from one read of the reference and one read-back. The sums come as a view of the
    host copy's float64s (math.fsum reads one in a third of the time a list of them takes)."""
    _check_device(ref)
    if ref.dtype not in ONE_PASS_DTYPES["allclose"]:
        raise ValueError(f"the one-pass RMS does not take {ref.dtype}")
    flat = ref.reshape(-1)
    blocks = triton.cdiv(flat.numel(), RMS_BLOCK)
    if blocks == 0:
        return (), 0
    sums = torch.empty(blocks, dtype=torch.float64, device=flat.device)
    counts = torch.empty(blocks, dtype=torch.int32, device=flat.device)
    with _on(flat.device):
        _square_sums[(blocks,)](flat, sums, counts, flat.numel(), BLOCK=RMS_BLOCK, LEVELS=LEVELS, **LAUNCH)
    values = torch.cat([sums, counts.sum(dtype=torch.int64).to(torch.float64).view(1)]).cpu().numpy()
    return cast(Sequence[float], values[:-1].data), int(values[-1])  # a memoryview; the count < 2^53: exact


def _check_slices(rule: Rule, r: torch.Tensor, c: torch.Tensor) -> None:
    if r.dtype != c.dtype or r.device != c.device or not (r.is_contiguous() and c.is_contiguous()):
        raise ValueError("the one-pass comparison takes contiguous slices of one dtype on one device")
    if r.dtype not in ONE_PASS_DTYPES[rule]:
        raise ValueError(f"the one-pass {rule} rule does not take {r.dtype}")


def judge_chunks(
    chunks: Iterable[tuple[int, tuple[torch.Tensor, ...]]], *, exact: bool, atol: float = 0.0, rtol: float = 0.0
) -> Figures:
    """The figures of one output judged chunk by chunk: `chunks` yields (flat offset, (ref, cand))
    with both slices flat, contiguous, on one device and of one dtype (compare._chunks). The
    allclose rule with `atol` and `rtol`, or the exact rule. One launch a chunk, one read-back."""
    state: torch.Tensor | None = None
    for offset, (r, c) in chunks:
        if state is None:
            _check_device(r)
            state = torch.tensor([0, 0, 0, 0, _NO_INDEX, _bits(atol), _bits(rtol)], dtype=torch.int64, device=r.device)
        _check_slices("exact" if exact else "allclose", r, c)
        if r.dtype == torch.bool:  # as bytes: 0 and 1, the values torch's float64 copy holds
            r, c = r.view(torch.uint8), c.view(torch.uint8)
        with _on(r.device):
            _judge[(triton.cdiv(r.numel(), BLOCK),)](r, c, state, r.numel(), offset, EXACT=exact, BLOCK=BLOCK, **LAUNCH)
    if state is None:
        return Figures()
    return _figures(*state[:5].tolist())


def _figures(abs_bits: int, rel_bits: int, mismatches: int, nonfinite: int, first: int) -> Figures:
    """Figures from a kernel's state words (the largest errors as float bits, _NO_INDEX: none)."""
    return Figures(
        max_abs=_float(abs_bits),
        max_rel=_float(rel_bits),
        mismatches=mismatches,
        nonfinite_mismatches=nonfinite,
        first=None if first == _NO_INDEX else first,
    )


def judge_codes(chunks: Iterable[tuple[int, tuple[torch.Tensor, ...]]], *, max_steps: int) -> CodeFigures:
    """The fp8 rule's figures of one output judged chunk by chunk (`chunks` as judge_chunks'):
    both tallies and the near codes, codes more than `max_steps` apart being far. One launch a
    chunk, one read-back."""
    state: torch.Tensor | None = None
    for offset, (r, c) in chunks:
        if state is None:
            _check_device(r)
            state = torch.tensor([0, 0, 0, 0, _NO_INDEX, 0, _NO_INDEX, 0], dtype=torch.int64, device=r.device)
        _check_slices("fp8_codes", r, c)
        mantissa, bias, specials = _FP8_FORMATS[r.dtype]
        with _on(r.device):
            _judge_codes[(triton.cdiv(r.numel(), BLOCK),)](
                r.view(torch.uint8),
                c.view(torch.uint8),
                state,
                r.numel(),
                offset,
                max_steps,
                MANTISSA=mantissa,
                BIAS=bias,
                SPECIALS=specials,
                BLOCK=BLOCK,
                **LAUNCH,
            )
    if state is None:
        return CodeFigures()
    abs_bits, rel_bits, every_off, nan_disagree, every_first, far_only, far_first, near = state.tolist()
    return CodeFigures(
        every_off=_figures(abs_bits, rel_bits, every_off, nan_disagree, every_first),
        far_only=_figures(abs_bits, rel_bits, far_only, nan_disagree, far_first),
        near=near,
    )
