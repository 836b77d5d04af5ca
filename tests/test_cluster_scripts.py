"""The GPU measurement scripts of the cluster path, run on CPU on the smallest set (workers offer
a fake GPU=1 resource): the overhead script compares the local and the one-worker cluster path
shape by shape; the scaling script on a one-GPU host judges on the local path and one worker,
continues a call its sending time cut short, and reports matching verdicts and no speed-up; the
server-pool script's clients all get their verdicts through one worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("distributed")

import measurements_support  # noqa: F401  (puts measurements/ on the path)
from measurements import (
    cluster_overhead_gpu,
    cluster_scaling,
    cluster_server_pool,
)

pytestmark = pytest.mark.slow


def test_the_overhead_script_finds_the_same_verdicts_on_both_paths(tmp_path):
    assert cluster_overhead_gpu.main(["--out", str(tmp_path / "o"), "--ops", "rms_norm", "--shapes", "smoke"]) == 0
    report = json.loads((tmp_path / "o" / "result.json").read_text())
    assert report["verdicts_identical"] and report["shapes_judged"] == 1 and report["failed"] == []
    assert report["overhead"]["cluster_start_s"] > 0 and report["local_wall_s"] > 0


def test_the_scaling_script_on_one_gpu_matches_the_local_verdicts_and_reports_no_speedup(tmp_path):
    plan = cluster_scaling.Plan(out=tmp_path / "s", workers=1, ops=["rms_norm"], shapes="smoke", seeds=1)
    cut_short = cluster_scaling.measure(plan, send_for=0)
    assert not cut_short["complete"] and [leg["calls"] for leg in cut_short["legs"]] == [0, 0]
    assert cut_short["verdicts_match"] is None

    report = cluster_scaling.measure(plan)  # the same command again: continues the measurement
    cluster, local = report["legs"]
    assert (cluster["leg"], local["leg"]) == ("cluster-1", "local")
    assert report["complete"] and report["failed"] == []
    assert local["shapes_judged"] == cluster["shapes_judged"] == 1
    assert report["verdicts_match"] is True and report["verdicts_reference"] == "local"
    assert report["compared"] == ["cluster-1"] and report["differences"] == []
    assert report["speedup"] == "n/a (one GPU)" and "one GPU" in report["note"]
    assert set(cluster["busy_share"]) == {"0"} and 0 < cluster["busy_share"]["0"] <= 1
    assert cluster["gpus"]["0"]["gpu"].startswith("cpu")

    md, js = (Path(f) for f in report["files"])
    assert json.loads(js.read_text())["verdicts_match"] is True
    assert js.name.endswith("_cpu.json") and report["versions"]["torch"] and report["date"]
    text = md.read_text()
    assert "Speed-up: n/a (one GPU)" in text and "identical to `local`" in text


def test_the_server_pool_script_gives_each_client_its_verdict_through_one_worker(tmp_path):
    assert (
        cluster_server_pool.main(
            ["--out", str(tmp_path / "p"), "--workers", "1", "--clients", "2"]
            + ["--ops", "rms_norm,silu_and_mul", "--shapes", "smoke", "--seeds", "1"]
        )
        == 0
    )
    [path] = (tmp_path / "p").glob("*.json")
    report = json.loads(path.read_text())
    [leg] = report["legs"]
    assert [(c["op"], c["passed"], c["failed"], c["error"]) for c in leg["calls"]] == [
        ("rms_norm", 1, 0, None),
        ("silu_and_mul", 1, 0, None),
    ]
    assert report["wall_speedup"] == "n/a (one GPU)" and 0 < leg["occupancy"]["0"] <= 1
    assert leg["latency_s"]["max"] <= leg["wall_s"]
    assert path.with_suffix(".md").is_file()
