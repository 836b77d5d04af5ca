"""The output contract (static AST check) on good and bad files, including the ways a file could
reach files, processes or the network, and the packaged artifact: one file plus a manifest with
hashes, from source or from a run's accepted kernel."""

import hashlib
import json

import pytest

from atrex_mcp.candidate_contract import check_contract, strip_main_block
from atrex_mcp.errors import AtrexError
from atrex_mcp.package import package_source
from atrex_mcp.policy import Policy
from atrex_mcp.problemset.catalog import Catalog
from tests.runs_fixtures import KERNEL, OP, loop_with_iterations

REFERENCE = Catalog().visible(OP).reference_source


def rules(source: str) -> list[str]:
    return [v.rule for v in check_contract(source, REFERENCE).violations]


def test_the_fixture_kernel_passes():
    report = check_contract(KERNEL, REFERENCE)
    assert report.passed and report.kernels == ["_rms_norm_row"] and report.warnings == []


@pytest.mark.parametrize(
    "edit, rule",
    [
        (("import torch\n", "import torch\nfrom os import system\n"), "file_or_network_access"),
        (("import torch\n", "import torch\nimport socket\n"), "file_or_network_access"),
        (("import torch\n", "import torch\nfrom subprocess import run\n"), "file_or_network_access"),
        (("import torch\n", "import torch\nimport numpy\n"), "file_or_network_access"),
        (("import torch\n", "import torch\nimport json\n"), "import_not_allowed"),
        (("import torch\n", "import torch\nfrom . import helpers\n"), "self_contained"),
        (
            ("import torch\n", "import torch\nfrom torch.utils.cpp_extension import load_inline\n"),
            "file_or_network_access",
        ),
        (("out = torch.empty_like(x)", "out = torch.load('cache.pt')"), "file_or_network_access"),
        (("out = torch.empty_like(x)", "out = torch.empty_like(x); open('/tmp/log', 'w')"), "forbidden_name"),
        (("out = torch.empty_like(x)", "out = eval('torch.empty_like(x)')"), "forbidden_name"),
        (("out = torch.empty_like(x)", "out = __import__('torch').empty_like(x)"), "forbidden_name"),
        (
            ("out = torch.empty_like(x)", "out = torch.empty_like(x); f = x.__class__.__subclasses__"),
            "forbidden_attribute",
        ),
        (("out = torch.empty_like(x)", "out = getattr(torch, 'empty' + '_like')(x)"), "dynamic_attribute"),
        (("class Model(nn.Module):", "class Model:"), "model_not_module"),
        (("class Model(nn.Module):", "class Net(nn.Module):"), "no_model"),
        (
            (
                "def forward(self, x: torch.Tensor, weight: torch.Tensor)",
                "def forward(self, weight: torch.Tensor, x: torch.Tensor)",
            ),
            "signature_mismatch",
        ),
        (
            ("def forward(self, x: torch.Tensor, weight: torch.Tensor)", "def forward(self, x: torch.Tensor)"),
            "signature_mismatch",
        ),
        (
            ("def __init__(self, *, eps: float = 1e-6):", "def __init__(self, *, eps: float = 1e-6, block: int):"),
            "signature_mismatch",
        ),
        (("def __init__(self, *, eps: float = 1e-6):", "def __init__(self):"), "signature_mismatch"),
        (
            (
                "_rms_norm_row[(rows,)](x, weight, out, cols, self.eps, BLOCK=triton.next_power_of_2(cols))",
                "out = torch.nn.functional.rms_norm(x.float(), (cols,), weight.float(), self.eps).to(x.dtype)",
            ),
            "dsl_not_used",
        ),
        (("@triton.jit\n", ""), "dsl_not_used"),
        (("class Model(nn.Module):", "def test_kernel():\n    assert True\n\n\nclass Model(nn.Module):"), "test_code"),
        (("import torch\n", "import torch\nimport torch as\n"), "syntax"),
    ],
)
def test_bad_files_are_refused_with_the_rule(edit, rule):
    old, new = edit
    assert old in KERNEL
    assert rule in rules(KERNEL.replace(old, new, 1))


LINE = "out = torch.empty_like(x)"
KEEP = "; out = torch.empty_like(x)"  # the rest of the line: forward still returns out
ACCESS, NAME, ATTRIBUTE = "file_or_network_access", "forbidden_name", "forbidden_attribute"
# Ways to reach files, processes, the network or native code: (name, extra imports, replacement of LINE, rule).
BYPASSES = [
    ("getattr_literal", "", "out = getattr(torch, 'load')('w.pt')", ACCESS),
    ("operator_attrgetter", "import operator\n", "out = operator.attrgetter('load')(torch)('w.pt')", ACCESS),
    ("torch_serialization_load", "", "out = torch.serialization.load('w.pt')", ACCESS),
    ("untyped_storage_from_file", "", "s = torch.UntypedStorage.from_file('/etc/passwd', False, 64)" + KEEP, ACCESS),
    (
        "model_zoo_load_url",
        "import torch.utils.model_zoo\n",
        "out = torch.utils.model_zoo.load_url('http://x/w.pt')",
        ACCESS,
    ),
    (
        "hub_load_state_dict_from_url",
        "from torch.hub import load_state_dict_from_url\n",
        "out = load_state_dict_from_url('http://x/w.pt')",
        ACCESS,
    ),
    ("torch_multiprocessing_process", "", "torch.multiprocessing.Process(target=print).start()" + KEEP, ACCESS),
    (
        "get_type_hints_evaluates_string_annotation",
        "import typing\n",
        "def probe(a: \"__import__('os').system('id')\"): pass\n        typing.get_type_hints(probe)" + KEEP,
        NAME,
    ),
    ("string_annotation_alone", "", "leak: \"open('/etc/passwd').read()\" = None" + KEEP, NAME),
    ("string_annotation_nested", "", "leak: \"list['eval(1)']\" = None" + KEEP, NAME),
    ("dunder_import", "", "out = __import__('torch').empty_like(x)", NAME),
    ("importlib", "import importlib\n", "out = importlib.import_module('torch').empty_like(x)", ACCESS),
    ("builtins_open", "import builtins\n", "builtins.open('/etc/passwd')" + KEEP, ACCESS),
    ("eval", "", "out = eval('torch.empty_like(x)')", NAME),
    ("exec", "", "exec('import os')" + KEEP, NAME),
    ("compile", "", "c = compile('1', 'f', 'eval')" + KEEP, NAME),
    ("globals_lookup", "", "out = globals()['torch'].empty_like(x)", NAME),
    ("vars_lookup", "", "out = vars(torch)['load']('w.pt')", NAME),
    ("ops_load_library", "", "torch.ops.load_library('/tmp/evil.so')" + KEEP, ACCESS),
    ("ctypes", "import ctypes\n", "ctypes.CDLL('libc.so.6')" + KEEP, ACCESS),
    ("subprocess", "import subprocess\n", "subprocess.run(['id'])" + KEEP, ACCESS),
    ("socket", "import socket\n", "socket.socket()" + KEEP, ACCESS),
    ("pathlib_write", "from pathlib import Path\n", "Path('/tmp/x').write_text('1')" + KEEP, ACCESS),
    ("io_open", "import io\n", "io.open('/etc/passwd')" + KEEP, ACCESS),
    ("numpy_load", "import numpy as np\n", "out = torch.from_numpy(np.load('w.npy'))", ACCESS),
    ("numpy_memmap", "from numpy import memmap\n", "m = memmap('/tmp/m')" + KEEP, ACCESS),
    ("torch_from_file", "", "out = torch.from_file('/etc/passwd', size=8)", ACCESS),
    ("tempfile", "import tempfile\n", "tempfile.mkstemp()" + KEEP, ACCESS),
    ("shutil", "import shutil\n", "shutil.rmtree('/tmp/x')" + KEEP, ACCESS),
    ("pickle", "import pickle\n", "pickle.loads(b'')" + KEEP, ACCESS),
    ("sys_modules", "import sys\n", "sys.modules['os'].system('id')" + KEEP, ACCESS),
    ("string_concatenation", "", "out = getattr(torch, 'lo' + 'ad')('w.pt')", "dynamic_attribute"),
    # variants of the above
    ("module_bound_to_a_name", "", "t = torch; out = t.load('w.pt')", "module_as_value"),
    ("module_passed_as_argument", "", "out = (lambda m: m.empty_like(x))(torch)", "module_as_value"),
    ("submodule_alias", "", "c = torch.cuda; c.memory.memory_snapshot()" + KEEP, ACCESS),
    ("module_reexported_as_attribute", "", "torch.os.system('id')" + KEEP, ACCESS),
    ("module_dict", "", "out = torch.__dict__['load']('w.pt')", ATTRIBUTE),
    ("getattribute", "", "out = object.__getattribute__(torch, 'load')('w.pt')", ATTRIBUTE),
    (
        "getattr_as_a_value",
        "import functools\n",
        "out = functools.reduce(getattr, ['serialization', 'load'], torch)('w.pt')",
        "dynamic_attribute",
    ),
    ("getattr_submodule_then_member", "", "out = getattr(torch, 'hub').load('repo', 'model')", ACCESS),
    ("private_native_module", "", "torch._C._jit_set_profiling_executor(False)" + KEEP, ATTRIBUTE),
    ("os_function", "import os\n", "os.system('id')" + KEEP, ACCESS),
    ("os_path", "import os.path\n", "out = torch.empty_like(x)", ACCESS),
    ("from_os_import_function", "from os import listdir\n", "listdir('/')" + KEEP, ACCESS),
    ("environ_write", "import os\n", "os.environ['TRITON_CACHE_DIR'] = '/tmp/x'" + KEEP, ACCESS),
    ("environ_update", "from os import environ\n", "environ.update(A='1')" + KEEP, ACCESS),
    ("environ_as_value", "import os\n", "e = os.environ" + KEEP, ACCESS),
    ("array_tofile", "", "x.numpy().tofile('/tmp/x')" + KEEP, ACCESS),
    ("patch_a_module", "", "torch.cuda.synchronize = lambda: None" + KEEP, "module_patched"),
    ("setattr_on_a_module", "", "setattr(torch.cuda, 'synchronize', print)" + KEEP, "module_patched"),
    ("operator_override", "", "torch.library.Library('aten', 'IMPL')" + KEEP, ACCESS),
    ("function_globals", "", "g = (lambda: 0).__globals__" + KEEP, ATTRIBUTE),
    ("subclasses_walk", "", "s = (1).__class__.__base__.__subclasses__()" + KEEP, ATTRIBUTE),
    ("reduce_ex", "", "r = x.__reduce_ex__(2)" + KEEP, ATTRIBUTE),
    ("triton_build", "", "triton.runtime.build._build('m', 's', '/tmp')" + KEEP, ACCESS),
    ("from_import_member", "from torch.serialization import load as restore\n", "out = restore('w.pt')", ACCESS),
    (
        "module_reached_again_through_a_submodule",
        "",
        "torch.nn.modules.module.torch.distributed.init_process_group()" + KEEP,
        ACCESS,
    ),
    ("torch_ops_import_module", "", "torch.ops.import_module('os')" + KEEP, ACCESS),
    ("frame_globals", "", "f = (e for e in ()).gi_frame.f_globals" + KEEP, ACCESS),
]


@pytest.mark.parametrize("imports, line, rule", [b[1:] for b in BYPASSES], ids=[b[0] for b in BYPASSES])
def test_ways_to_reach_files_processes_or_the_network_are_refused(imports, line, rule):
    source = KERNEL.replace("import torch\n", f"import torch\n{imports}", 1).replace(LINE, line, 1)
    report = check_contract(source, REFERENCE)
    assert not report.passed
    assert rule in [v.rule for v in report.violations], [v.describe() for v in report.violations]
    assert all(v.line and v.fix for v in report.violations)


@pytest.mark.parametrize(
    "imports, line",
    [
        (
            "import os\n",
            "out = torch.empty_like(x) if os.environ.get('TRITON_INTERPRET') == '1' else torch.empty_like(x)",
        ),
        ("import os\n", "out = torch.empty_like(x) if 'TRITON_INTERPRET' in os.environ or os.getenv('X') else None"),
        (
            "from os import environ, getenv\n",
            "out = torch.empty_like(x) if environ['HOME'] and getenv('X') is None else None",
        ),
        ("", "out: 'torch.Tensor' = torch.empty_like(x)"),
        ("", "out = torch.empty_like(x) if x.dim() else torch.ops.aten._to_copy(torch._scaled_mm(x, x.t()))"),
    ],
)
def test_honest_kernels_pass_environment_reads_and_public_api(imports, line):
    source = KERNEL.replace("import torch\n", f"import torch\n{imports}", 1).replace(LINE, line, 1)
    report = check_contract(source, REFERENCE)
    assert report.passed, [v.describe() for v in report.violations]


def test_files_the_parser_cannot_hold_are_refused_as_syntax():
    deep = KERNEL.replace(LINE, "out = " + "(" * 500 + "x" + ")" * 500 + KEEP.replace(";", "\n       "), 1)
    nulls = KERNEL.replace(LINE, LINE + "  # \x00", 1)
    long_chain = KERNEL.replace(LINE, "y = x" + "+x" * 100_000 + KEEP, 1)
    long_annotation = KERNEL.replace(LINE, 'y: "x' + "|x" * 100_000 + '" = 1' + KEEP, 1)
    for source in (deep, nulls, long_chain, long_annotation):
        report = check_contract(source, REFERENCE)
        assert not report.passed and report.violations[0].rule == "syntax"


def test_violations_name_the_line_of_the_submitted_file_and_the_fix():
    leaky = KERNEL.replace("import torch\n", "import torch\nimport os\n", 1).replace(LINE, "os.remove('x')" + KEEP, 1)
    source = 'if __name__ == "__main__":\n    print(1)\n' + leaky
    (violation,) = check_contract(source, REFERENCE).violations
    assert source.splitlines()[violation.line - 1].strip().startswith("os.remove")
    assert violation.rule == "file_or_network_access" and "os.environ.get" in violation.fix
    assert violation.describe().startswith(f"file_or_network_access (line {violation.line}): use of os.remove")


def test_launch_through_helpers_methods_and_attributes_counts():
    helper = KERNEL.replace(
        "        _rms_norm_row[(rows,)](x, weight, out, cols, self.eps, BLOCK=triton.next_power_of_2(cols))\n",
        "        self._launch(x, weight, out)\n",
    ).replace(
        "    def forward(",
        "    def _launch(self, x, weight, out):\n        _go(x, weight, out, self.eps)\n\n    def forward(",
    ) + (
        "\n\ndef _go(x, weight, out, eps):\n    _rms_norm_row[(x.shape[0],)](x, weight, out, x.shape[1], eps, "
        "BLOCK=triton.next_power_of_2(x.shape[1]))\n"
    )
    assert check_contract(helper, REFERENCE).kernels == ["_rms_norm_row"]
    attribute = KERNEL.replace(
        "        self.eps = eps\n", "        self.eps = eps\n        self.kernel = _rms_norm_row\n"
    ).replace("_rms_norm_row[(rows,)]", "self.kernel[(rows,)]")
    assert check_contract(attribute, REFERENCE).passed
    aliased = KERNEL.replace("import triton\n", "import triton\nfrom triton import jit\n").replace(
        "@triton.jit", "@jit"
    )
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
        leaky = KERNEL.replace("import torch\n", "import torch\nimport subprocess\n")
        package_source(leaky, OP, Catalog(), tmp_path / "new")
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
    hidden = service.package(run_id, tmp_path / "benchmark", policy=Policy("benchmark", service.catalog)).manifest_data
    assert "score" not in hidden["run"]["final"]


def test_runs_refuse_kernels_that_could_never_be_packaged(tmp_path):
    service, run_id = loop_with_iterations(tmp_path, speeds=[])
    prof = service.store.save_profile(op=OP, shape="0", source_sha256="0" * 64, tool="ncu", report={})
    from tests.runs_fixtures import plan, source

    bad = source(2.0, "leaky").replace("import torch\n", "import torch\nimport subprocess\n", 1)
    record = service.record_iteration(run_id, plan(prof), bad)
    assert record.status == "failed" and "output contract" in record.reason and service.judge.calls["time_pair"] == 0
