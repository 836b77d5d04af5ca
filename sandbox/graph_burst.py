"""The worker's side of the graph burst: K forwards, each followed by a fingerprint of its
output, captured in one CUDA graph, then replayed while the judge times the request.

A replay launches no kernel from Python, so the judge's wall around it is device time, which a
candidate cannot shrink by forging what the worker reports (atrex_mcp.evaluate.timing_witness).
The fingerprints are computed inside the graph, so the reply that ends the timed window already
commits to every output; the judge then compares one of them, chosen after the replay, with its
reference and with its fingerprint. A forward that cannot be captured (a host synchronisation
such as `.item()`, an allocation the capture refuses, a CPU device) makes the burst
uncapturable: the reason goes back as data and the judge falls back on the plain burst.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sandbox.handoff import output_items


def fingerprint(value: Any) -> torch.Tensor:
    """Σ of each output tensor's 32-bit words (its bytes where they fill no words), int64, on its device: one read of the output, cheap
    enough to sit in the graph beside the forward. The judge computes the same on the output it
    fetches, so a fingerprint commits the worker, inside the timed window, to outputs it could
    only know by computing them. It is a commitment, not a checksum (a permutation of the bytes
    has the same sum): the output the judge chooses is compared with its reference in full."""
    sums = []
    for _, t in output_items(value)[1]:
        flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
        if flat.numel() % 4 == 0:  # as 32-bit words where they fit: the same read, more mixing
            flat = (flat if flat.storage_offset() % 4 == 0 else flat.clone()).view(torch.int32)
        sums.append(flat.sum(dtype=torch.int64))
    return torch.stack(sums)


@dataclass
class GraphBurst:
    """A captured burst: the graph, the outputs it writes and the fingerprints it fills."""

    graph: Any  # torch.cuda.CUDAGraph
    outputs: list[Any]
    prints: torch.Tensor  # (K, tensors per output) int64
    sets: list[dict[str, Any]]  # the input sets the graph reads (kept alive with it)

    def release(self) -> None:
        self.graph.reset()
        self.outputs, self.sets = [], []


def capture(model: Any, sets: list[dict[str, Any]], device: str, *, sync: Any,
            no_grad: Any = torch.no_grad) -> GraphBurst | str:
    """A GraphBurst of one forward per input set, or why it could not be captured (a string).
    The first set runs once on a side stream before the capture, as torch asks (lazy state,
    the allocator), so the capture records only kernel launches."""
    if device != "cuda":
        return "no CUDA graphs on this device"
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
            for i, inputs in enumerate(sets):
                out = model(**inputs)
                prints[i].copy_(fingerprint(out))
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
    return GraphBurst(graph=graph, outputs=outputs, prints=prints, sets=sets)


def replay(burst: GraphBurst, *, sync: Any) -> list[list[int]]:
    """One replay and its synchronisation, then the fingerprints it wrote (one copy to the host)."""
    burst.graph.replay()
    sync()
    return [[int(v) for v in row] for row in burst.prints.tolist()]
