"""Stamping measured GPU figures into a kernel's front matter: the table is replaced, the
file stays parseable, re-stamping is idempotent, and no per-shape score is written."""

import json
import shutil
from pathlib import Path

from atrex_mcp.wiki.corpus import kernel_front_matter
from atrex_mcp.wiki.stamp import main

KERNEL = Path(__file__).resolve().parent.parent / "gpu_wiki" / "kernels" / "rms_norm.py"


def _report(tmp_path: Path) -> Path:
    shapes = [{"id": "0", "correct": True, "time_ms": 0.0123456, "score": 0.5},
              {"id": "1", "correct": False, "time_ms": None, "score": None},
              {"id": "2", "correct": True, "time_ms": 1.5, "score": 0.7}]
    report = {"meta": {"date": "2026-12-01", "gpu": "NVIDIA H200", "versions": {"torch": "2.11.0", "triton": "3.6.0"},
                       "shapes": "all scored"},
              "kernels": {"rms_norm": {"shapes": shapes, "shapes_correct": 2, "shapes_total": 3, "operator_score": 0.6123,
                                       "median_time_ms": 0.756, "median_dsl_share": 1.0},
                          "broken": {"error": "Traceback ..."}}}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def test_stamp_writes_measured_figures(tmp_path):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(KERNEL, kernels / "rms_norm.py")
    report = _report(tmp_path)
    assert main([str(report), "--kernels", str(kernels)]) == 0
    text = (kernels / "rms_norm.py").read_text()
    meta, _ = kernel_front_matter(text, "rms_norm.py")
    h200 = meta["h200"]
    assert h200["status"] == "measured" and h200["date"] == "2026-12-01" and h200["operator_score"] == 0.612
    assert h200["time_ms"] == {"0": 0.0123, "2": 1.5}
    assert "score" not in json.dumps(h200["time_ms"]) and "0.5" not in text.split("+++")[1].split("[h200]")[1]
    assert meta["validated_shapes"][1] == "NVIDIA H200 2026-12-01: 2/3 scored shapes correct (failed: 1)"
    assert main([str(report), "--kernels", str(kernels)]) == 0
    assert (kernels / "rms_norm.py").read_text() == text
    compile(text, "rms_norm.py", "exec")


def test_partial_runs_are_not_stamped(tmp_path):
    report = _report(tmp_path)
    data = json.loads(report.read_text())
    data["meta"]["shapes"] = "smoke"
    report.write_text(json.dumps(data))
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(KERNEL, kernels / "rms_norm.py")
    assert main([str(report), "--kernels", str(kernels)]) == 2
    assert (kernels / "rms_norm.py").read_text() == KERNEL.read_text()
