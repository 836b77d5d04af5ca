"""Every reference kernel in gpu_wiki/kernels/ is judged by the evaluator itself: loaded in the
sandbox worker, run under the Triton interpreter on the operator's smoke shape with two fresh
seeds, and compared with the reference. Its front matter must name a real operator. Every
wiki kernel and every example kernel also packages through the MCP `package` tool: the
evaluator and the output contract agree on what a valid kernel is."""

import ast
import os
import shutil
from pathlib import Path

import pytest

from atrex_mcp.evaluate import EvalRequest, evaluate
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.wiki.corpus import kernel_front_matter
from tests.server_fixtures import config, connect

ROOT = Path(__file__).resolve().parent.parent
KERNELS = sorted(p for p in (ROOT / "gpu_wiki" / "kernels").glob("*.py") if not p.name.startswith("_"))


def _defines_model(path: Path) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in ast.parse(path.read_text()).body)


# examples/<op>_triton.py that define a Model are kernels; the rest (the scripted agent) are not.
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if _defines_model(p))


def _operator(path: Path) -> str:
    if path.parent.name == "kernels":
        return kernel_front_matter(path.read_text(), path.name)[0]["operator"]
    return path.stem.removesuffix("_triton")


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
        assert "re-validated" in meta.get("gpu_note", ""), (
            "say in gpu_note what was fixed and whether it was re-validated"
        )
    result = evaluate(
        EvalRequest(
            op=meta["operator"], source=path.read_text(), shapes=["smoke"], seeds=2, timing=False, measure_dsl=False
        ),
        catalog,
    )
    assert result.compiled, result.compile_error
    failures = [(s.id, s.stage, s.category, s.message) for s in result.shapes if not s.correct]
    assert not failures, failures


def test_examples_are_found():
    assert {p.name for p in EXAMPLES} >= {"rms_norm_triton.py", "silu_and_mul_triton.py"}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_every_wiki_kernel_and_example_packages_through_the_tool(tmp_path, catalog, anyio_backend):
    cfg = config(tmp_path, mode="benchmark")
    refused, packaged = {}, {}
    async with connect(cfg) as client:
        for path in [*KERNELS, *EXAMPLES]:
            name = f"{path.parent.name}-{path.name}"
            shutil.copy(path, cfg.workspaces[0] / name)
            op = _operator(path)
            assert op in catalog.names(), path
            result = await client.call_tool("package", {"op": op, "path": name, "out_dir": f"pkg/{path.stem}"})
            if result.is_error:
                refused[name] = result.content[0].text
            else:
                packaged[name] = result.structured_content
    assert not refused, refused
    assert len(packaged) == len(KERNELS) + len(EXAMPLES)
    for name, result in packaged.items():
        assert result["contract"]["passed"] and result["contract"]["kernels"], name
        assert Path(result["artifact"]).is_file() and Path(result["manifest"]).is_file()
