"""The graph burst's input refresh as one fused elementwise pass (sandbox.graph_burst).

    out[j] = base[j] × factor(seed, start + j),   factor in [low, high]

`factor` is a counter-based hash of the seed and of the element's global index (its position in
the flat buffer of all K input sets): no generator state, so one launch reads `base` and writes
`out` once (two passes over the bytes, where a generator's draw into the buffer and a multiply
were four), and any slice of the K sets can be rebuilt on its own by passing its first index as
`start` (the judge rebuilds one set, not all K). The worker and the judge run this same kernel on
the same GPU, so the same element gets the same bits.

The hash, on 32-bit words (mix: lowbias32, a murmur-style finaliser with full avalanche; G, M
constants below; the seed's low and high words s_lo, s_hi; the index's g_lo, g_hi):

    key = mix(s_lo ^ mix(s_hi + G))          k1 = mix(key ^ mix(g_hi + G))      k2 = mix(k1 + G)
    h = mix((g_lo ^ k1) · M + k2)            factor = low + (high − low) · (float(0x3F800000 | h >> 9) − 1)

The keys are computed once per program (a block never spans two high words unless it starts
unaligned, and then takes the next word's keys past the crossing), so each element costs one
finaliser. Indices past 2^32 get keys of their own (no repeat every 2^32 elements), and two
seeds' factors are not a shift or an XOR of each other. The top 23 bits of h are the mantissa of
a float in [1, 2), mapped onto [low, high] by one multiply-add in fp32 (exact for a power-of-two
width). The product is formed in fp32 (fp64 for fp64 inputs) and rounded once to the input's
dtype. Triton's interpreter (CPU) truncates fp32 to bf16 where a GPU rounds to nearest even: bf16
bits differ between the two, never between the worker and the judge of one machine.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 4096  # elements per program; a power of two, so an aligned block never straddles 2^32
NUM_WARPS = 8
GOLDEN = 0x9E3779B9  # 2^32 / φ: separates the keys' inputs
MULTIPLIER = 0x2C1B3C6D  # odd: the per-element multiply is a bijection of the low word
_GOLDEN, _MULTIPLIER = tl.constexpr(GOLDEN), tl.constexpr(MULTIPLIER)  # as a kernel may read them


def _words(value: int) -> tuple[int, int]:
    """A Python int's low 64 bits as two signed int32 (Triton passes them as such; the kernel
    reinterprets the bits): low word, high word."""
    words = (value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF)
    lo, hi = (w - (1 << 32) if w >= 1 << 31 else w for w in words)
    return lo, hi


@triton.jit
def _mix(x):
    """lowbias32 (C. Wellons): a 32-bit finaliser with full avalanche, on uint32."""
    x ^= x >> 16
    x *= tl.full((), 0x7FEB352D, tl.uint32)
    x ^= x >> 15
    x *= tl.full((), 0x846CA68B, tl.uint32)
    x ^= x >> 16
    return x


@triton.jit
def _keys(key, hi):
    """The two keys of the elements whose index has high word `hi`."""
    first = _mix(key ^ _mix(hi + tl.full((), _GOLDEN, tl.uint32)))
    return first, _mix(first + tl.full((), _GOLDEN, tl.uint32))


@triton.jit(do_not_specialize=["start", "seed_lo", "seed_hi"])  # no new variant to compile in a replay's window
def _refresh(
    base_ptr,
    out_ptr,
    n,
    start,
    seed_lo,
    seed_hi,
    SCALE: tl.constexpr,
    SHIFT: tl.constexpr,
    ALIGNED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    local = tl.arange(0, BLOCK)
    first = start.to(tl.int64) + pid.to(tl.int64) * BLOCK  # this program's first global index
    lo_first = (first & 0xFFFFFFFF).to(tl.uint32)
    lo = lo_first + local.to(tl.uint32)  # wraps at 2^32, where the high word moves on
    key = _mix(
        seed_lo.to(tl.uint32, bitcast=True)
        ^ _mix(seed_hi.to(tl.uint32, bitcast=True) + tl.full((), _GOLDEN, tl.uint32))
    )
    k1, k2 = _keys(key, (first >> 32).to(tl.uint32))
    if not ALIGNED:  # the block may cross a multiple of 2^32: elements past it take the next word's keys
        n1, n2 = _keys(key, (first >> 32).to(tl.uint32) + 1)
        crossed = lo < lo_first
        k1 = tl.where(crossed, n1, k1)
        k2 = tl.where(crossed, n2, k2)
    h = _mix((lo ^ k1) * tl.full((), _MULTIPLIER, tl.uint32) + k2)
    unit = ((h >> 9) | 0x3F800000).to(tl.float32, bitcast=True)  # [1, 2)
    factor = unit * SCALE + SHIFT
    offsets = pid.to(tl.int64) * BLOCK + local
    mask = offsets < n
    x = tl.load(base_ptr + offsets, mask=mask)
    if x.dtype == tl.float64:
        y = x * factor.to(tl.float64)
    else:
        y = (x.to(tl.float32) * factor).to(x.dtype)
    tl.store(out_ptr + offsets, y, mask=mask)


def refresh_into(base: torch.Tensor, out: torch.Tensor, seed: int, start: int, low: float, high: float) -> None:
    """`out := base × factor(seed, start + j)` for the j-th element of two flat tensors of one
    dtype (fp16, bf16, fp32 or fp64) and size on one device: one launch. `start` is the global
    index of `base[0]`: 0 for a buffer of all K sets, `set × numel` for one set of them."""
    flat = base.dim() == 1 and base.stride(0) == 1 and out.stride(0) == 1
    if not flat or base.shape != out.shape or base.dtype != out.dtype or base.device != out.device:
        raise ValueError("refresh_into takes two flat contiguous tensors of one size, dtype and device")
    if start < 0:
        raise ValueError("refresh_into: the first element's index cannot be negative")
    if base.device.type != "cuda" and isinstance(_refresh, triton.runtime.JITFunction):
        raise ValueError("refresh_into: the refresh kernel runs on CUDA tensors (CPU ones under TRITON_INTERPRET=1)")
    n = base.numel()
    if n == 0:
        return
    width = high - low  # factor = low + width · (unit − 1) = width · unit + (low − width)
    _refresh[(triton.cdiv(n, BLOCK),)](
        base,
        out,
        n,
        start,
        *_words(seed),
        SCALE=width,
        SHIFT=low - width,
        ALIGNED=start % BLOCK == 0,
        BLOCK=BLOCK,
        num_warps=NUM_WARPS,
    )
