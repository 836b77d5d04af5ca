"""The judge's reference forwards replayed as CUDA graphs where they are launch-bound.

A shape's reference is made about ten times (correctness seeds, timed-output checks, witness
checks), always on inputs of the same shapes and new values. Many references are eager loops of
small kernels whose time is the host launching them (a recurrent reference launches a few
kernels per token): replayed from a CUDA graph, the same kernels run without the launches.

The reference is the specification, so a graph is only used where it gives eager's numbers bit
for bit. The first call of a (module, input layout) runs eager and its output is returned as-is;
in that same call the forward is warmed up, captured on static copies of the inputs and replayed
twice, and the graph is kept only when the warm-up and both replays equal that eager output byte
for byte (so NaNs of one payload match, and -0.0 is not 0.0). Replaying captured kernels runs
the same kernels with the same launch parameters on the same input bytes; a kernel whose result
is not a function of those (atomics-ordered sums, random numbers) shows as a mismatch there, or
already between the two eager runs, and its key stays eager. Later calls copy their inputs into
the static buffers, replay, and return a fresh copy of the outputs (the next replay overwrites
them; callers keep references across calls).

A key stays eager (`Decision.reason` says why) when: a tensor input is not on the device, an input
is neither a tensor nor a plain scalar (scalars are part of the key, being baked into the graph),
or a tensor input overlaps itself; an output is not tensors on the device, or aliases an input;
the forward changes its inputs in place (eager would change the caller's, a replay only the static
copies); the first call took under `GraphPolicy.min_eager_s` (nothing worth saving) or its host
returned before `launch_bound_share` of its wall (the device, not the launches, bounds it); its
inputs and its peak allocation exceed the memory bound; the warm-up or the capture raises (host
synchronisations such as `.item()`/`.tolist()`, data-dependent shapes such as `nonzero`); the
bits differ; or the replay is not `min_speedup` times faster than a warm eager call.

The first call of a key resets the allocator's peak to measure the eager call, so the footprint
`Trial.seed_reference` measures for that seed counts from there and includes the static copies,
the warm-up and the pool: larger than eager's, so at most the next seed is not made while the
worker runs (Trial._overlaps); later seeds' footprints have no intermediates (the pool holds them).

Memory: a graph keeps its static inputs and its private pool (the forward's intermediates and
outputs) until `release()`; the evaluator releases at the end of each shape, and a call for
another shape releases the previous shape's graphs first. The pool is reserved but not allocated,
and `empty_cache` cannot hand it back while the graph lives: `pooled_bytes()` is what the judge's
cache release and fragmentation check (evaluator) leave out of their free-block figures.

The CUDA parts sit behind `GraphDevice` (CudaGraphDevice on a GPU); `RerunDevice`, which
"replays" by running the forward again into the static outputs, drives the same logic on CPU for
tests and dry runs.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from sandbox import gpu_cache
from sandbox.handoff import flat_bytes, output_items

GRAPH = "graph"
EAGER = "eager"
SCALARS = (int, float, bool, str, type(None))


@dataclass(frozen=True)
class GraphPolicy:
    """When a reference is worth a graph. The defaults: a first call under 2 ms has at most a few
    hundred launches to save, ~10 calls a shape; a call whose device work outlasted its launches
    by half its wall saves at most that half; a graph must at least halve a warm call, since trying
    costs about two eager calls (warm-up, capture) and two replays; and the static inputs plus the
    pool may hold at most 2 GiB and 2 % of the device, memory the worker (another process on the
    same GPU) loses while the shape is judged."""

    min_eager_s: float = 2e-3
    launch_bound_share: float = 0.5
    min_speedup: float = 2.0
    max_bytes: int = 2 << 30
    memory_share: float = 0.02
    captures_per_shape: int = 2  # layouts tried per shape: one shape's inputs rarely vary in layout

    def limit_bytes(self, device_memory_bytes: int | None) -> int:
        if not device_memory_bytes:
            return self.max_bytes
        return min(self.max_bytes, int(self.memory_share * device_memory_bytes))


class CapturedForward(Protocol):
    """A captured forward: `replay()` rewrites `outputs` from the static inputs it was captured on."""

    outputs: Any
    pool_bytes: int

    def replay(self) -> None: ...

    def reset(self) -> None: ...


class GraphDevice(Protocol):
    """The device operations the decision needs: the seam tests replace."""

    def holds(self, t: torch.Tensor) -> bool: ...

    def synchronize(self) -> None: ...

    def allocated_bytes(self) -> int: ...

    def reset_peak(self) -> None: ...

    def peak_bytes(self) -> int: ...

    def warm_up(self, forward: Callable[[], Any]) -> Any: ...

    def capture(self, forward: Callable[[], Any]) -> CapturedForward: ...


@dataclass
class _CudaCaptured:
    graph: Any  # torch.cuda.CUDAGraph
    outputs: Any
    pool_bytes: int

    def replay(self) -> None:
        self.graph.replay()

    def reset(self) -> None:
        self.graph.reset()


class CudaGraphDevice:
    """CUDA graphs on the current device, captured in thread-local error mode (the server's
    other threads may use the GPU) on a side stream, the one the warm-up ran on, as torch asks."""

    def __init__(self) -> None:
        self.side: Any = None  # torch.cuda.Stream, made on first use

    def holds(self, t: torch.Tensor) -> bool:
        return t.is_cuda

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def allocated_bytes(self) -> int:
        return torch.cuda.memory_allocated()

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats()

    def peak_bytes(self) -> int:
        return torch.cuda.max_memory_allocated()

    def warm_up(self, forward: Callable[[], Any]) -> Any:
        """One forward on the side stream before the capture (lazy initialisation, workspaces)."""
        stream, side = torch.cuda.current_stream(), self._side()
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            out = forward()
        stream.wait_stream(side)
        return out

    def _side(self) -> Any:
        if self.side is None:
            self.side = torch.cuda.Stream()
        return self.side

    def capture(self, forward: Callable[[], Any]) -> CapturedForward:
        """The forward captured, or the exception that stopped it with the CUDA state restored:
        the current stream back (a failed capture_end leaves the capture's stream current), the
        caching allocator's routing into the graph's pool ended and the pool dropped (torch can
        leave both behind, and with them every later cache release void: gpu_cache.graph_capture).
        The pool's size is the reserved memory the capture added (a private pool takes no cached
        block of the general one), measured from an emptied cache as torch.cuda.graph empties it
        on entry anyway."""
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.current_stream()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        reserved = torch.cuda.memory_reserved()
        try:
            with gpu_cache.graph_capture(graph, stream=self._side(), capture_error_mode="thread_local"):
                outputs = forward()
        except BaseException:
            torch.cuda.set_stream(stream)
            self.side = None  # the next capture gets a stream no failed capture touched
            try:
                graph.reset()
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - the capture's own error is the one to report
                pass
            raise
        return _CudaCaptured(graph, outputs, max(0, torch.cuda.memory_reserved() - reserved))


@dataclass
class _RerunCaptured:
    forward: Callable[[], Any]
    outputs: Any
    pool_bytes: int = 0

    def replay(self) -> None:
        for static, fresh in zip(_tensors(self.outputs), _tensors(self.forward()), strict=True):
            static.copy_(fresh)

    def reset(self) -> None:
        self.outputs = None


class RerunDevice:
    """No graphs: a 'capture' runs the forward once for its outputs and a 'replay' runs it again
    into them. The decision logic and the static-buffer path run unchanged on CPU (tests, dry
    runs); nothing here is faster than eager."""

    def holds(self, t: torch.Tensor) -> bool:
        return t.device.type == "cpu"

    def synchronize(self) -> None:
        pass

    def allocated_bytes(self) -> int:
        return 0

    def reset_peak(self) -> None:
        pass

    def peak_bytes(self) -> int:
        return 0

    def warm_up(self, forward: Callable[[], Any]) -> Any:
        return forward()

    def capture(self, forward: Callable[[], Any]) -> CapturedForward:
        return _RerunCaptured(forward, forward())


@dataclass
class Decision:
    """What became of one key: a graph, or eager with the reason, and the figures it rests on."""

    mode: str  # GRAPH or EAGER
    reason: str = ""
    eager_s: float | None = None  # the first (eager) call's wall
    warm_s: float | None = None  # the warm-up's wall: a warm eager call
    replay_s: float | None = None  # a graphed call's wall: input copies, replay, output copies
    peak_bytes: int | None = None
    pool_bytes: int = 0


@dataclass
class _Graph:
    static: dict[str, torch.Tensor]
    captured: CapturedForward
    held_bytes: int  # static inputs and pool

    def run(self, inputs: dict[str, Any]) -> Any:
        for name, buffer in self.static.items():
            buffer.copy_(inputs[name])
        self.captured.replay()
        return _fresh_copy(self.captured.outputs)


@dataclass(eq=False)  # identity: kept in a WeakSet of live instances
class ReferenceGraphs:
    """The graphs of the shape being judged, keyed by the reference module's key and the inputs'
    layout. `output()` is the reference call; `release()` drops every graph."""

    device: GraphDevice
    device_memory_bytes: int | None = None
    policy: GraphPolicy = field(default_factory=GraphPolicy)
    clock: Callable[[], float] = time.perf_counter
    shape_id: str | None = None
    graphs: dict[tuple, _Graph] = field(default_factory=dict)
    decisions: dict[tuple, Decision] = field(default_factory=dict)  # this shape's keys
    attempts: int = 0
    pool_bytes: int = 0  # the live graphs' pools (an int: pooled_bytes reads it from any thread)

    def __post_init__(self) -> None:
        with _LIVE_LOCK:
            _LIVE.add(self)

    def output(self, shape_id: str, module_key: str, module: Callable[..., Any], inputs: dict[str, Any]) -> Any:
        """`module(**inputs)`, replayed from a graph where this shape's key has one (see the module
        docstring). Call under torch.no_grad(), as the evaluator does."""
        if shape_id != self.shape_id:
            self.release()
            self.shape_id = shape_id
        layout = self.layout(inputs)
        if layout is None:
            return module(**inputs)
        key = (module_key, layout)
        graph = self.graphs.get(key)
        if graph is not None:
            return graph.run(inputs)
        if key in self.decisions or self.attempts >= self.policy.captures_per_shape:
            return module(**inputs)
        self.attempts += 1
        out, self.decisions[key] = self._first_call(key, module, inputs)
        return out

    def release(self) -> None:
        """Drop every graph and its buffers (the end of a shape): the pools become free cached
        blocks, which the judge's next cache release hands back."""
        for graph in self.graphs.values():
            graph.captured.reset()
        self.graphs.clear()
        self.pool_bytes = 0
        self.decisions.clear()
        self.attempts = 0
        self.shape_id = None

    def layout(self, inputs: dict[str, Any]) -> tuple | None:
        """The inputs' layout as a key (tensors: shape, stride, offset, dtype; scalars: their
        values, which a graph bakes in), or None where a graph cannot take them."""
        parts: list[tuple] = []
        for name in sorted(inputs):
            value = inputs[name]
            if isinstance(value, torch.Tensor):
                if not self.device.holds(value) or any(s == 0 and n > 1 for n, s in zip(value.shape, value.stride())):
                    return None
                parts.append((name, tuple(value.shape), value.stride(), value.storage_offset(), value.dtype))
            elif type(value) in SCALARS:
                parts.append((name, type(value).__name__, value))
            else:
                return None
        return tuple(parts)

    def _first_call(self, key: tuple, module: Callable[..., Any], inputs: dict[str, Any]) -> tuple[Any, Decision]:
        """(eager output, decision) for a new key: the eager call measured, then the graph tried."""
        limit = self.policy.limit_bytes(self.device_memory_bytes) - sum(g.held_bytes for g in self.graphs.values())
        tensors = {name: value for name, value in inputs.items() if isinstance(value, torch.Tensor)}
        input_bytes = sum(_span_bytes(t) for t in tensors.values())
        if input_bytes > limit:
            return module(**inputs), Decision(EAGER, f"inputs of {input_bytes} bytes exceed the graph bound {limit}")
        static = {name: _static_copy(t) for name, t in tensors.items()}
        self.device.synchronize()
        held = self.device.allocated_bytes()
        self.device.reset_peak()
        t0 = self.clock()
        out = module(**inputs)
        host_s = self.clock() - t0
        self.device.synchronize()
        decision = Decision(EAGER, eager_s=self.clock() - t0, peak_bytes=max(0, self.device.peak_bytes() - held))
        decision.reason = self._eager_reason(out, inputs, static, host_s, decision, limit - input_bytes)
        if decision.reason:
            return out, decision
        graph = self._graph(module, inputs, static, out, decision)
        if graph is not None:
            if graph.held_bytes > limit:
                graph.captured.reset()
                decision.reason = f"the graph holds {graph.held_bytes} bytes, over the bound {limit}"
            else:
                self.graphs[key] = graph
                self.pool_bytes += graph.captured.pool_bytes
                decision.mode = GRAPH
        return out, decision

    def _eager_reason(
        self, out: Any, inputs: dict[str, Any], static: dict[str, torch.Tensor], host_s: float, d: Decision, room: int
    ) -> str:
        """Why the first call's output or figures rule a graph out ('' where they do not)."""
        items = output_items(out)[1]
        if not items or not all(isinstance(t, torch.Tensor) and self.device.holds(t) for _, t in items):
            return "an output is not a tensor on the device"
        given = {t.untyped_storage().data_ptr() for t in inputs.values() if isinstance(t, torch.Tensor)}
        if any(t.untyped_storage().data_ptr() in given for _, t in items):
            return "an output aliases an input"
        if any(not same_bits(inputs[name], copy) for name, copy in static.items()):
            return "the forward changes its inputs in place"
        assert d.eager_s is not None and d.peak_bytes is not None
        if d.eager_s < self.policy.min_eager_s:
            return f"the eager call took {d.eager_s * 1e3:.3g} ms, under {self.policy.min_eager_s * 1e3:g} ms"
        if host_s < self.policy.launch_bound_share * d.eager_s:
            return f"device-bound: its launches took {host_s * 1e3:.3g} ms of its {d.eager_s * 1e3:.3g} ms"
        if d.peak_bytes > room:
            return f"its peak allocation of {d.peak_bytes} bytes exceeds the graph bound's {room} left"
        return ""

    def _graph(
        self, module: Callable[..., Any], inputs: dict[str, Any], static: dict[str, torch.Tensor], out: Any, d: Decision
    ) -> _Graph | None:
        """The graph on `static` when it reproduces `out` bit for bit and pays; else None with
        `d.reason` set."""

        def forward() -> Any:
            return module(**{**inputs, **static})

        try:
            t0 = self.clock()
            warm = self.device.warm_up(forward)
            self.device.synchronize()
            d.warm_s = self.clock() - t0
            same_warm = same_output(warm, out)
            del warm
            captured = self.device.capture(forward)
        except Exception as exc:  # noqa: BLE001 - any failure to capture leaves the key eager, with its reason
            d.reason = f"not capturable: {type(exc).__name__}: {exc}"[:300]
            return None
        graph = _Graph(static, captured, sum(_span_bytes(t) for t in static.values()) + captured.pool_bytes)
        d.pool_bytes = captured.pool_bytes
        if not same_warm:
            d.reason = "eager is not deterministic: a second eager call gave other bits"
        else:
            captured.replay()
            if not same_output(captured.outputs, out):
                d.reason = "the replay's bits differ from eager's"
            else:
                self.device.synchronize()
                t0 = self.clock()
                again = graph.run(inputs)
                self.device.synchronize()
                d.replay_s = self.clock() - t0
                if not same_output(again, out):
                    d.reason = "a second replay's bits differ from eager's"
                elif d.replay_s * self.policy.min_speedup > d.warm_s:
                    d.reason = (
                        f"not launch-bound: a replay took {d.replay_s * 1e3:.3g} ms against "
                        f"{d.warm_s * 1e3:.3g} ms eager"
                    )
        if d.reason:
            captured.reset()
            return None
        return graph


_LIVE: weakref.WeakSet[ReferenceGraphs] = weakref.WeakSet()  # every instance of the process: trials may overlap
_LIVE_LOCK = threading.Lock()


def pooled_bytes() -> int:
    """GPU memory the live reference graphs of this process keep in their private pools (their
    freed intermediates, reserved and not allocated, and their outputs): out of empty_cache's
    reach until they are released."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    return sum(graphs.pool_bytes for graphs in live)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same values byte for byte (dtype and shape included)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(flat_bytes(a), flat_bytes(b))


def same_output(a: Any, b: Any) -> bool:
    """Whether two outputs have one structure and the same bits in every tensor."""
    (kind_a, items_a), (kind_b, items_b) = output_items(a), output_items(b)
    if kind_a != kind_b or [k for k, _ in items_a] != [k for k, _ in items_b]:
        return False
    return all(
        isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and same_bits(x, y)
        for (_, x), (_, y) in zip(items_a, items_b, strict=True)
    )


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for _, t in output_items(value)[1]]


def _fresh_copy(value: Any) -> Any:
    """A copy of a graph's outputs, in their structure: the next replay overwrites them."""
    if isinstance(value, dict):
        return {k: v.clone() for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(v.clone() for v in value)
    return value.clone()


def _span_bytes(t: torch.Tensor) -> int:
    """Bytes of the storage a tensor's layout spans, from storage offset 0."""
    if t.numel() == 0:
        return 0
    span = int(t.storage_offset()) + sum((int(n) - 1) * int(s) for n, s in zip(t.shape, t.stride())) + 1
    return span * t.element_size()


def _static_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` with its shape, strides and storage offset (alignment can choose kernels)."""
    base = torch.empty(_span_bytes(t) // t.element_size(), dtype=t.dtype, device=t.device)
    return base.as_strided(t.shape, t.stride(), t.storage_offset()).copy_(t)
