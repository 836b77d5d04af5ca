"""Before an evaluation starts: how much memory a shape's inputs take, whether they fit where the
evaluation runs, and roughly how long the evaluation will take.

Input sizes come from the visible files only (make_inputs run on fake tensors: shapes and dtypes,
no memory), so a figure here never carries evaluator-only data."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog, Shape
from atrex_mcp.problemset.flop_counter import tensor_bytes

COPIES = 2  # the worker's inputs for the candidate, and the trusted side's for the reference
# Rough costs: a worker start, then per seed a fixed part and the input bytes at the Triton
# interpreter's pace on CPU (examples/rms_norm_triton.py: 0.7-1 MB/s on one core; it runs every
# program instance in numpy). On a GPU the per-seed terms follow measurements/eval_cost.py's fit on the
# H200 (0.46 s + 3.2 s per GB of traffic per shape at 5 seeds, traffic taken as twice the inputs)
# and the timing and profile stages add a few seconds per shape.
START_S = {"cpu": 3.0, "cuda": 8.0}
PER_SEED_S = {"cpu": 0.1, "cuda": 0.09}
BYTES_PER_S = {"cpu": 1e6, "cuda": 0.8e9}
TIMING_S = 3.0


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def input_bytes(catalog: Catalog, op: str, shape: Shape) -> int | None:
    """Bytes of one input set of `shape`; None when make_inputs cannot run on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    make_inputs = catalog.load_make_inputs(op)
    try:
        with FakeTensorMode():
            return tensor_bytes(make_inputs(seed=0, device="cpu", **shape.inputs))
    except Exception:  # noqa: BLE001 - data-dependent generators cannot be sized this way; the evaluation still runs
        return None


@dataclass
class Room:
    """Memory an evaluation's inputs may use, and where."""

    kind: str
    name: str
    bytes: int


def room() -> Room:
    """The GPU's memory when there is one, else the host's available memory."""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return Room("cuda", f"cuda:0 {props.name}", props.total_memory)
    available = None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return Room("cpu", "host memory", available)


def sizes(catalog: Catalog, op: str, shapes: list[Shape]) -> dict[str, int | None]:
    return {s.id: input_bytes(catalog, op, s) for s in shapes}


def check_fit(op: str, sized: dict[str, int | None], where: Room) -> None:
    """Refuse, in one error naming the estimate, the first shape whose inputs cannot fit."""
    for shape_id, size in sized.items():
        if size is not None and COPIES * size > where.bytes:
            raise AtrexError(
                "input",
                "shape_too_large",
                f"Shape {shape_id!r} of {op} needs about {gib(COPIES * size)} ({COPIES} copies of "
                f"{gib(size)} of inputs); {gib(where.bytes)} is available ({where.name}).",
                "Choose smaller shapes (--shapes), or run where there is more memory.",
            )


def estimate_s(sized: dict[str, int | None], seeds: int, kind: str, timing: bool) -> float:
    """A rough wall time for the evaluation (unknown sizes count as the mean of the known ones)."""
    known = [s for s in sized.values() if s is not None]
    mean = sum(known) / len(known) if known else 0
    per_shape = [seeds * (PER_SEED_S[kind] + (mean if s is None else s) / BYTES_PER_S[kind]) for s in sized.values()]
    extra = TIMING_S * len(sized) if timing and kind == "cuda" else 0.0
    return START_S[kind] + sum(per_shape) + extra
