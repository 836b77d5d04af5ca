"""The timed outputs' byte digest kernel (sandbox.digest_kernel): Σ b and Σ (k+1)·b of a tensor's
bytes, added to what the two sums held, the same numbers torch's chunked sums give on CPU; on a
GPU, sandbox.timing.digest of a CUDA output is the digest of its CPU copy. On CPU the kernel runs
through Triton's interpreter (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from sandbox.digest_kernel import BLOCK, add_byte_digest
from sandbox.timing import digest

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _expected(flat: torch.Tensor) -> list[int]:
    b = flat.cpu().to(torch.int64)
    return [int(b.sum()), int((b * torch.arange(1, b.numel() + 1)).sum())]


@pytest.mark.parametrize("n", [1, 7, BLOCK - 1, BLOCK, 3 * BLOCK + 5])
def test_the_kernel_adds_the_byte_sum_and_the_position_weighted_sum(n):
    gen = torch.Generator().manual_seed(n)
    flat = torch.randint(0, 256, (n,), generator=gen, dtype=torch.uint8)
    flat[-1] = 255  # the last byte's weight is the largest
    out = torch.tensor([5, -7], dtype=torch.int64, device=DEVICE)
    add_byte_digest(flat.to(DEVICE), out)
    total, weighted = _expected(flat)
    assert out.cpu().tolist() == [5 + total, -7 + weighted]


def test_empty_bytes_add_nothing_and_bad_buffers_are_refused():
    out = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    add_byte_digest(torch.empty(0, dtype=torch.uint8, device=DEVICE), out)
    assert out.cpu().tolist() == [0, 0]
    with pytest.raises(ValueError, match="1-D uint8"):
        add_byte_digest(torch.zeros(4, dtype=torch.int32, device=DEVICE), out)
    with pytest.raises(ValueError, match="two elements"):
        add_byte_digest(torch.zeros(4, dtype=torch.uint8, device=DEVICE), torch.zeros(3, dtype=torch.int64))


@pytest.mark.gpu
@pytest.mark.parametrize("chunk", [1 << 26, 4096])
def test_on_a_gpu_a_cuda_outputs_digest_is_its_cpu_copys(chunk):
    """The worker digests its CUDA outputs with the kernel; the judge may digest a copy on either
    device: the figures agree, for several tensors, dtypes, a non-contiguous view and more bytes
    than one of torch's chunks."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    output = (
        torch.randn(513, 1031, generator=gen, device="cuda").to(torch.bfloat16),
        torch.randint(-(2**31), 2**31 - 1, (77,), generator=gen, device="cuda", dtype=torch.int32),
        torch.randn(300, 200, generator=gen, device="cuda").t(),
        torch.randn(1 << 24, generator=gen, device="cuda"),  # 64 MiB: more than one CPU chunk
    )
    on_gpu = digest(output)
    assert on_gpu.is_cuda
    assert on_gpu.tolist() == digest(tuple(t.cpu() for t in output), chunk=chunk).tolist()
