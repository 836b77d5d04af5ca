"""The worker's side of the graph burst: K forwards, then the fingerprints of their K outputs,
captured in one CUDA graph, then replayed while the judge times the request.

A replay launches no kernel from Python, so the judge's wall around it is device time, which a
candidate cannot shrink by forging what the worker reports (atrex_mcp.evaluate.timing_witness).
The fingerprints are computed inside the graph, so the reply that ends the timed window already
commits to every output; the judge then compares one of them, chosen after the replay, with its
reference and with its fingerprint. They are computed after all K forwards, a few launches per
output tensor (`fingerprints_into`), not one reduction after each forward: in the graph those
cost several µs each, more than a small kernel, and the judge's slack grows with what it takes
off. Fingerprinting at the end commits to the same outputs: an output a later call overwrote
(outputs sharing memory) gets the fingerprint of what overwrote it, which then matches what the
judge fetches after the replay anyway, and that fails its comparison with the reference either way.

The input sets the graph reads are refreshed inside the timed window, before the replay, from a
seed that arrives with the replay request (`StackedInputs.refresh`): every floating-point input
is multiplied element by element by a factor in [REFRESH_LOW, REFRESH_HIGH], a counter-based hash
of the seed and the element's index computed on the device (sandbox.refresh_kernel). The worker
cannot know the inputs, and so the outputs, before the judge's clock runs. Each such input's K
sets live in one buffer, so a refresh is one launch per input whatever K is, reading the pristine
copy and writing the live buffer once; the judge measures the same refresh on buffers of the same
sizes and takes it off the wall. Integer inputs (indices, tables, lengths) and fp8 payloads keep
their captured values.

A forward that cannot be captured (a host synchronisation such as `.item()`, an allocation the
capture refuses, a CPU device) makes the burst uncapturable: the reason goes back as data and
the judge falls back on the plain burst.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sandbox import gpu_cache
from sandbox.handoff import flat_bytes, output_items, output_tensors

FINGERPRINT_CHUNK_BYTES = 4 << 20  # one stacked chunk of outputs (fits the L2 it is written to and read back
# from); an output over half of it is summed where it lies, one read instead of a copy's two and the sum's one


def fingerprint(value: Any) -> torch.Tensor:
    """Σ of each output tensor's 32-bit words (its bytes where they fill no words), int64, on its
    device. The judge computes it on the output it fetches; the graph computes the same numbers
    for all K outputs at once (`fingerprints_into`), so a replay's reply commits the worker, inside
    the timed window, to outputs it could only know by computing them. It is a commitment, not a
    checksum (a permutation of the bytes has the same sum): the output the judge chooses is
    compared with its reference in full. Integer sums are exact, so any grouping gives them."""
    tensors = output_tensors(value)
    prints = empty_prints(1, len(tensors), tensors[0].device if tensors else "cpu")
    fingerprints_into([value], prints)
    return prints[0]


def empty_prints(calls: int, tensors: int, device: str | torch.device) -> torch.Tensor:
    """(calls, tensors) int64, laid out column by column so each chunk's sums land contiguously;
    uninitialised (`fingerprints_into` zeroes what it fills)."""
    return torch.empty((tensors, calls), dtype=torch.int64, device=device).t()


def fingerprints_into(outputs: list[Any], prints: torch.Tensor, chunk_bytes: int = FINGERPRINT_CHUNK_BYTES) -> None:
    """`prints[i] := fingerprint(outputs[i])` for every i, in a few launches per output tensor:
    the j-th tensors of up to `chunk_bytes // their bytes` consecutive outputs of one shape and
    dtype are stacked (one copy) and summed row by row (one reduction); a tensor larger than half
    a chunk is summed where it lies. A reduction per call cost more than a small kernel itself
    in the graph; this costs a share of two launches (stack, sum) and of one memset and ~3 reads of the
    output per call, the sum at full bandwidth on a GPU (sandbox.fingerprint_kernel)."""
    columns = [output_tensors(out) for out in outputs]
    prints.zero_()  # one memset for all the sums; each launch below adds its rows' into theirs
    for j in range(prints.shape[1]):
        tensors = [column[j] for column in columns]
        i = 0
        while i < len(tensors):
            n = _chunk(tensors, i, chunk_bytes)
            if n == 1:
                flat = flat_bytes(tensors[i])
                rows = (flat if flat.storage_offset() % 4 == 0 else flat.clone()).view(1, -1)
            else:
                rows = torch.stack([t.detach() for t in tensors[i : i + n]]).reshape(n, -1).view(torch.uint8)
            _row_sums(_words(rows), prints[i : i + n, j])
            i += n


def _row_sums(rows: torch.Tensor, out: torch.Tensor) -> None:
    """`out += Σ` of each row: the fingerprint kernel's one read of the words on a GPU, torch's
    sum elsewhere (and for rows of bytes that fill no words); the same exact integers either way."""
    if rows.is_cuda and rows.dtype == torch.int32:
        from sandbox.fingerprint_kernel import add_row_word_sums  # Triton: imported where the kernel runs

        add_row_word_sums(rows.contiguous(), out)
    else:
        out += torch.sum(rows, dim=1, dtype=torch.int64)


def _chunk(tensors: list[torch.Tensor], start: int, chunk_bytes: int) -> int:
    """How many tensors from `start` on share one stacked chunk: the first's shape and dtype,
    no more than `chunk_bytes` together (at least 1)."""
    first = tensors[start]
    most = max(1, chunk_bytes // max(1, first.numel() * first.element_size()))
    n = 1
    while n < most and start + n < len(tensors):
        t = tensors[start + n]
        if t.shape != first.shape or t.dtype != first.dtype:
            break
        n += 1
    return n


def _words(rows: torch.Tensor) -> torch.Tensor:
    """Bytes (last dimension) as 32-bit words where they fill words: the same read, more mixing."""
    return rows.view(torch.int32) if rows.shape[-1] % 4 == 0 else rows


REFRESH_LOW, REFRESH_HIGH = 0.75, 1.25  # the seeded per-element factor: keeps signs and zeros, moves every value


def refreshable(value: Any) -> bool:
    """A floating-point tensor the refresh perturbs: not fp8 (no arithmetic for it in torch; its
    float scales are refreshed), dense without overlap (its K sets can share one flat buffer)."""
    return (
        isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and value.element_size() > 1
        and value.numel() > 0
        and _dense(value)
    )


def _dense(t: torch.Tensor) -> bool:
    """The tensor's elements cover offsets [0, numel) of a storage once each (any stride order)."""
    order = sorted((st, n) for st, n in zip(t.stride(), t.shape) if n > 1)
    expected = 1
    for stride, size in order:
        if stride != expected:
            return False
        expected *= size
    return True


@dataclass
class StackedInputs:
    """K input sets whose refreshable tensors are views of one flat buffer per input (`live`),
    with a pristine copy of it (`base`): a refresh rewrites `live` from `base`, so every replay's
    inputs depend on that replay's seed alone."""

    sets: list[dict[str, Any]]
    live: list[torch.Tensor]  # per refreshable input, in the sets' key order: (K × numel,)
    base: list[torch.Tensor]

    @classmethod
    def stack(cls, make: Any, seeds: list[int]) -> StackedInputs:
        """The sets of `seeds` (`make(seed)` is one set), each refreshable input copied into its
        slot of a buffer of all K sets as it is made, so no more than one loose set is alive."""
        sets: list[dict[str, Any]] = []
        live: dict[str, torch.Tensor] = {}
        layout: dict[str, tuple[Any, ...]] = {}
        for i, seed in enumerate(seeds):
            inputs = dict(make(seed))
            if i == 0:
                layout = {name: _layout(t) for name, t in inputs.items() if refreshable(t)}
                live = {
                    name: torch.empty(len(seeds) * t.numel(), dtype=t.dtype, device=t.device)
                    for name, t in inputs.items()
                    if name in layout
                }
            for name, buffer in live.items():
                t = inputs.get(name)
                if not isinstance(t, torch.Tensor) or _layout(t) != layout[name]:
                    raise ValueError(f"input {name!r} of seed {seed} does not have the first set's layout")
                slot = set_view(buffer, i, t)
                slot.copy_(t)
                inputs[name] = slot
            sets.append(inputs)
        return cls(sets=sets, live=list(live.values()), base=[b.clone() for b in live.values()])

    def refresh(self, seed: int) -> None:
        """Every refreshable input of every set := its pristine value × the factor of `seed` and
        of its index in the K-set buffer: one fused pass per input (read `base`, write `live`),
        whatever K is, where a generator's draw and a multiply made four. The judge rebuilds
        one set from its own index range (`refreshed_set`)."""
        from sandbox.refresh_kernel import refresh_into  # Triton: imported where the refresh runs

        for live, base in zip(self.live, self.base):
            refresh_into(base, live, seed, 0, REFRESH_LOW, REFRESH_HIGH)


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return t.shape, t.stride(), t.dtype, t.device


def set_view(buffer: torch.Tensor, index: int, like: torch.Tensor) -> torch.Tensor:
    """Set `index`'s slot of a flat K-set buffer, with `like`'s shape and strides."""
    return buffer.as_strided(like.shape, like.stride(), index * like.numel())


def refreshed_set(inputs: dict[str, Any], index: int, calls: int, seed: int) -> dict[str, Any]:
    """Input set `index` of a K = `calls` burst as the refresh of `seed` leaves it, from that set
    as made from its own seed: the judge's copy of what the replay read, bit for bit. The factor
    of an element depends on the seed and its index in the K-set buffer alone, so only this set's
    range (from `index` × numel) is computed: no K sets of factors in the judge's memory. The
    refreshed tensor keeps the set's strides, as the worker's view of its slot does."""
    if not 0 <= index < calls:
        raise ValueError(f"set {index} is not one of the burst's {calls}")
    from sandbox.refresh_kernel import refresh_into  # Triton: imported where the refresh runs

    out = dict(inputs)
    for name, t in inputs.items():
        if refreshable(t):
            refreshed = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
            refresh_into(_flat(t), _flat(refreshed), seed, index * t.numel(), REFRESH_LOW, REFRESH_HIGH)
            out[name] = refreshed
    return out


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A dense tensor's elements in storage order, as its slot of a K-set buffer holds them."""
    return t.as_strided((t.numel(),), (1,), t.storage_offset())


@dataclass
class GraphBurst:
    """A captured burst: the graph, the outputs it writes and the fingerprints it fills."""

    graph: Any  # torch.cuda.CUDAGraph
    outputs: list[Any]
    prints: torch.Tensor  # (K, tensors per output) int64
    inputs: StackedInputs | None  # the input sets the graph reads (kept alive with it)

    def release(self) -> None:
        self.graph.reset()
        self.outputs, self.inputs = [], None


def capture(
    model: Any, inputs: StackedInputs, device: str, *, sync: Any, no_grad: Any = torch.no_grad
) -> GraphBurst | str:
    """A GraphBurst of one forward per input set, or why it could not be captured (a string).
    The refresh runs once first, so its kernel is compiled here and not in the first replay's
    window. The first set runs once on a side stream before the capture, as torch asks (lazy
    state, the allocator), so the capture records only kernel launches."""
    if device != "cuda":
        return "no CUDA graphs on this device"
    sets = inputs.sets
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.current_stream()
    try:
        inputs.refresh(0)  # what it leaves in the live buffers does not matter: each replay refreshes from `base`
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), no_grad():
            tensors = len(output_items(model(**sets[0]))[1])
        torch.cuda.current_stream().wait_stream(side)
        sync()
        prints = empty_prints(len(sets), tensors, "cuda")
        outputs = []
        with no_grad(), gpu_cache.graph_capture(graph):
            for one_set in sets:  # not `inputs`: the StackedInputs the burst keeps for refresh
                outputs.append(model(**one_set))
            fingerprints_into(outputs, prints)
        sync()
    except Exception as exc:  # noqa: BLE001 — any failure to capture is the verdict "uncapturable", with its reason
        reason = f"{type(exc).__name__}: {exc}"[:500]
        try:
            torch.cuda.set_stream(stream)  # a failed capture_end leaves the capture's stream current
            graph.reset()
            sync()
        except Exception as cleanup:  # noqa: BLE001 — the judge's next request finds out if the worker works
            reason += f" (and cleaning up: {type(cleanup).__name__})"
        return reason
    return GraphBurst(graph=graph, outputs=outputs, prints=prints, inputs=inputs)


def replay(burst: GraphBurst, seed: int, *, sync: Any) -> list[list[int]]:
    """The timed window's work: the inputs refreshed from `seed`, one replay, its
    synchronisation, then the fingerprints it wrote (one copy to the host)."""
    if burst.inputs is not None:
        burst.inputs.refresh(seed)
    burst.graph.replay()
    sync()
    return [[int(v) for v in row] for row in burst.prints.tolist()]
