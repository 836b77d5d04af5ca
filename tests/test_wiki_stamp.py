"""Stamping measured GPU figures into a kernel's front matter: the table is replaced, the file
stays parseable, re-stamping is idempotent, no per-shape score is written, and the operator
score S is written only for a run over every scored shape — a subset is stamped as a subset."""

import json
import shutil
from pathlib import Path

import pytest

from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.wiki.corpus import kernel_front_matter
from atrex_mcp.wiki.stamp import main

KERNEL = Path(__file__).resolve().parent.parent / "gpu_wiki" / "kernels" / "rms_norm.py"


@pytest.fixture(scope="module")
def scored_ids() -> list[str]:
    return [s.id for s in Catalog().visible("rms_norm").scored_shapes]


def _shape(shape_id: str, correct: bool, time_ms: float | None) -> dict:
    # "score" stands for anything per-shape the stamp must not copy
    return {
        "id": shape_id,
        "correct": correct,
        "time_ms": time_ms,
        "score": 0.9876 if correct else None,
        "category": None if correct else "numeric_mismatch",
        "stage": None if correct else "correctness",
    }


def _write_report(tmp_path: Path, shapes: list[dict], shapes_meta: str) -> Path:
    correct = [s for s in shapes if s["correct"]]
    report = {
        "meta": {
            "date": "2026-12-01",
            "gpu": "NVIDIA H200",
            "versions": {"torch": "2.11.0", "triton": "3.6.0"},
            "shapes": shapes_meta,
        },
        "kernels": {
            "rms_norm": {
                "operator": "rms_norm",
                "shapes": shapes,
                "shapes_correct": len(correct),
                "shapes_total": len(shapes),
                "operator_score": 0.6123,
                "median_time_ms": 0.756,
                "median_dsl_share": 1.0,
            },
            "broken": {"error": "Traceback ..."},
        },
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def _kernels(tmp_path: Path) -> Path:
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(KERNEL, kernels / "rms_norm.py")
    return kernels


def test_full_run_is_stamped_with_the_operator_score(tmp_path, scored_ids):
    shapes = [_shape(i, i != "1", None if i == "1" else 0.0123456 * (1 + int(i))) for i in scored_ids]
    report, kernels = _write_report(tmp_path, shapes, "all scored"), _kernels(tmp_path)
    assert main([str(report), "--kernels", str(kernels)]) == 0
    text = (kernels / "rms_norm.py").read_text()
    meta, _ = kernel_front_matter(text, "rms_norm.py")
    h200 = meta["h200"]
    assert h200["status"] == "measured" and h200["date"] == "2026-12-01" and h200["operator_score"] == 0.612
    assert h200["time_ms"]["0"] == 0.0123 and "1" not in h200["time_ms"]
    assert h200["failures"] == {"1": "numeric_mismatch"} and h200["shapes_scored"] == len(scored_ids)
    assert "score" not in json.dumps(h200["time_ms"]) and "0.988" not in text.split("+++")[1].split("[h200]")[1]
    correct = len(scored_ids) - 1
    assert (
        meta["validated_shapes"][1]
        == f"NVIDIA H200 2026-12-01: {correct}/{len(scored_ids)} scored shapes correct (failed: 1)"
    )
    assert main([str(report), "--kernels", str(kernels)]) == 0
    assert (kernels / "rms_norm.py").read_text() == text
    compile(text, "rms_norm.py", "exec")


def test_subset_run_is_stamped_without_the_operator_score(tmp_path, scored_ids):
    report = _write_report(tmp_path, [_shape("0", True, 0.00691)], "0")
    kernels = _kernels(tmp_path)
    assert main([str(report), "--kernels", str(kernels)]) == 0
    meta, _ = kernel_front_matter((kernels / "rms_norm.py").read_text(), "rms_norm.py")
    h200 = meta["h200"]
    assert h200["status"] == "measured on a subset of shapes" and "operator_score" not in h200
    assert h200["operator_score_pending"] == "S over the full shape set: pending; measured on shapes [0]"
    assert h200["shapes_measured"] == ["0"] and h200["time_ms"] == {"0": 0.00691} and h200["failures"] == {}
    assert (
        meta["validated_shapes"][1]
        == f"NVIDIA H200 2026-12-01: measured on shapes [0] of {len(scored_ids)} scored; 1 correct"
    )


@pytest.mark.parametrize("case", ["smoke run", "claims every shape but lacks some"])
def test_misleading_reports_are_refused_and_nothing_is_stamped(tmp_path, case):
    if case == "smoke run":
        report = _write_report(tmp_path, [_shape("smoke", True, 0.01)], "smoke")
    else:
        report = _write_report(tmp_path, [_shape("0", True, 0.01), _shape("1", True, 0.02)], "all scored")
    kernels = _kernels(tmp_path)
    assert main([str(report), "--kernels", str(kernels)]) == 2
    assert (kernels / "rms_norm.py").read_text() == KERNEL.read_text()
