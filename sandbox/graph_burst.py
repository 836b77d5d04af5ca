"""The worker's side of the graph burst: K forwards, each followed by a fingerprint of its
output, captured in one CUDA graph, then replayed while the judge times the request.

A replay launches no kernel from Python, so the judge's wall around it is device time, which a
candidate cannot shrink by forging what the worker reports (atrex_mcp.evaluate.timing_witness).
The fingerprints are computed inside the graph, so the reply that ends the timed window already
commits to every output; the judge then compares one of them, chosen after the replay, with its
reference and with its fingerprint.

The input sets the graph reads are refreshed inside the timed window, before the replay, from a
seed that arrives with the replay request (`StackedInputs.refresh`): every floating-point input
is multiplied element by element by a seeded draw from U(REFRESH_LOW, REFRESH_HIGH), made on the
device. The worker cannot know the inputs, and so the outputs, before the judge's clock runs.
Each such input's K sets live in one buffer, so a refresh is two launches per input whatever K
is; the judge measures the same refresh on buffers of the same sizes and takes it off the wall.
Integer inputs (indices, tables, lengths) and fp8 payloads keep their captured values.

A forward that cannot be captured (a host synchronisation such as `.item()`, an allocation the
capture refuses, a CPU device) makes the burst uncapturable: the reason goes back as data and
the judge falls back on the plain burst.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sandbox.handoff import output_items


def fingerprint(value: Any) -> torch.Tensor:
    """Σ of each output tensor's 32-bit words (its bytes where they fill no words), int64, on its
    device: one read of the output, cheap enough to sit in the graph beside the forward. The judge
    computes the same on the output it fetches, so a fingerprint commits the worker, inside the timed
    window, to outputs it could only know by computing them. It is a commitment, not a checksum (a
    permutation of the bytes has the same sum): the output the judge chooses is compared with its
    reference in full."""
    words = _words(value)
    row = torch.empty(len(words), dtype=torch.int64, device=words[0].device if words else "cpu")
    _sum_into(words, row)
    return row


def fingerprint_into(value: Any, row: torch.Tensor) -> None:
    """`fingerprint(value)` written into `row` (int64, one element per output tensor): one
    reduction launch per output tensor and nothing else, so a graph of K forwards spends as
    little as it can on them and the judge's calibration of their time errs by as little."""
    _sum_into(_words(value), row)


def _sum_into(words: list[torch.Tensor], row: torch.Tensor) -> None:
    for i, flat in enumerate(words):
        torch.sum(flat, dim=0, dtype=torch.int64, out=row[i])


def _words(value: Any) -> list[torch.Tensor]:
    """Each output tensor's bytes as one flat tensor: 32-bit words where they fill words."""
    words = []
    for _, t in output_items(value)[1]:
        flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
        if flat.numel() % 4 == 0:  # as 32-bit words where they fit: the same read, more mixing
            flat = (flat if flat.storage_offset() % 4 == 0 else flat.clone()).view(torch.int32)
        words.append(flat)
    return words


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


def draw(generator: torch.Generator, buffer: torch.Tensor) -> torch.Tensor:
    """The refresh's factors, written into `buffer` (shared by the worker and the judge, which
    must draw the same numbers in the same order)."""
    return buffer.uniform_(REFRESH_LOW, REFRESH_HIGH, generator=generator)


def generator(seed: int, device: str | torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


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
        """Every refreshable input of every set := its pristine value × a factor drawn from `seed`
        on the device: two launches per input, whatever K is."""
        if not self.live:
            return
        gen = generator(seed, self.live[0].device)
        for live, base in zip(self.live, self.base):
            draw(gen, live).mul_(base)


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return t.shape, t.stride(), t.dtype, t.device


def set_view(buffer: torch.Tensor, index: int, like: torch.Tensor) -> torch.Tensor:
    """Set `index`'s slot of a flat K-set buffer, with `like`'s shape and strides."""
    return buffer.as_strided(like.shape, like.stride(), index * like.numel())


def refreshed_set(inputs: dict[str, Any], index: int, calls: int, seed: int) -> dict[str, Any]:
    """Input set `index` of a K = `calls` burst as the refresh of `seed` leaves it, from that set
    as made from its own seed: the judge's copy of what the replay read. The factors are drawn
    for all K sets, in the worker's order and sizes, since a device generator's numbers depend
    on the size of the draw; set `index`'s slice multiplies the set."""
    out = dict(inputs)
    names = [name for name, t in inputs.items() if refreshable(t)]
    if not names:
        return out
    gen = generator(seed, inputs[names[0]].device)
    for name in names:
        t = inputs[name]
        factors = draw(gen, torch.empty(calls * t.numel(), dtype=t.dtype, device=t.device))
        out[name] = t * set_view(factors, index, t)
        del factors
    return out


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
    The first set runs once on a side stream before the capture, as torch asks (lazy state,
    the allocator), so the capture records only kernel launches."""
    if device != "cuda":
        return "no CUDA graphs on this device"
    sets = inputs.sets
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.current_stream()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), no_grad():
            tensors = len(output_items(model(**sets[0]))[1])
        torch.cuda.current_stream().wait_stream(side)
        sync()
        prints = torch.zeros((len(sets), tensors), dtype=torch.int64, device="cuda")
        outputs = []
        with no_grad(), torch.cuda.graph(graph):
            for i, one_set in enumerate(sets):  # not `inputs`: the StackedInputs the burst keeps for refresh
                out = model(**one_set)
                fingerprint_into(out, prints[i])
                outputs.append(out)
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
