"""GPU timing with primitives captured before the candidate is imported.

`Primitives.capture()` runs at worker start. The timing loop calls only the captured
objects, so a candidate that replaces torch.cuda.Event, synchronize or time.perf_counter
does not change what is measured, and `replaced()` reports the replacement afterwards.

Per timed call: the previous output is poisoned, L2 is flushed by writing a buffer of 2× L2
size (outside the timed region), then
    start.record(); out = fn(inputs[i % R]); end.record(); synchronize device; after.record()
`end − start` is the call on its stream; `after − start` also covers work left running on
any other stream. A no-op run of the same loop calibrates the gap the synchronisation
itself adds, so side-stream work is detected, not guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

WATCHED = (
    "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.synchronize",
    "torch.cuda.synchronize", "torch._C._cuda_synchronize", "torch.cuda.current_stream", "torch.cuda.Stream",
    "time.perf_counter", "time.monotonic", "time.time", "torch.allclose", "torch.equal", "torch.testing.assert_close",
    "torch.Tensor.__eq__", "torch.Tensor.cpu", "torch.Tensor.to", "torch.Tensor.clone", "torch.Tensor.fill_",
    "torch.Tensor.zero_", "torch.save", "torch.load", "torch.profiler.profile",
)


def _resolve(dotted: str) -> Any:
    import importlib

    parts = dotted.split(".")
    obj: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


@dataclass
class Primitives:
    """The functions the harness trusts, as they were before any candidate code ran."""

    snapshot: dict[str, Any]

    @classmethod
    def capture(cls) -> "Primitives":
        snapshot = {}
        for name in WATCHED:
            try:
                snapshot[name] = _resolve(name)
            except (AttributeError, ImportError):
                continue
        return cls(snapshot)

    def __getitem__(self, name: str) -> Any:
        return self.snapshot[name]

    def replaced(self) -> list[str]:
        """Names whose current object is not the captured one."""
        changed = []
        for name, original in self.snapshot.items():
            try:
                current = _resolve(name)
            except (AttributeError, ImportError):
                current = None
            if current is not original:
                changed.append(name)
        return changed


def _poison(value: Any, keep: set[int]) -> None:
    """Overwrite a returned output (NaN, or all-ones bits for integers) unless it aliases an input."""
    tensors = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else (value,)
    for t in tensors:
        if type(t) is torch.Tensor and t.numel() and t.untyped_storage().data_ptr() not in keep:
            with torch.no_grad():
                if t.dtype.is_floating_point and t.element_size() >= 2:
                    t.fill_(float("nan"))
                else:
                    t.reshape(-1).view(torch.uint8).fill_(0xFF) if t.is_contiguous() else t.zero_()


def storages(inputs: dict[str, Any]) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in inputs.values() if isinstance(t, torch.Tensor)}


@dataclass
class TimedRun:
    times_ms: list[float]
    synced_ms: list[float]
    noop_gap_ms: list[float]
    wall_s: float
    kept: dict[int, Any]  # input-set index -> output of the last call on that set
    warmup_calls: int


def time_calls(prims: Primitives, fn: Callable[[dict[str, Any]], Any], warmup_inputs: dict[str, Any],
               input_sets: list[dict[str, Any]], calls: int, warmup: int, flush_bytes: int) -> TimedRun:
    """Warm up on a separate input set, then `calls` timed calls rotating over `input_sets`."""
    Event, record, elapsed = prims["torch.cuda.Event"], prims["torch.cuda.Event.record"], prims["torch.cuda.Event.elapsed_time"]
    sync, perf = prims["torch.cuda.synchronize"], prims["time.perf_counter"]
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
    protected = storages(warmup_inputs).union(*(storages(s) for s in input_sets))

    for _ in range(warmup):
        _poison(fn(warmup_inputs), protected)
    sync()

    def loop(call: Callable[[int], Any], n: int) -> tuple[list[float], list[float], list[Any]]:
        starts = [Event(enable_timing=True) for _ in range(n)]
        ends = [Event(enable_timing=True) for _ in range(n)]
        afters = [Event(enable_timing=True) for _ in range(n)]
        outs: list[Any] = []
        for i in range(n):
            flush.zero_()
            record(starts[i])
            out = call(i)
            record(ends[i])
            sync()
            record(afters[i])
            outs.append(out)
            if len(outs) > len(input_sets):
                _poison(outs[-len(input_sets) - 1], protected)
                outs[-len(input_sets) - 1] = None
        sync()
        return ([elapsed(starts[i], ends[i]) for i in range(n)], [elapsed(starts[i], afters[i]) for i in range(n)], outs)

    noop_t, noop_s, _ = loop(lambda i: None, min(calls, 20))
    wall0 = perf()
    times, synced, outs = loop(lambda i: fn(input_sets[i % len(input_sets)]), calls)
    wall = perf() - wall0
    kept = {i % len(input_sets): out for i, out in enumerate(outs) if out is not None}
    return TimedRun(times_ms=times, synced_ms=synced, noop_gap_ms=[s - t for t, s in zip(noop_t, noop_s)],
                    wall_s=wall, kept=kept, warmup_calls=warmup)


def plan_calls(estimate_ms: float, minimum: int = 20, maximum: int = 200, target_s: float = 0.25) -> tuple[int, int]:
    """(warm-up calls, timed calls) for a call of about `estimate_ms`: at least `minimum`
    timed calls, more for short kernels, within about `target_s` of timed work."""
    per_call = max(estimate_ms, 1e-3) / 1e3
    calls = int(min(maximum, max(minimum, target_s / per_call)))
    warmup = int(min(50, max(3, 0.02 / per_call)))
    return warmup, calls
