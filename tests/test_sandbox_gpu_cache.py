"""Cached GPU memory handed back between judge and worker (sandbox.gpu_cache): only past what a
process keeps, and never before CUDA exists in the process."""

from __future__ import annotations

import pytest
import torch

from sandbox import gpu_cache


def _device(monkeypatch, initialized: bool, reserved: int, allocated: int) -> list[str]:
    emptied: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: reserved)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: allocated)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append("empty_cache"))
    return emptied


def test_free_cached_blocks_go_back_only_past_what_a_process_keeps(monkeypatch):
    keep = gpu_cache.KEEP_BYTES
    emptied = _device(monkeypatch, True, reserved=keep + (5 << 20), allocated=5 << 20)
    assert gpu_cache.release() is False and emptied == []  # exactly KEEP_BYTES free: kept
    emptied = _device(monkeypatch, True, reserved=keep + (6 << 20), allocated=5 << 20)
    assert gpu_cache.release() is True and emptied == ["empty_cache"]
    emptied = _device(monkeypatch, True, reserved=64 << 20, allocated=0)
    assert gpu_cache.release(keep_bytes=0) is True and emptied == ["empty_cache"]


def test_a_process_without_cuda_releases_nothing(monkeypatch):
    emptied = _device(monkeypatch, False, reserved=64 << 30, allocated=0)
    assert gpu_cache.release() is False and emptied == []


def test_large_cached_blocks_are_not_split(monkeypatch):
    """The allocator setting that keeps a small block from pinning a large segment is what both
    processes apply before their first allocation (Trial, the worker's init)."""
    applied: list[str] = []
    monkeypatch.setattr(torch.cuda.memory, "_set_allocator_settings", applied.append)
    gpu_cache.limit_block_splitting()
    assert applied == [f"max_split_size_mb:{gpu_cache.SPLIT_LIMIT_MB}"]


def _bindings(monkeypatch, end_raises: bool, end_name: str = "_cuda_endAllocateToPool") -> list[tuple]:
    """torch's allocator bindings as fakes: ending the routing into a pool (raising as torch does
    when the capture had already ended it), and releasing a pool."""
    done: list[tuple] = []

    def end(device, pool):
        if end_raises:
            raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
        done.append(("end", device, pool))

    for name in gpu_cache.END_ROUTING_BINDINGS:
        monkeypatch.delattr(torch._C, name, raising=False)
    monkeypatch.setattr(torch._C, end_name, end, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", lambda device, pool: done.append(("release", device, pool)),
                        raising=False)  # fmt: skip
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    return done


def test_a_capture_torch_left_routing_into_its_pool_is_ended_and_its_pool_released(monkeypatch):
    done = _bindings(monkeypatch, end_raises=False)
    assert gpu_cache.end_failed_capture((0, 9)) is True
    assert done == [("end", 3, (0, 9)), ("release", 3, (0, 9))]


def test_a_capture_torch_ended_itself_is_left_to_torch(monkeypatch):
    """Releasing the pool as well would take a second reference off it: torch's reset drops its own."""
    done = _bindings(monkeypatch, end_raises=True)
    assert gpu_cache.end_failed_capture((0, 9)) is False and done == []


def test_the_older_binding_name_serves_and_a_torch_without_either_is_left_alone(monkeypatch):
    done = _bindings(monkeypatch, end_raises=False, end_name="_cuda_endAllocateCurrentStreamToPool")
    assert gpu_cache.end_failed_capture((0, 2)) is True and done[0] == ("end", 3, (0, 2))
    monkeypatch.delattr(torch._C, "_cuda_endAllocateCurrentStreamToPool")
    assert gpu_cache.end_failed_capture((0, 2)) is False


@pytest.mark.gpu
def test_gpu_a_worker_whose_graph_burst_fails_to_capture_still_hands_its_cache_back():
    """A candidate that synchronises in forward cannot be captured (it is judged uncapturable);
    the cache its worker fills afterwards must still go back at the worker's next release, or the
    judge beside it runs short."""
    from torch import nn

    from sandbox import graph_burst

    class Item(nn.Module):
        def forward(self, x):
            return x * float(x.abs().max().item())

    gpu_cache.limit_block_splitting()
    inputs = graph_burst.StackedInputs.stack(lambda seed: {"x": torch.randn(1024, device="cuda")}, [0, 1])
    reason = graph_burst.capture(Item(), inputs, "cuda", sync=torch.cuda.synchronize)
    assert isinstance(reason, str)  # uncapturable, with its reason
    block = 300 << 20
    torch.empty(block, dtype=torch.uint8, device="cuda")  # freed at once: a cached block
    cached = torch.cuda.memory_reserved()
    assert gpu_cache.release(keep_bytes=0)
    assert torch.cuda.memory_reserved() <= cached - block
