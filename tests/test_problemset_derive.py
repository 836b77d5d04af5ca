"""A user's own problem: validation of the visible files and derivation of the hidden ones
(`problems add` round trip on a tiny problem)."""

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.problemset.derive import add_problem, derive_hidden, derive_missing, validate_problem
from tests.problemset_fixtures import INPUT, REFERENCE, SHAPES, make_problem


def expected_work(rows, cols, out):
    # mm 2*r*c*o + silu 4 per output + the scale multiply 1 per output, all filed under bf16 (the stored dtype)
    return {"bf16": 2 * rows * cols * out + 4 * rows * out + rows * out}


def test_add_round_trip(tmp_path):
    src = make_problem(tmp_path / "mine")
    target = add_problem(src, tmp_path / "root", weight=0.25)
    assert target == (tmp_path / "root" / "gated_proj").resolve()
    hidden = Catalog(tmp_path / "root").hidden("gated_proj")
    assert hidden.metadata["weight"] == 0.25 and hidden.metadata["dtype"] == "bf16"
    assert hidden.metadata["output"] == {"kind": "tensor", "entries": [{"name": "out", "dtype": "bfloat16", "ndim": 2}]}
    assert set(hidden.roofline["shapes"]) == {"a", "b"}
    b = hidden.roofline["shapes"]["b"]
    assert b["flops"] == expected_work(1000, 512, 256)
    assert (b["bytes_read"], b["bytes_written"]) == (2 * 1000 * 512 + 2 * 512 * 256, 2 * 1000 * 256)
    assert b["counted_on"] == "fake tensors" and b["t_sol_ms"]["h200"] > 0
    assert not (src / "metadata.json").exists()  # the source folder is left as it was


def test_a_read_never_derives_and_the_derive_step_does(tmp_path):
    d = make_problem(tmp_path)
    catalog = Catalog(tmp_path)
    with pytest.raises(AtrexError) as err:
        catalog.hidden("gated_proj")
    assert err.value.info.category == "hidden_files_missing" and "problems add" in err.value.info.hint
    assert not (d / "roofline.json").exists() and not (d / "metadata.json").exists()  # the read wrote nothing
    assert catalog.missing_hidden() == ["gated_proj"]
    assert derive_missing(catalog) == ["gated_proj"] and derive_missing(catalog) == []  # the explicit step, once
    roofline = catalog.hidden("gated_proj").roofline
    assert roofline["shapes"]["a"]["flops"] == expected_work(64, 32, 16)
    metadata, again = derive_hidden(d)
    assert again == roofline and metadata["weight"] == 0.0


def test_the_derive_step_names_a_problem_whose_reference_fails(tmp_path):
    make_problem(tmp_path, reference=REFERENCE.replace("x @ w", "x @ w.t()"))
    with pytest.raises(AtrexError) as err:
        derive_missing(Catalog(tmp_path))
    assert err.value.info.category == "derive_failed" and "gated_proj" in err.value.info.message


@pytest.mark.parametrize(
    "change, message",
    [
        ({"shapes": {"op": "x", "shapes": [SHAPES["shapes"][0]]}}, "exactly one smoke shape"),
        ({"shapes": {"op": "x", "shapes": [SHAPES["shapes"][2]]}}, "no scored shape"),
        (
            {"inputs": INPUT.replace('return {"x": x, "w": w}', 'return {"x": x, "weight": w}')},
            "differ from forward's parameters",
        ),
        (
            {
                "inputs": INPUT.replace(
                    "generator=gen, dtype=torch.bfloat16, device=device)\n    w",
                    "dtype=torch.bfloat16, device=device)\n    w",
                )
            },
            "not deterministic",
        ),
        ({"inputs": INPUT.replace('device="cpu", ', "device, ")}, "`device` with a default"),
        ({"reference": REFERENCE.replace("x @ w", "x @ w.t()")}, "fails at the smoke shape"),
        ({"reference": REFERENCE.replace("class Model", "class Other")}, "cannot load"),
        (
            {
                "shapes": {
                    "op": "x",
                    "shapes": [
                        {"id": "a", "init": {"bogus": 1}, "inputs": SHAPES["shapes"][0]["inputs"]},
                        SHAPES["shapes"][2],
                    ],
                }
            },
            "does not fit Model.__init__",
        ),
    ],
)
def test_validation_names_the_broken_part(tmp_path, change, message):
    d = make_problem(tmp_path, **change)
    with pytest.raises(AtrexError) as err:
        validate_problem(d)
    assert err.value.info.category == "invalid_problem" and message in err.value.info.message


def test_add_refuses_to_overwrite(tmp_path):
    src = make_problem(tmp_path / "mine")
    make_problem(tmp_path / "root")
    with pytest.raises(AtrexError) as err:
        add_problem(src, tmp_path / "root")
    assert err.value.info.category == "problem_exists"
