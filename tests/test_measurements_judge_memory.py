"""The judge-memory script (measurements/judge_memory_gpu.py): a CPU dry run through bench eval's
local path, where its hooks read every shape end and operator end and are removed afterwards; and
its readings, allocation sites and verdict on a fake GPU whose cache stops going back after a
failed capture."""

from __future__ import annotations

import json
from types import SimpleNamespace

import measurements_support  # noqa: F401  (puts measurements/ on the path)
from atrex_mcp.evaluate.reference_graph import EAGER, GRAPH, Decision
from measurements import judge_memory_gpu as jm

GIB = 1 << 30


def test_a_dry_run_reads_each_shape_end_and_operator_end_and_puts_the_judge_back(tmp_path, capsys):
    import atrex_mcp.evaluate as evaluate_package
    from atrex_mcp.evaluate import evaluator, graph_witness, reference_graph

    def hooked():
        return (
            evaluate_package.evaluate,
            evaluator.Trial.evaluate_shape,
            reference_graph.ReferenceGraphs.release,
            graph_witness._graph_fingerprints_s,
        )

    before = hooked()
    assert jm.main(["--ops", "l2_norm,rms_norm", "--seeds", "1", "--shapes", "smoke", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("judge_memory: 2 of 2 operators in ")
    (report,) = tmp_path.glob("*.json")
    found = json.loads(report.read_text())
    wheres = [(r["op"], r["where"]) for r in found["readings"]]
    ends = ["shape_end", "operator_end", "operator_end_gc", "operator_end_emptied"]
    assert wheres == [(op, where) for op in ("l2_norm", "rms_norm") for where in ends]
    assert [r["verdict"] for r in found["readings"] if r["where"] == "shape_end"] == ["correct", "correct"]
    assert [row["op"] for row in found["operators"]] == ["l2_norm", "rms_norm"] and found["not_judged"] == []
    assert found["verdict"] == "no GPU figures (a dry run)" and "capture_probe" not in found
    assert "time_ms" not in report.read_text() and "score" not in report.read_text()
    assert report.with_suffix(".md").read_text().startswith("# Does the judge hold GPU memory across operators")
    assert hooked() == before
    assert found["end_failed_captures"] == "on"


def test_the_judges_capture_clean_up_can_be_turned_off_for_a_before_and_after_in_one_tree():
    from sandbox import gpu_cache

    original = gpu_cache.end_failed_capture
    with jm.failed_captures_ended(False) as state:
        assert state == "off" and gpu_cache.end_failed_capture((0, 1)) is False
        assert gpu_cache.end_failed_capture is not original
    assert gpu_cache.end_failed_capture is original
    with jm.failed_captures_ended(True) as state:
        assert state == "on" and gpu_cache.end_failed_capture is original


def test_an_unknown_operator_is_refused_with_the_ones_there_are(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        jm.main(["--ops", "l2_norm,no_such_op", "--out", str(tmp_path)])
    assert "unknown operator(s) no_such_op; choose among" in capsys.readouterr().err


def _frames(*where: tuple[str, int, str]) -> list[dict]:
    return [{"filename": f"/repo/{f}", "line": line, "name": name} for f, line, name in where]


def _segment(total: int, active: int, pool=(0, 0), frames=None) -> dict:
    blocks = [{"size": active, "state": "active_allocated", "frames": frames or []}] if active else []
    blocks.append({"size": total - active, "state": "inactive", "frames": []})
    return {"total_size": total, "active_size": active, "segment_pool_id": pool, "blocks": blocks, "frames": frames}


class FakeGpu:
    """A judge whose cache empty_cache hands back until `stuck` is set (as after a failed capture)."""

    def __init__(self) -> None:
        self.allocated, self.cached, self.stuck, self.snapshots = 0, 0, False, 0
        ours = _frames(("atrex_mcp/evaluate/graph_witness.py", 103, "refresh_s"), ("torch/x.py", 1, "f"))
        self.segments = [_segment(20 * GIB, 0, frames=ours), _segment(2 * GIB, GIB // 2, frames=ours)]

    def figures(self) -> dict:
        return {"allocated": self.allocated, "reserved": self.allocated + self.cached, "pooled": 0}

    def snapshot(self) -> dict:
        self.snapshots += 1
        return {"segments": self.segments}

    def empty_cache(self) -> None:
        if not self.stuck:
            self.cached = 0

    def release_works(self) -> bool:
        return not self.stuck


def test_readings_sites_and_verdict_on_a_gpu_whose_cache_stops_going_back():
    gpu = FakeGpu()
    recorder = jm.Recorder(gpu, threshold_bytes=16 * GIB, deadline=0.0)
    failed = Decision(EAGER, "not capturable: AcceleratorError: operation not permitted when stream is capturing")
    for op, shapes in (("fused_add_rms_norm", 2), ("fused_moe", 2), ("l2_norm", 2)):
        recorder.op = op
        for i in range(shapes):
            gpu.cached += 10 * GIB  # what the shape left cached
            decisions = {"k": failed if (op, i) == ("fused_moe", 1) else Decision(GRAPH)}
            recorder.note_graphs(SimpleNamespace(decisions=decisions))
            if (op, i) == ("fused_moe", 1):
                gpu.stuck = True
            recorder.shape_done(str(i), SimpleNamespace(correct=True, category=None))
        recorder.operator_done()
    rows = {row["op"]: row for row in jm.operator_rows(recorder.readings)}
    assert rows["fused_add_rms_norm"]["operator_end_emptied"]["reserved"] == 0
    assert rows["fused_add_rms_norm"]["empty_cache_releases"] is True
    assert (rows["fused_moe"]["failed_captures"], rows["fused_moe"]["first_failed_capture_shape"]) == (1, "1")
    assert rows["fused_moe"]["empty_cache_releases"] is False
    assert rows["l2_norm"]["operator_end_emptied"]["reserved"] == 40 * GIB  # fused_moe's 20 and its own 20
    assert rows["l2_norm"]["shape_end_reserved_max"] == 40 * GIB and rows["l2_norm"]["graphed_shapes"] == 2
    verdict = jm.verdict(list(rows.values()))
    assert "fused_add_rms_norm 0.00, fused_moe 20.00, l2_norm 40.00" in verdict
    assert "handed nothing back: fused_moe" in verdict and "failed CUDA-graph capture: fused_moe" in verdict
    # allocation sites: once per operator, from its first reading at or above the threshold
    assert list(recorder.snapshots) == ["fused_add_rms_norm", "fused_moe", "l2_norm"] and gpu.snapshots == 3
    snap = recorder.snapshots["fused_moe"]
    assert snap["at"] == "shape_end" and snap["shape"] == "1"  # 10 GiB at shape 0, 20 at shape 1
    site = "atrex_mcp/evaluate/graph_witness.py:103 (refresh_s)"
    assert snap["live_blocks_by_site_gib"] == [[site, 0.5]]
    assert snap["segments_by_site_gib"] == [[site, 22.0, 21.5]] and snap["reserved_by_pool_gib"] == [["general", 22.0]]
    found = {"date": "d", "gpu": "g", "gpus": 1, "commit": None, "versions": {}, "command": "c", "threshold_gib": 16,
             "verdict": verdict, "operators": list(rows.values()), "snapshots": recorder.snapshots,
             "readings": recorder.readings}  # fmt: skip
    text = jm.markdown(found)
    assert "| fused_moe | 1 | not capturable: AcceleratorError" in text and site in text
    assert "| l2_norm | 2 | {'correct': 2} | 0 | 2 | 40.0 |" in text


def test_segment_figures_tell_releasable_cache_from_pinned_and_private_pools():
    segments = [
        _segment(4 * GIB, 0),
        _segment(3 * GIB, GIB),
        _segment(GIB, 0, pool=(0, 7)),
    ]
    assert jm.segment_figures(segments) == {
        "largest_free_segment": 4 * GIB,
        "largest_live_segment": 3 * GIB,
        "free_in_live_segments": 2 * GIB,
        "private_pools": GIB,
        "segments": 3,
    }
    assert jm._site(None) == "no stack recorded"
    assert jm._site(_frames(("torch/cuda/graphs.py", 1, "capture"))) == "outside this checkout"


def test_a_reading_that_fails_is_noted_and_the_judging_goes_on():
    class Broken(FakeGpu):
        def figures(self) -> dict:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    recorder = jm.Recorder(Broken(), threshold_bytes=GIB, deadline=0.0)
    recorder.op = "l2_norm"
    recorder.shape_done("0", None)
    (reading,) = recorder.readings
    assert reading["verdict"] == "error" and reading["reading_error"].startswith("RuntimeError: CUDA error")
