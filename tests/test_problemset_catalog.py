"""The shipped problem set as built: 30 operators, 440 scored shapes, weights, generated hidden
files up to date; and the build itself on a small stand-in of the operator-set source."""

import json
import shutil

import pytest

from atrex_mcp.paths import problems_dir
from atrex_mcp.problemset.build import build, changes_sections, operator_roofline
from atrex_mcp.problemset.catalog import VISIBLE_FILES, Catalog

ROOT = problems_dir()


@pytest.fixture(scope="module")
def catalog():
    return Catalog(ROOT)


def test_thirty_operators_and_440_scored_shapes(catalog):
    folders = [d for d in ROOT.iterdir() if d.is_dir()]
    if len(folders) < 30:
        pytest.skip(f"only {len(folders)} of the 30 operator folders exist yet")
    assert len(catalog.names()) == 30
    assert sum(len(catalog.visible(op).scored_shapes) for op in catalog.names()) == 440
    assert all(sum(s.smoke for s in catalog.visible(op).shapes) == 1 for op in catalog.names())


def test_weights_file_is_normalised():
    doc = json.loads((ROOT / "weights.json").read_text())
    assert len(doc["raw"]) == 30
    assert doc["raw_sum"] == pytest.approx(1.09478, abs=1e-6)
    assert sum(doc["weights"].values()) == pytest.approx(1.0, abs=1e-12)
    assert doc["weights"]["unified_attention"] == pytest.approx(0.394972 / 1.09478)


def test_catalog_weights_sum_to_one(catalog):
    assert sum(catalog.weights().values()) == pytest.approx(1.0, abs=1e-12)


def test_hidden_files_are_current(catalog):
    """roofline.json equals what the formulas give today; metadata.json names every scored shape
    and carries the op's CHANGES.md section as it reads today."""
    sections = changes_sections(ROOT / "CHANGES.md")
    for op in catalog.names():
        hidden = catalog.hidden(op)
        visible = catalog.visible(op)
        expected = json.loads(json.dumps(operator_roofline(op, visible)))
        assert hidden.roofline == expected, f"{op}: roofline.json is stale; run `atrex-mcp problems build`"
        meta = hidden.metadata
        assert meta["op"] == op and set(meta["shapes"]) == {s.id for s in visible.scored_shapes}
        assert all(entry["production_us"]["XPU-A"] > 0 for entry in meta["shapes"].values())
        assert meta["deviations"] and meta["deviations"] == sections[op], (
            f"{op}: deviations stale; run `atrex-mcp problems build`"
        )
        assert 0 < meta["weight"] < 1 and meta["output"]["entries"]


def _stand_in_source(tmp_path, ops):
    """A source folder like ../shared/atrex-ops for the given shipped operators, from their visible shapes."""
    source = tmp_path / "source"
    (source / "shapes").mkdir(parents=True)
    catalog = Catalog(ROOT)
    for op in ops:
        shapes = [
            {
                "id": s.id,
                "init": s.init,
                "inputs": s.inputs,
                "note": f"shape {s.id}",
                "production_us": {"XPU-A": 1.5, "H20": None},
            }
            for s in catalog.visible(op).scored_shapes
        ]
        (source / "shapes" / f"{op}.json").write_text(
            json.dumps({"op": op, "dtype": "bf16", "phase": "prefill/decode", "shapes": shapes})
        )
    (source / "weights.json").write_text(json.dumps({"rms_norm": 0.3, "silu_and_mul": 0.1, "l2_norm": 0.1}))
    return source


def _stand_in_root(tmp_path, ops):
    root = tmp_path / "problems"
    for op in ops:
        (root / op).mkdir(parents=True)
        for name in VISIBLE_FILES:
            shutil.copy(ROOT / op / name, root / op / name)
    (root / "CHANGES.md").write_text(
        "# Changes\n\n## rms_norm\nNo change.\n\nSecond\nparagraph.\n\n## silu_and_mul\nNone.\n"
    )
    return root


def test_build_writes_deterministic_hidden_files(tmp_path):
    ops = ["rms_norm", "silu_and_mul"]
    source, root = _stand_in_source(tmp_path, ops + ["l2_norm"]), _stand_in_root(tmp_path, ops)
    report = build(root, source)
    assert report.ok and report.built == ops and report.missing == ["l2_norm"]
    first = {p.name + p.parent.name: p.read_bytes() for p in root.rglob("*.json")}
    assert build(root, source).ok
    assert first == {p.name + p.parent.name: p.read_bytes() for p in root.rglob("*.json")}
    weights = json.loads((root / "weights.json").read_text())
    assert weights["raw_sum"] == 0.5 and weights["weights"]["rms_norm"] == pytest.approx(0.6)
    meta = json.loads((root / "rms_norm" / "metadata.json").read_text())
    assert meta["deviations"] == ["No change.", "Second paragraph."]
    assert meta["shapes"]["0"] == {"description": "shape 0", "production_us": {"XPU-A": 1.5, "H20": None}}
    assert meta["output"] == {"kind": "tensor", "entries": [{"name": "out", "dtype": "bfloat16", "ndim": 2}]}
    roof = json.loads((root / "rms_norm" / "roofline.json").read_text())
    assert set(roof["shapes"]["0"]["t_sol_ms"]) == {"h100-sxm", "h20", "h200", "h200-measured", "xpu-a"}


def test_build_refuses_shapes_that_differ_from_the_source(tmp_path):
    source, root = _stand_in_source(tmp_path, ["rms_norm"]), _stand_in_root(tmp_path, ["rms_norm"])
    data = json.loads((source / "shapes" / "rms_norm.json").read_text())
    data["shapes"][3]["inputs"]["hidden_size"] += 1
    (source / "shapes" / "rms_norm.json").write_text(json.dumps(data))
    report = build(root, source)
    assert not report.ok and "shape 3" in report.errors["rms_norm"]
    assert not (root / "rms_norm" / "metadata.json").exists()


def test_changes_sections_split_paragraphs(tmp_path):
    path = tmp_path / "CHANGES.md"
    path.write_text("intro\n\n## a\nline one\nline two\n\nnext\n## b\n")
    assert changes_sections(path) == {"a": ["line one line two", "next"], "b": []}
