"""The fingerprints' row-sum kernel (sandbox.fingerprint_kernel): exact int64 sums of int32 words
added to what the sums held, whatever the width or the values; on a GPU, inside a CUDA
graph, the numbers the judge computes on the output it fetches. On CPU the kernel runs through
Triton's interpreter (tests/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sandbox.fingerprint_kernel import BLOCK, MAX_ROWS, add_row_word_sums

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


@pytest.mark.parametrize("width", [1, 7, BLOCK - 1, BLOCK, 2 * BLOCK + 5])
def test_each_row_sum_is_the_exact_int64_sum_of_its_words(width):
    gen = np.random.default_rng(width)
    words = gen.integers(INT32_MIN, INT32_MAX, size=(3, width), dtype=np.int64, endpoint=True).astype(np.int32)
    words[1, :] = INT32_MAX  # a row whose sum leaves int32 many times over
    words[2, : width // 2] = INT32_MIN
    rows = torch.from_numpy(words).to(DEVICE)
    out = torch.full((3,), 12345, dtype=torch.int64, device=DEVICE)  # the sums are added to what is there
    add_row_word_sums(rows, out)
    assert out.cpu().tolist() == [12345 + int(v) for v in words.astype(np.int64).sum(axis=1)]


def test_empty_rows_add_nothing_and_bad_buffers_are_refused():
    out = torch.ones(2, dtype=torch.int64, device=DEVICE)
    add_row_word_sums(torch.empty((2, 0), dtype=torch.int32, device=DEVICE), out)
    assert out.cpu().tolist() == [1, 1]
    words = torch.zeros((2, 4), dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="2-D int32"):
        add_row_word_sums(words.float(), out)
    with pytest.raises(ValueError, match="2-D int32"):
        add_row_word_sums(words.t(), out[:1])
    with pytest.raises(ValueError, match="one sum per row"):
        add_row_word_sums(words, torch.zeros(3, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="one sum per row"):
        add_row_word_sums(words, torch.zeros(2, dtype=torch.int32, device=DEVICE))
    many = torch.zeros((MAX_ROWS + 1, 1), dtype=torch.int32, device=DEVICE)  # the grid's second axis holds rows
    with pytest.raises(ValueError, match=f"at most {MAX_ROWS} rows"):
        add_row_word_sums(many, torch.zeros(MAX_ROWS + 1, dtype=torch.int64, device=DEVICE))


@pytest.mark.gpu
@pytest.mark.parametrize("chunk_bytes", [3 << 20, 8 << 20])  # each output where it lies; three stacked
def test_on_a_gpu_the_graphs_fingerprints_are_the_judges(chunk_bytes):
    """The worker's fingerprints, captured in a CUDA graph after the outputs are written and
    replayed, are the ones the judge computes on each output (on the GPU and on the CPU)."""
    from sandbox.graph_burst import empty_prints, fingerprint, fingerprints_into

    outputs = [
        {
            "y": torch.empty(300, 4099, dtype=torch.bfloat16, device="cuda"),  # > one block per row
            "b": torch.empty(7, dtype=torch.uint8, device="cuda"),  # bytes that fill no word: torch's sum
        }
        for _ in range(9)
    ]
    prints = empty_prints(9, 2, "cuda")

    def write(seed: int) -> None:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        for out in outputs:
            out["y"].copy_(torch.randn(300, 4099, generator=gen, device="cuda"))
            out["b"].copy_(torch.randint(0, 256, (7,), generator=gen, device="cuda"))

    write(0)
    fingerprints_into(outputs, prints, chunk_bytes=chunk_bytes)  # once before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fingerprints_into(outputs, prints, chunk_bytes=chunk_bytes)
    write(1)
    graph.replay()
    torch.cuda.synchronize()
    for row, out in zip(prints, outputs):
        assert row.tolist() == fingerprint(out).tolist()
        assert row.tolist() == fingerprint({k: v.cpu() for k, v in out.items()}).tolist()
