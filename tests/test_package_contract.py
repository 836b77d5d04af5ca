"""The output contract (static AST check) on good and bad files, and the packaged artifact:
one file plus a manifest with hashes, from source or from a run's accepted kernel."""

import hashlib
import json

import pytest

from atrex_mcp.catalog import Catalog
from atrex_mcp.errors import AtrexError
from atrex_mcp.package import check_contract, package_source, strip_main_block
from tests.runs_fixtures import KERNEL, OP, loop_with_iterations

REFERENCE = Catalog().visible(OP).reference_source


def rules(source: str) -> list[str]:
    return [v.rule for v in check_contract(source, REFERENCE).violations]


def test_the_fixture_kernel_passes():
    report = check_contract(KERNEL, REFERENCE)
    assert report.passed and report.kernels == ["_rms_norm_row"] and report.warnings == []


@pytest.mark.parametrize("edit, rule", [
    (("import torch\n", "import torch\nimport os\n"), "file_or_network_access"),
    (("import torch\n", "import torch\nimport socket\n"), "file_or_network_access"),
    (("import torch\n", "import torch\nfrom subprocess import run\n"), "file_or_network_access"),
    (("import torch\n", "import torch\nimport numpy\n"), "import_not_allowed"),
    (("import torch\n", "import torch\nfrom . import helpers\n"), "self_contained"),
    (("import torch\n", "import torch\nfrom torch.utils.cpp_extension import load_inline\n"), "file_or_network_access"),
    (("out = torch.empty_like(x)", "out = torch.load('cache.pt')"), "file_or_network_access"),
    (("out = torch.empty_like(x)", "out = torch.empty_like(x); open('/tmp/log', 'w')"), "forbidden_name"),
    (("out = torch.empty_like(x)", "out = eval('torch.empty_like(x)')"), "forbidden_name"),
    (("out = torch.empty_like(x)", "out = __import__('torch').empty_like(x)"), "forbidden_name"),
    (("out = torch.empty_like(x)", "out = torch.empty_like(x); f = x.__class__.__subclasses__"), "forbidden_attribute"),
    (("out = torch.empty_like(x)", "out = getattr(torch, 'empty' + '_like')(x)"), "dynamic_attribute"),
    (("class Model(nn.Module):", "class Model:"), "model_not_module"),
    (("class Model(nn.Module):", "class Net(nn.Module):"), "no_model"),
    (("def forward(self, x: torch.Tensor, weight: torch.Tensor)", "def forward(self, weight: torch.Tensor, x: torch.Tensor)"), "signature_mismatch"),
    (("def forward(self, x: torch.Tensor, weight: torch.Tensor)", "def forward(self, x: torch.Tensor)"), "signature_mismatch"),
    (("def __init__(self, *, eps: float = 1e-6):", "def __init__(self, *, eps: float = 1e-6, block: int):"), "signature_mismatch"),
    (("def __init__(self, *, eps: float = 1e-6):", "def __init__(self):"), "signature_mismatch"),
    (("_rms_norm_row[(rows,)](x, weight, out, cols, self.eps, BLOCK=triton.next_power_of_2(cols))",
      "out = torch.nn.functional.rms_norm(x.float(), (cols,), weight.float(), self.eps).to(x.dtype)"), "dsl_not_used"),
    (("@triton.jit\n", ""), "dsl_not_used"),
    (("class Model(nn.Module):", "def test_kernel():\n    assert True\n\n\nclass Model(nn.Module):"), "test_code"),
    (("import torch\n", "import torch\nimport torch as\n"), "syntax"),
])
def test_bad_files_are_refused_with_the_rule(edit, rule):
    old, new = edit
    assert old in KERNEL
    assert rule in rules(KERNEL.replace(old, new, 1))


def test_launch_through_helpers_methods_and_attributes_counts():
    helper = KERNEL.replace("        _rms_norm_row[(rows,)](x, weight, out, cols, self.eps, BLOCK=triton.next_power_of_2(cols))\n",
                            "        self._launch(x, weight, out)\n").replace(
        "    def forward(", "    def _launch(self, x, weight, out):\n        _go(x, weight, out, self.eps)\n\n    def forward(") + (
        "\n\ndef _go(x, weight, out, eps):\n    _rms_norm_row[(x.shape[0],)](x, weight, out, x.shape[1], eps, BLOCK=triton.next_power_of_2(x.shape[1]))\n")
    assert check_contract(helper, REFERENCE).kernels == ["_rms_norm_row"]
    attribute = KERNEL.replace("        self.eps = eps\n", "        self.eps = eps\n        self.kernel = _rms_norm_row\n").replace(
        "_rms_norm_row[(rows,)]", "self.kernel[(rows,)]")
    assert check_contract(attribute, REFERENCE).passed
    aliased = KERNEL.replace("import triton\n", "import triton\nfrom triton import jit\n").replace("@triton.jit", "@jit")
    assert check_contract(aliased, REFERENCE).passed
    compiled = KERNEL.replace("out = torch.empty_like(x)", "out = torch.empty_like(x)\n        torch.compile")
    assert any("torch.compile" in w for w in check_contract(compiled, REFERENCE).warnings)


def test_main_block_is_removed_from_the_artifact(tmp_path):
    source = KERNEL + '\n\nif __name__ == "__main__":\n    print(Model()(torch.randn(2, 8), torch.ones(8)))\n'
    stripped, removed = strip_main_block(source)
    assert "__main__" not in stripped and len(removed) == 1
    result = package_source(source, OP, Catalog(), tmp_path / "out")
    written = (tmp_path / "out" / f"{OP}.py").read_bytes()
    assert b"__main__" not in written
    assert result.manifest_data["contract"]["removed"] == removed


def test_package_writes_artifact_and_manifest_with_hashes(tmp_path):
    result = package_source(KERNEL, OP, Catalog(), tmp_path / "pkg")
    artifact = (tmp_path / "pkg" / f"{OP}.py").read_bytes()
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert sorted(p.name for p in (tmp_path / "pkg").iterdir()) == ["manifest.json", f"{OP}.py"]
    assert manifest["artifact"]["sha256"] == hashlib.sha256(artifact).hexdigest() == result.sha256
    assert manifest["submitted_sha256"] == hashlib.sha256(KERNEL.encode()).hexdigest()
    assert manifest["reference_sha256"] == hashlib.sha256(REFERENCE.encode()).hexdigest()
    assert manifest["op"] == OP and manifest["run"] is None and manifest["contract"]["kernels"] == ["_rms_norm_row"]
    package_source(KERNEL, OP, Catalog(), tmp_path / "pkg")  # re-packaging into its own folder is fine


def test_package_refuses_a_folder_with_other_files_and_a_broken_kernel(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "test_kernel.py").write_text("assert True\n")
    with pytest.raises(AtrexError, match="holds other files"):
        package_source(KERNEL, OP, Catalog(), tmp_path / "busy")
    with pytest.raises(AtrexError, match="output contract") as err:
        package_source(KERNEL.replace("import torch\n", "import torch\nimport os\n"), OP, Catalog(), tmp_path / "new")
    assert err.value.info.category == "contract_violation" and not (tmp_path / "new").exists()


def test_package_from_a_run_carries_the_accepted_chain(tmp_path):
    service, run_id = loop_with_iterations(tmp_path, speeds=[1.3, 1.0, 1.6])
    result = service.package(run_id, tmp_path / "deliverable")
    manifest = result.manifest_data
    assert manifest["run"]["run_id"] == run_id and manifest["run"]["accepted_iteration"] == 3
    assert [c["number"] for c in manifest["run"]["chain"]] == [0, 1, 3]
    assert manifest["run"]["chain"][0]["kind"] == "baseline"
    final = manifest["run"]["final"]
    assert final["speedup_vs_baseline"] == pytest.approx(1.6, rel=0.05) and final["score"]["0"] > 0
    assert "speed: 1.6" in (tmp_path / "deliverable" / f"{OP}.py").read_text()
    assert service.store.events(run_id)[-1].kind == "packaged"
    hidden = service.package(run_id, tmp_path / "benchmark", reveal_figures=False).manifest_data
    assert "score" not in hidden["run"]["final"]


def test_runs_refuse_kernels_that_could_never_be_packaged(tmp_path):
    service, run_id = loop_with_iterations(tmp_path, speeds=[])
    prof = service.store.save_profile(op=OP, shape="0", source_sha256="0" * 64, tool="ncu", report={})
    from tests.runs_fixtures import plan, source
    bad = source(2.0, "leaky").replace("import torch\n", "import torch\nimport os\n", 1)
    record = service.record_iteration(run_id, plan(prof), bad)
    assert record.status == "failed" and "output contract" in record.reason and service.judge.calls["time_pair"] == 0
