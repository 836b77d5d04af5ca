"""The gate end to end on CPU: a real Triton kernel through the interpreter in the sandbox,
the compile/runtime/correctness taxonomy, seeds, cancellation and the CLI's JSON."""

from __future__ import annotations

import json
import threading

import pytest

from atrex_mcp.cli import main as cli_main
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import EvalRequest, evaluate
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.session import classify
from atrex_mcp.problemset.catalog import Catalog
from eval_support import EXAMPLES, make_problem_root, run_eval

REFERENCE_MATH = """
    def forward(self, x, weight):
        xf = x.float()
        return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps) * weight.float()).to(x.dtype)
"""
HEADER = (
    "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def __init__(self, *, eps=1e-6):\n   "
    "     super().__init__()\n        self.eps = eps\n"
)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return Catalog(make_problem_root(tmp_path_factory.mktemp("problems")))


def test_triton_kernel_passes_in_the_interpreter_and_records_its_conditions(catalog):
    result = run_eval(catalog, (EXAMPLES / "rms_norm_triton.py").read_text(), shapes=["0", "1"], seeds=2)
    assert result.compiled and result.compile_error is None
    assert [s.id for s in result.shapes] == ["0", "1"] and all(s.correct for s in result.shapes)
    for shape in result.shapes:
        assert shape.category is None and shape.time_ms is None and shape.timing_note == "not timed: no GPU"
        assert shape.score is None and shape.dsl_share is None and len(shape.seeds) == 2
    assert result.seeds == [seed for s in result.shapes for seed in s.seeds]
    assert result.operator_score is None and "not timed" in result.operator_score_note
    assert result.device.kind == "cpu" and result.device.versions["triton"]
    assert result.isolation.landlock_enforced and result.isolation.rlimits["RLIMIT_CORE"] == 0
    assert result.overhead.worker_start_s > 0 and result.overhead.restarts == 0


@pytest.mark.slow
def test_seeds_are_fresh_per_evaluation(catalog):
    source = HEADER + REFERENCE_MATH
    first, second = run_eval(catalog, source, seeds=3), run_eval(catalog, source, seeds=3)
    assert len(set(first.seeds)) == 3 and not set(first.seeds) & set(second.seeds)


@pytest.mark.slow
def test_eager_baseline_is_the_reference(catalog):
    result = evaluate(EvalRequest(op="rms_norm", baseline="eager", shapes=["0"], seeds=1), catalog)
    assert result.candidate == "eager" and result.shapes[0].correct


@pytest.mark.parametrize(
    ("source", "category"),
    [
        ("def broken(:\n", tx.SYNTAX_ERROR),
        ("import no_such_module_xyz\n", tx.IMPORT_ERROR),
        ("raise ValueError('at import')\n", tx.IMPORT_ERROR),
        ("import torch\nclass Other(torch.nn.Module):\n    pass\n", tx.NO_MODEL),
        ("class Model:\n    pass\n", tx.NOT_NN_MODULE),
        (HEADER + "\n    def forward(self, a, b, c):\n        return a\n", tx.SIGNATURE_MISMATCH),
        (
            "import torch\nclass Model(torch.nn.Module):\n    def __init__(self, alpha):\n        super().__init__()\n"
            "    def forward(self, x, weight):\n        return x\n",
            tx.SIGNATURE_MISMATCH,
        ),
    ],
)
@pytest.mark.slow
def test_compile_stage_taxonomy(catalog, source, category):
    result = run_eval(catalog, source)
    assert not result.compiled
    assert result.compile_error.category == category and result.compile_error.stage == "compile"
    assert all(s.stage == tx.COMPILE and s.category == category and not s.correct for s in result.shapes)


@pytest.mark.slow
def test_import_that_hangs_or_exhausts_memory_fails_at_compile(catalog):
    slow = evaluate(
        EvalRequest(op="rms_norm", source="import time\ntime.sleep(600)\n", shapes=["0"], seeds=1, compile_timeout_s=3),
        catalog,
    )
    assert (slow.compile_error.stage, slow.compile_error.category) == ("compile", tx.COMPILE_TIMEOUT)
    hungry = run_eval(catalog, "block = bytearray(1 << 40)\n")
    assert (hungry.compile_error.stage, hungry.compile_error.category) == ("compile", tx.COMPILE_OOM)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            {"type": "triton.compiler.errors.CompilationError", "message": "at 3:4: ..."},
            (tx.COMPILE, tx.KERNEL_COMPILE_ERROR),
        ),
        (
            {"type": "torch.AcceleratorError", "message": "CUDA error: an illegal memory access was encountered"},
            (tx.RUNTIME, tx.CUDA_FAULT),
        ),
        (
            {"type": "builtins.RuntimeError", "message": "CUDA error: device-side assert triggered"},
            (tx.RUNTIME, tx.CUDA_FAULT),
        ),
        ({"type": "torch.OutOfMemoryError", "message": "CUDA out of memory."}, (tx.RUNTIME, tx.OOM)),
        (
            {"type": "builtins.RuntimeError", "message": "DefaultCPUAllocator: can't allocate memory"},
            (tx.RUNTIME, tx.OOM),
        ),
        ({"type": "builtins.ValueError", "message": "bad"}, (tx.RUNTIME, tx.EXCEPTION)),
        ({"stage": "compile", "category": "no_model", "type": "", "message": ""}, (tx.COMPILE, tx.NO_MODEL)),
        (
            {"stage": "compile", "category": "made_up", "type": "builtins.ValueError", "message": ""},
            (tx.RUNTIME, tx.EXCEPTION),
        ),
    ],
)
def test_worker_errors_map_to_stable_categories(error, expected):
    assert classify(error) == expected


@pytest.mark.parametrize(
    ("body", "stage", "category"),
    [
        ("        raise RuntimeError('boom')\n", tx.RUNTIME, tx.EXCEPTION),
        ("        return x[:1]\n", tx.RUNTIME, tx.WRONG_SHAPE),
        ("        return {'out': x}\n", tx.RUNTIME, tx.WRONG_OUTPUT_TYPE),
        ("        return (x, x)\n", tx.RUNTIME, tx.WRONG_OUTPUT_TYPE),
        ("        return x * 2\n", tx.CORRECTNESS, tx.NUMERIC_MISMATCH),
    ],
)
@pytest.mark.slow
def test_runtime_and_correctness_taxonomy(catalog, body, stage, category):
    result = run_eval(catalog, HEADER + "\n    def forward(self, x, weight):\n" + body)
    shape = result.shapes[0]
    assert result.compiled and not shape.correct
    assert (shape.stage, shape.category) == (stage, category), shape.message


def test_numeric_mismatch_reports_where_and_how_much(catalog):
    result = run_eval(catalog, HEADER + "\n    def forward(self, x, weight):\n        return x\n")
    shape = result.shapes[0]
    assert shape.category == tx.NUMERIC_MISMATCH and "seed #0" in shape.message
    detail = shape.mismatch[0]
    assert detail.output == "out" and detail.mismatches > 0 and detail.first_bad_index is not None
    assert detail.max_abs_error > 0 and 0 < detail.mismatch_fraction <= 1


@pytest.mark.slow
def test_exception_message_reaches_the_caller(catalog):
    result = run_eval(
        catalog, HEADER + "\n    def forward(self, x, weight):\n        raise RuntimeError('custom-marker-42')\n"
    )
    assert "custom-marker-42" in result.shapes[0].message


@pytest.mark.slow
def test_cancel_kills_the_worker_and_raises(catalog):
    cancel = threading.Event()

    def progress(message: str, fraction: float) -> None:
        if message.startswith("shape"):
            cancel.set()

    hang = HEADER + "\n    def forward(self, x, weight):\n        while True:\n            pass\n"
    with pytest.raises(AtrexError) as info:
        evaluate(
            EvalRequest(op="rms_norm", source=hang, shapes=["0"], seeds=1, timeout_s=60),
            catalog,
            progress=progress,
            cancel=cancel,
        )
    assert info.value.info.category == "cancelled"


def test_request_without_candidate_is_an_input_error(catalog):
    with pytest.raises(AtrexError) as info:
        evaluate(EvalRequest(op="rms_norm"), catalog)
    assert info.value.info.stage == "input"


@pytest.mark.slow
def test_cli_json_has_the_stable_fields(catalog, tmp_path, capsys):
    out = tmp_path / "results"
    code = cli_main(
        [
            "eval",
            str(EXAMPLES / "rms_norm_triton.py"),
            "--op",
            "rms_norm",
            "--shapes",
            "0",
            "--seeds",
            "1",
            "--problems",
            str(catalog.roots[0]),
            "--json",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["op"] == "rms_norm" and data["compiled"] is True
    shape = data["shapes"][0]
    assert {"id", "correct", "category", "time_ms", "dsl_share", "score"} <= set(shape)
    assert shape["correct"] is True and shape["category"] is None and shape["time_ms"] is None
    assert (out / "rms_norm.json").is_file()


@pytest.mark.slow
def test_silu_and_mul_example_on_the_shipped_problem():
    catalog = Catalog()
    if "silu_and_mul" not in catalog.names():
        pytest.skip("problems/silu_and_mul not present")
    source = (EXAMPLES / "silu_and_mul_triton.py").read_text()
    result = evaluate(
        EvalRequest(op="silu_and_mul", source=source, shapes=[catalog.visible("silu_and_mul").smoke_shape.id], seeds=1),
        catalog,
    )
    assert result.shapes[0].correct, result.shapes[0].message


def test_a_worker_that_cannot_start_is_the_evaluators_error_not_the_candidates(catalog, monkeypatch):
    import sandbox.launcher

    monkeypatch.setattr(sandbox.launcher, "_BOOTSTRAP", "import sys; sys.exit(3)")
    with pytest.raises(AtrexError) as info:
        run_eval(catalog, HEADER + REFERENCE_MATH)
    assert (info.value.info.stage, info.value.info.category) == ("internal", "sandbox_start_failed")
