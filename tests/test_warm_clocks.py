"""The worker's warm-up before the requests the judge times (sandbox.timing.warm_clocks, the
`warm` request)."""

import time

import pytest
import torch

from atrex_mcp.evaluate import device
from sandbox.timing import WARM_MAX_S, warm_clocks


def test_without_a_gpu_the_warm_up_returns_at_once():
    if torch.cuda.is_available():
        pytest.skip("a GPU host: the warm-up runs (see the gpu test)")
    t0 = time.perf_counter()
    warm_clocks(0.5)
    assert time.perf_counter() - t0 < 0.05


@pytest.mark.gpu
def test_on_a_gpu_the_warm_up_keeps_it_busy_for_its_duration_and_leaves_nothing_queued():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    warm_clocks(0.001)  # its operands' first allocation
    t0 = time.perf_counter()
    warm_clocks(0.005)
    wall = time.perf_counter() - t0
    assert 0.005 <= wall < 0.5
    assert torch.cuda.current_stream().query(), "it synchronised: none of it overlaps the timed request"
    sm, _, _ = device.clocks_now()
    assert sm is None or sm > 345


@pytest.mark.gpu
def test_a_request_cannot_make_the_warm_up_outlast_its_cap():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    t0 = time.perf_counter()
    warm_clocks(60.0)
    assert time.perf_counter() - t0 < WARM_MAX_S + 0.5
