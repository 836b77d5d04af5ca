"""A tiny user problem (x @ w, SiLU, scale) for the problem-set tests."""

import json

REFERENCE = """import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, scale: float = 1.0):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu((x @ w).float()).to(x.dtype) * self.scale
"""

INPUT = """import torch


def make_inputs(*, seed: int, device="cpu", rows: int, cols: int, out: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen, dtype=torch.bfloat16, device=device)
    w = torch.randn(cols, out, generator=gen, dtype=torch.bfloat16, device=device)
    return {"x": x, "w": w}
"""

SHAPES = {
    "op": "gated_proj",
    "shapes": [
        {"id": "a", "init": {"scale": 2.0}, "inputs": {"rows": 64, "cols": 32, "out": 16}},
        {"id": "b", "init": {}, "inputs": {"rows": 1000, "cols": 512, "out": 256}},
        {"id": "smoke", "smoke": True, "init": {}, "inputs": {"rows": 5, "cols": 8, "out": 4}},
    ],
}


def make_problem(root, name="gated_proj", reference=REFERENCE, inputs=INPUT, shapes=SHAPES):
    d = root / name
    d.mkdir(parents=True)
    (d / "reference.py").write_text(reference)
    (d / "input.py").write_text(inputs)
    (d / "shapes.json").write_text(json.dumps(shapes))
    return d
