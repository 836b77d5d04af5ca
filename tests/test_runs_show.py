"""`atrex-mcp runs show RUN [--json]` and `runs list`: the operator's timeline."""

import json

from atrex_mcp.cli import main
from tests.runs_fixtures import loop_with_iterations


def test_runs_show_prints_the_timeline_with_masked_records(tmp_path, capsys):
    service, run_id = loop_with_iterations(tmp_path, speeds=[1.3, 1.0, 0.7, 1.6])
    mask = service.partial_restart(run_id, 0.5, seed=9)
    state_dir = str(tmp_path / "state")

    assert main(["runs", "--state-dir", state_dir, "show", run_id]) == 0
    text = capsys.readouterr().out
    assert run_id in text and "(baseline)" in text
    for category in ("tiling", "vectorisation", "memory_layout", "prefetching"):
        assert category in text
    assert text.count("accepted") >= 3 and "rejected" in text
    assert text.count("masked") >= len(mask.masked)
    assert "accepted chain: #0 -> #1 -> #4" in text
    assert f"mask {mask.mask_id}: seed 9" in text and "(live)" in text
    assert "median S over shapes" in text

    assert main(["runs", "--state-dir", state_dir, "show", run_id, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chain"] == [0, 1, 4]
    assert [it["number"] for it in data["iterations"]] == [0, 1, 2, 3, 4]
    assert sorted(it["number"] for it in data["iterations"] if it["masked"]) == mask.masked
    assert any(e["kind"] == "masked" for e in data["events"])
    assert data["speedup_vs_baseline"] > 1.5


def test_runs_list_and_unknown_run(tmp_path, capsys):
    _, run_id = loop_with_iterations(tmp_path, speeds=[1.2])
    state_dir = str(tmp_path / "state")
    assert main(["runs", "--state-dir", state_dir, "list"]) == 0
    assert run_id in capsys.readouterr().out
    assert main(["runs", "--state-dir", state_dir, "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["run_id"] == run_id
    assert main(["runs", "--state-dir", state_dir, "show", "run-nope"]) == 2
    assert "Unknown run" in capsys.readouterr().err
