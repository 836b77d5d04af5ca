"""Every shipped operator rejects trivial candidates at its smoke shape (atrex_mcp.evaluate.problem_check)."""

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate.problem_check import check_problem, check_problems
from atrex_mcp.problemset.catalog import Catalog


@pytest.fixture(scope="module")
def catalog():
    return Catalog()


@pytest.mark.slow
def test_problems_check_passes_for_every_operator(catalog):
    results = check_problems(catalog)
    assert {r.op for r in results} == set(catalog.names())
    failures = {r.op: [c for c in r.checks if not c.passed] for r in results if not r.passed}
    assert not failures, failures
    assert all(
        {c.name for c in r.checks} == {"finite", "seed_varies", "zeros", "constant", "input", "other_seed", "roofline"}
        for r in results
    )


def _toy_problem(root, op: str, returns: str, shapes: str) -> Catalog:
    """A one-input problem under `root` whose reference returns `returns` (an expression of x),
    with `shapes` as the body of shapes.json's "shapes" list."""
    folder = root / op
    folder.mkdir()
    (folder / "reference.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
        f"    def forward(self, x):\n        return {returns}\n"
    )
    (folder / "input.py").write_text(
        "import torch\n\n\ndef make_inputs(*, seed, device='cpu', n):\n"
        "    return {'x': torch.randn(n, generator=torch.Generator(device=device).manual_seed(seed), device=device)}\n"
    )
    (folder / "shapes.json").write_text(f'{{"op": "{op}", "shapes": [{shapes}]}}')
    return Catalog(root)


def test_check_notices_a_problem_that_cannot_tell_candidates_apart(tmp_path):
    """A reference whose output ignores its input: seed-insensitive, and 'other seed' passes."""
    catalog = _toy_problem(
        tmp_path,
        "constant_op",
        "torch.ones_like(x) * 3",
        '{"id": "0", "init": {}, "inputs": {"n": 8}}, {"id": "smoke", "smoke": true, "init": {}, "inputs": {"n": 8}}',
    )
    result = check_problem(catalog, "constant_op")
    verdicts = {c.name: c.passed for c in result.checks}
    assert not result.passed
    assert verdicts["seed_varies"] is False and verdicts["other_seed"] is False and verdicts["constant"] is False
    assert verdicts["zeros"] is True and verdicts["finite"] is True
    roofline = next(c for c in result.checks if c.name == "roofline")  # before `problems add`: nothing stored yet
    assert roofline.passed and roofline.detail.startswith("not applicable")


def test_nan_output_fails_finite(tmp_path):
    catalog = _toy_problem(
        tmp_path, "nan_op", "x.log()", '{"id": "smoke", "smoke": true, "init": {}, "inputs": {"n": 64}}'
    )
    finite = check_problem(catalog, "nan_op").checks[0]
    assert finite.name == "finite" and not finite.passed and "NaN" in finite.detail


def test_a_reference_output_that_is_not_tensors_is_a_clear_error(tmp_path):
    """`problems check` on a reference that returns a float names the problem instead of failing inside a check."""
    catalog = _toy_problem(
        tmp_path, "scalar_op", "float(x.sum())", '{"id": "smoke", "smoke": true, "init": {}, "inputs": {"n": 8}}'
    )
    with pytest.raises(AtrexError) as caught:
        check_problem(catalog, "scalar_op")
    info = caught.value.info
    assert info.category == "bad_reference_output" and "float" in info.message and "Model.forward" in info.hint
