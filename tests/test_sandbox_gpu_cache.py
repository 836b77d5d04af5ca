"""Cached GPU memory handed back between judge and worker (sandbox.gpu_cache): only past what a
process keeps, and never before CUDA exists in the process."""

from __future__ import annotations

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
