"""Test-wide setup: without a GPU, Triton kernels run through Triton's interpreter on CPU
tensors, which must be switched on before triton is first imported."""

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:  # Triton then takes CPU tensors only under its interpreter, which is off here
        interpreted = pytest.mark.skip(reason="no Triton interpreter on a GPU host; the gpu tests run the kernel")
        for item in items:
            if "interpreter" in item.keywords:
                item.add_marker(interpreted)
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; GPU results are recorded under measurements/")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
