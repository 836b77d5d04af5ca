"""Every reference kernel in gpu_wiki/kernels/ is judged by the evaluator itself: loaded in the
sandbox worker, run under the Triton interpreter on the operator's smoke shape with two fresh
seeds, and compared with the reference. Its front matter must name a real operator."""

import os
from pathlib import Path

import pytest

from atrex_mcp.catalog import Catalog
from atrex_mcp.evaluate import EvalRequest, evaluate
from atrex_mcp.wiki.corpus import kernel_front_matter

ROOT = Path(__file__).resolve().parent.parent
KERNELS = sorted(p for p in (ROOT / "gpu_wiki" / "kernels").glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def catalog():
    return Catalog()


@pytest.fixture(autouse=True)
def _worker_imports_checkout(monkeypatch):
    """The sandbox worker is a fresh interpreter: it finds `sandbox` and `atrex_mcp` through PYTHONPATH
    when the package is not installed."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def test_enough_kernels():
    assert len(KERNELS) >= 15


@pytest.mark.slow
@pytest.mark.parametrize("path", KERNELS, ids=lambda p: p.stem)
def test_kernel_passes_the_evaluator_on_smoke(path, catalog):
    meta, _ = kernel_front_matter(path.read_text(), path.name)
    assert meta["operator"] in catalog.names()
    h200 = meta["h200"]
    assert h200["status"] in ("pending H200 run", "measured", "measured on a subset of shapes")
    assert ("operator_score" in h200) == (h200["status"] == "measured")  # S only over every scored shape
    if h200.get("failures"):  # a kernel that failed on the GPU says what was done about it
        assert "re-validated" in meta.get("gpu_note", ""), "say in gpu_note what was fixed and whether it was re-validated"
    result = evaluate(EvalRequest(op=meta["operator"], source=path.read_text(), shapes=["smoke"], seeds=2,
                                  timing=False, measure_dsl=False), catalog)
    assert result.compiled, result.compile_error
    failures = [(s.id, s.stage, s.category, s.message) for s in result.shapes if not s.correct]
    assert not failures, failures
