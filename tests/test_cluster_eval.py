"""`bench eval --cluster` on CPU: a two-worker Dask cluster with a fake GPU resource judges a
small run exactly as the local path does; a worker killed mid-shard loses nothing (the shard
runs again elsewhere, no shape is judged twice, the retry is recorded); a shard that kills
workers twice is failed with the reason instead of being retried forever."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from atrex_mcp.agentbench.evaluation import EvalSettings, evaluate_run  # noqa: E402
from atrex_mcp.cli import main  # noqa: E402
from atrex_mcp.cluster import engine  # noqa: E402
from atrex_mcp.cluster.dispatch import ClusterRecord, ShardFile  # noqa: E402
from atrex_mcp.cluster.merge import merge_results  # noqa: E402
from atrex_mcp.cluster.shards import ATTEMPT_TOPIC  # noqa: E402
from atrex_mcp.errors import AtrexError  # noqa: E402
from atrex_mcp.evaluate.models import EvalResult  # noqa: E402
from measurements.cluster_runs import make_run  # noqa: E402
from measurements_support import result, shape  # noqa: E402  (also puts measurements/ on the path)

ROOT = Path(__file__).resolve().parent.parent
# Every output NaN: the verdict and its figures (all elements mismatch) do not depend on the seeds.
NAN_SILU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        d = x.shape[-1] // 2
        return torch.full_like(x[..., :d], float("nan"))
"""
SOURCES = {"rms_norm": (ROOT / "gpu_wiki" / "kernels" / "rms_norm.py").read_text(), "silu_and_mul": NAN_SILU}
SETTINGS = EvalSettings(shapes="smoke,0", seeds=1, baselines="no")


def verdicts(run_dir: Path, op: str) -> tuple:
    """What must not depend on where a candidate was judged: per shape its verdict and the
    correctness figures (not times, not the seeds drawn)."""
    res = EvalResult.model_validate_json((run_dir / "eval" / f"{op}.json").read_text())
    figures = [
        (
            s.id,
            s.correct,
            s.stage,
            s.category,
            len(s.seeds),
            [
                (
                    m.output,
                    m.rule,
                    m.mismatches,
                    m.numel,
                    m.mismatch_fraction,
                    m.nonfinite_mismatches,
                    m.first_bad_index,
                )
                for m in s.mismatch
            ],
        )
        for s in res.shapes
    ]
    return res.compiled, res.operator_score, figures


@pytest.mark.slow
def test_a_two_worker_cluster_judges_a_run_as_the_local_path_does(tmp_path):
    local_run, cluster_run = make_run(tmp_path / "local", SOURCES), make_run(tmp_path / "cluster", SOURCES)
    assert evaluate_run(local_run, SETTINGS, live=False).evaluated == ["rms_norm", "silu_and_mul"]
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, resources={"GPU": 1}, dashboard_address=None
    ) as cluster:
        summary = evaluate_run(cluster_run, SETTINGS, live=False, cluster=cluster.scheduler_address, shard_shapes=1)
        assert sorted(summary.evaluated) == ["rms_norm", "silu_and_mul"] and summary.retried == []
        for op in SOURCES:
            assert verdicts(cluster_run, op) == verdicts(local_run, op)
        assert [s for s in verdicts(cluster_run, "rms_norm")[2] if not s[1]] == []
        assert not any(s[1] for s in verdicts(cluster_run, "silu_and_mul")[2])
        record = ClusterRecord.model_validate_json((cluster_run / "eval" / "cluster.json").read_text())
        assert sorted(s.key for s in record.shards) == [
            f"{op}.candidate.{i:03d}" for op in sorted(SOURCES) for i in (0, 1)
        ]
        assert len({a.worker for s in record.shards for a in s.attempts}) == 2  # both workers judged shards

        # resumable: a lost merged result is rebuilt from the stored shards, nothing is sent again
        (cluster_run / "eval" / "rms_norm.json").unlink()
        again = evaluate_run(cluster_run, SETTINGS, live=False, cluster=cluster.scheduler_address, shard_shapes=1)
        assert again.evaluated == ["rms_norm"] and again.skipped == ["silu_and_mul"]
        record = ClusterRecord.model_validate_json((cluster_run / "eval" / "cluster.json").read_text())
        assert {s.status for s in record.shards} == {"reused"}
        assert verdicts(cluster_run, "rms_norm") == verdicts(local_run, "rms_norm")


class Killer:
    """Kills the worker process of each attempt of a shard as soon as the attempt announces
    itself (mid-shard: before its sandbox worker has judged anything); `times` per operator."""

    def __init__(self, address: str, times: dict[str, int]):
        self.times, self.killed = dict(times), []
        self._client = distributed.Client(address, timeout=30)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        seen = set()
        while not self._stop.is_set():
            for _, msg in self._client.get_events(ATTEMPT_TOPIC):
                op = msg["key"].split(".")[0]
                if (msg["task"], msg["pid"]) in seen:
                    continue
                seen.add((msg["task"], msg["pid"]))
                if self.times.get(op, 0) > 0:
                    self.times[op] -= 1
                    os.kill(msg["pid"], signal.SIGKILL)
                    self.killed.append((msg["key"], msg["pid"]))
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._client.close()


@pytest.fixture(scope="module")
def faulted_run(tmp_path_factory):
    """rms_norm's shard loses its worker once; silu_and_mul's loses one on every attempt."""
    run_dir = make_run(tmp_path_factory.mktemp("faults") / "run", SOURCES)
    cluster = engine.local_cluster(["0", "1"])
    try:
        killer = Killer(cluster.scheduler_address, {"rms_norm": 1, "silu_and_mul": 2})
        try:
            summary = evaluate_run(
                run_dir,
                EvalSettings(shapes="smoke", seeds=1, baselines="no"),
                live=False,
                cluster=cluster.scheduler_address,
            )
        finally:
            killer.close()
    finally:
        cluster.close()
    return run_dir, summary, killer.killed


@pytest.mark.slow
def test_a_worker_killed_mid_shard_loses_nothing_and_the_retry_is_recorded(faulted_run):
    run_dir, summary, killed = faulted_run
    assert summary.evaluated == ["rms_norm"] and "rms_norm.candidate.000" in summary.retried
    merged = EvalResult.model_validate_json((run_dir / "eval" / "rms_norm.json").read_text())
    assert [s.id for s in merged.shapes] == ["smoke"] and merged.shapes[0].correct  # judged once, into the result
    shard = ShardFile.model_validate_json((run_dir / "eval" / "shards" / "rms_norm.candidate.000.json").read_text())
    lost, judged = shard.attempts
    assert (lost.outcome, judged.outcome) == ("worker_lost", "judged") and lost.pid != judged.pid
    assert ("rms_norm.candidate.000", lost.pid) in killed
    assert shard.status == "judged" and [s.id for s in shard.result.shapes] == ["smoke"]


def test_a_shard_that_kills_two_workers_is_failed_with_the_reason_not_retried(faulted_run):
    run_dir, summary, killed = faulted_run
    assert summary.failed == ["silu_and_mul"] and not (run_dir / "eval" / "silu_and_mul.json").exists()
    error = json.loads((run_dir / "eval" / "silu_and_mul.error.json").read_text())["error"]
    assert error["category"] == "killed_workers" and "killed 2 workers" in error["message"]
    assert "allows 1 such failure" in error["message"]
    record = ClusterRecord.model_validate_json((run_dir / "eval" / "cluster.json").read_text())
    assert record.allowed_failures == 1
    [failed] = [s for s in record.shards if s.key == "silu_and_mul.candidate.000"]
    assert failed.status == "failed" and [a.outcome for a in failed.attempts] == ["worker_lost", "worker_lost"]
    assert sorted(a.pid for a in failed.attempts) == sorted(p for k, p in killed if k.startswith("silu_and_mul"))


def test_merge_takes_each_shape_once_first_complete_wins():
    first = result("rms_norm", [shape("0", 1.0, score=0.5)], started_at="2026-01-01T00:00:01+00:00")
    again = result(
        "rms_norm", [shape("0", 1.0, score=0.1), shape("1", 1.0, score=0.3)], started_at="2026-01-01T00:00:00+00:00"
    )
    merged = merge_results([first, again], ["0", "1"])
    assert [(s.id, s.score) for s in merged.shapes] == [("0", 0.5), ("1", 0.3)]
    assert merged.started_at == again.started_at


def test_cluster_targets_and_their_errors(monkeypatch, tmp_path, capsys):
    assert engine.parse_target("local") == engine.ClusterTarget(None)
    assert engine.parse_target("local:3") == engine.ClusterTarget(None, 3)
    assert engine.parse_target("tcp://10.0.0.5:8786").address == "tcp://10.0.0.5:8786"
    for bad in ("local:0", "local:x", "gpu-host:8786"):
        with pytest.raises(AtrexError, match=r"bad_cluster|neither|whole number"):
            engine.parse_target(bad)
    monkeypatch.setitem(__import__("sys").modules, "distributed", None)
    with pytest.raises(AtrexError) as missing:
        engine.require_distributed()
    assert missing.value.info.category == "cluster_unavailable" and "atrex-mcp[cluster]" in missing.value.info.hint
    run_dir = make_run(tmp_path / "run", {"rms_norm": SOURCES["rms_norm"]})
    assert main(["bench", "eval", str(run_dir), "--shard-shapes", "2", "--plain"]) == 2
    assert "--shard-shapes only applies with --cluster" in capsys.readouterr().err
    assert main(["bench", "eval", str(run_dir), "--cluster", "tcp://127.0.0.1:1", "--plain"]) == 2
    assert "cluster_unavailable" in capsys.readouterr().err
