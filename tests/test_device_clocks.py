"""The judge's clock warm-up before the requests it times (atrex_mcp.evaluate.device.warm_clocks)."""

import time

import pytest
import torch

from atrex_mcp.evaluate import device


def test_without_a_gpu_the_warm_up_returns_at_once():
    if torch.cuda.is_available():
        pytest.skip("a GPU host: the warm-up runs (see the gpu test)")
    t0 = time.perf_counter()
    device.warm_clocks(0.5)
    assert time.perf_counter() - t0 < 0.05


@pytest.mark.gpu
def test_on_a_gpu_the_warm_up_keeps_it_busy_for_its_duration_and_leaves_nothing_queued():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    device.warm_clocks(0.001)  # its operands' first allocation
    t0 = time.perf_counter()
    device.warm_clocks(0.005)
    wall = time.perf_counter() - t0
    assert 0.005 <= wall < 0.5
    stream = torch.cuda.current_stream()
    assert stream.query(), "the warm-up synchronised: no work of it is left to overlap a timed request"
    sm, _, _ = device.clocks_now()
    assert sm is None or sm > 345
