"""The GPU measurement scripts of the cluster path, run on CPU on the smallest set: the overhead
script compares the local and the one-worker cluster path shape by shape; the scaling script's
one-worker phase stops sending at its time limit, continues on the next call, and its report
says that one GPU measures no scaling."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("distributed")

import measurements_support  # noqa: F401  (puts measurements/ on the path)
from measurements import (
    cluster_overhead_gpu,
    cluster_scaling,
)

pytestmark = pytest.mark.slow


def test_the_overhead_script_finds_the_same_verdicts_on_both_paths(tmp_path):
    assert cluster_overhead_gpu.main(["--out", str(tmp_path / "o"), "--ops", "rms_norm", "--shapes", "smoke"]) == 0
    report = json.loads((tmp_path / "o" / "result.json").read_text())
    assert report["verdicts_identical"] and report["shapes_judged"] == 1 and report["failed"] == []
    assert report["overhead"]["cluster_start_s"] > 0 and report["local_wall_s"] > 0


def test_the_scaling_script_continues_a_phase_and_reports_one_gpu_as_unscaled(tmp_path):
    common = ["--out", str(tmp_path / "s"), "--ops", "rms_norm,silu_and_mul", "--shapes", "smoke", "--seeds", "1"]
    assert cluster_scaling.main([*common, "--workers", "1", "--send-for", "0"]) == 0
    first = json.loads((tmp_path / "s" / "workers-1" / "phase.json").read_text())
    assert not first["complete"] and first["calls"][0]["unsent"] >= 1
    assert cluster_scaling.main([*common, "--workers", "1", "--report"]) == 0
    report = json.loads((tmp_path / "s" / "scaling.json").read_text())
    [phase] = report["phases"]
    assert phase["complete"] and phase["calls"] == 2 and phase["shapes_judged"] == 2
    assert set(phase["busy_share"]) == {"0"} and report["note"] == "one GPU only: no scaling measured"
