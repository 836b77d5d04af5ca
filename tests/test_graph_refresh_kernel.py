"""The graph burst's input refresh kernel (sandbox.refresh_kernel) as the worker and the judge use
it: its factors are the documented hash of (seed, element index), spread evenly over
[REFRESH_LOW, REFRESH_HIGH] with no pattern across sets, seeds or 2^32 elements, and any slice of
a buffer refreshed on its own has the bits the whole buffer's refresh gave it. On CPU these run
through Triton's interpreter (tests/conftest.py), on a GPU host on the device; the last test
checks the worker's StackedInputs against the judge's refreshed_set on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sandbox.graph_burst import REFRESH_HIGH, REFRESH_LOW
from sandbox.refresh_kernel import BLOCK, GOLDEN, MULTIPLIER, refresh_into

WORD = 1 << 32
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def factors(seed: int, start: int, n: int, device: str = DEVICE) -> np.ndarray:
    """The kernel's factors of indices [start, start + n): an fp32 refresh of ones (1 × f is f)."""
    ones = torch.ones(n, dtype=torch.float32, device=device)
    out = torch.empty_like(ones)
    refresh_into(ones, out, seed, start, REFRESH_LOW, REFRESH_HIGH)
    return out.cpu().numpy()


def _mix(x: np.ndarray) -> np.ndarray:
    x = x & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def documented_factors(seed: int, start: int, n: int) -> np.ndarray:
    """The factor as sandbox/refresh_kernel.py's docstring defines it, in numpy (uint64 holding
    32-bit words): the oracle the kernel's bits are held to."""
    index = np.arange(start, start + n, dtype=np.uint64)
    hi, lo = index >> np.uint64(32), index & np.uint64(0xFFFFFFFF)
    s_lo, s_hi = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    key = _mix(s_lo ^ _mix(s_hi + np.uint64(GOLDEN)))
    k1 = _mix(key ^ _mix(hi + np.uint64(GOLDEN)))
    k2 = _mix(k1 + np.uint64(GOLDEN))
    h = _mix((lo ^ k1) * np.uint64(MULTIPLIER) + k2)
    unit = ((h >> np.uint64(9)) | np.uint64(0x3F800000)).astype(np.uint32).view(np.float32)
    width = np.float32(REFRESH_HIGH - REFRESH_LOW)
    return unit * width + (np.float32(REFRESH_LOW) - width)


@pytest.mark.parametrize("seed", [2024, 2**31 - 1, 3 * 2**32 + 5])
@pytest.mark.parametrize(
    "start, n",
    [
        (0, 3 * BLOCK + 5),  # the worker's launch: blocks aligned from 0
        (12_345, 2 * BLOCK),  # a set's slice: blocks not aligned
        (WORD - 700, 1_500),  # a slice across 2^32: the next high word's keys from there on
        (5 * WORD + 17, 600),  # far past 2^32, with no such buffer allocated
    ],
)
def test_the_factors_are_the_documented_hash_of_seed_and_index(start, n, seed):
    assert np.array_equal(factors(seed, start, n), documented_factors(seed, start, n))


def test_a_slice_refreshed_on_its_own_has_the_bits_of_the_whole_buffers_refresh():
    """What lets the judge rebuild one set: the same elements, launched from any first index,
    aligned or not, across 2^32 or not."""
    start, n = WORD - 2 * BLOCK, 4 * BLOCK + 300
    whole = factors(77, start, n)
    for offset, size in [(1, 999), (2 * BLOCK - 5, 10), (2 * BLOCK, BLOCK + 7), (3_001, 5_000)]:
        assert np.array_equal(factors(77, start + offset, size), whole[offset : offset + size])


def test_the_factors_are_spread_evenly_over_the_range():
    f = factors(99, 0, 1 << 16).astype(np.float64)
    assert f.min() >= REFRESH_LOW and f.max() <= REFRESH_HIGH
    width = REFRESH_HIGH - REFRESH_LOW
    assert abs(f.mean() - 1.0) < 0.003 and abs(f.std() - width / 12**0.5) < 0.002  # U(0.75, 1.25): σ = 0.1443
    counts, _ = np.histogram(f, bins=16, range=(REFRESH_LOW, REFRESH_HIGH))
    assert (abs(counts / (len(f) / 16) - 1) < 0.1).all()  # every sixteenth of the range within 10 % of its share
    centred = f - f.mean()
    for lag in (1, 2, 3, 8, 64, 4096):  # neighbours, SIMD widths, a block: no serial correlation
        assert abs(np.dot(centred[:-lag], centred[lag:]) / np.dot(centred, centred)) < 0.02, lag


def _unrelated(a: np.ndarray, b: np.ndarray) -> bool:
    """Neither equal nor correlated, nor a rearrangement of each other: of 2^23 possible fp32
    factors, two independent draws of 8,192 share ~1 % of their values; a permutation all."""
    centred_a, centred_b = a - a.mean(), b - b.mean()
    correlation = np.dot(centred_a, centred_b) / np.sqrt(np.dot(centred_a, centred_a) * np.dot(centred_b, centred_b))
    shared = len(np.intersect1d(a, b)) / len(a)
    return abs(correlation) < 0.05 and shared < 0.05 and not np.array_equal(a, b)


def test_no_pattern_repeats_across_sets_seeds_or_2_to_the_32_elements():
    n = 8_192
    sets = factors(5, 0, 4 * n).reshape(4, n)  # four sets of one K-set buffer
    assert all(_unrelated(sets[i], sets[j]) for i in range(4) for j in range(i + 1, 4))
    assert _unrelated(factors(5, 0, n), factors(6, 0, n))  # neighbouring seeds
    assert _unrelated(factors(5, 0, n), factors(5 + WORD, 0, n))  # the seed's high bits count
    assert _unrelated(factors(5, 0, n), factors(5, WORD, n))  # index i and i + 2^32
    assert _unrelated(factors(5, 0, n), factors(5, 3 * WORD, n))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_each_element_is_its_base_times_its_factor_in_the_inputs_precision(dtype):
    """Zeros stay zero, signs stay, every other value moves within the range; the product is
    rounded once to the input's dtype (fp64 kept whole)."""
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(3 * BLOCK + 11, generator=gen).to(dtype)
    base[::97] = 0
    out = torch.empty_like(base, device=DEVICE)
    refresh_into(base.to(DEVICE), out, 31, 0, REFRESH_LOW, REFRESH_HIGH)
    out = out.cpu()
    f = torch.from_numpy(factors(31, 0, base.numel()))
    assert torch.equal(out == 0, base == 0) and torch.equal(out.sign(), base.sign())
    ratio = (out.double() / base.double())[base != 0]
    resolution = torch.finfo(dtype).eps  # one rounding of the product to the dtype
    assert (ratio >= REFRESH_LOW * (1 - resolution)).all() and (ratio <= REFRESH_HIGH * (1 + resolution)).all()
    exact = (base.double() * f.double())[base != 0]
    assert ((ratio * base.double()[base != 0] - exact).abs() <= exact.abs() * resolution).all()
    if dtype == torch.float64:
        assert torch.equal(out, base * f.double())


def test_a_refresh_refuses_buffers_that_do_not_match():
    ones = torch.ones(8, device=DEVICE)
    with pytest.raises(ValueError, match="one size, dtype and device"):
        refresh_into(ones, torch.empty(8, dtype=torch.float16, device=DEVICE), 1, 0, REFRESH_LOW, REFRESH_HIGH)
    with pytest.raises(ValueError, match="flat contiguous"):
        refresh_into(ones, torch.empty(16, device=DEVICE)[::2], 1, 0, REFRESH_LOW, REFRESH_HIGH)
    with pytest.raises(ValueError, match="cannot be negative"):
        refresh_into(ones, torch.empty(8, device=DEVICE), 1, -8, REFRESH_LOW, REFRESH_HIGH)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_on_a_gpu_the_judges_set_is_the_workers_bit_for_bit(dtype):
    """On the device the graph burst runs on: K sets refreshed in one launch, each rebuilt on its
    own by `refreshed_set`, in a set size that leaves most sets' first index unaligned."""
    from sandbox.graph_burst import StackedInputs, refreshed_set

    def make(seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        return {"x": torch.randn(37, 129, generator=gen, device="cuda").to(dtype)}

    seeds = list(range(11))
    stacked = StackedInputs.stack(make, seeds)
    stacked.refresh(4321)
    for k, seed in enumerate(seeds):
        assert torch.equal(refreshed_set(make(seed), k, len(seeds), 4321)["x"], stacked.sets[k]["x"])
