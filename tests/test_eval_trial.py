"""The judge's public object (`Trial`) and how a serving process's state directory reaches its
workers: through the launch options, never through the environment."""

from __future__ import annotations

import ast
from pathlib import Path

from atrex_mcp import paths
from atrex_mcp.evaluate.evaluator import LaunchOptions, Trial
from atrex_mcp.evaluate.models import EvalRequest
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.runs import evaluator_judge

ROOT = Path(__file__).resolve().parent.parent


def _trial(launch: LaunchOptions | None = None) -> Trial:
    return Trial(EvalRequest(op="rms_norm", baseline="eager", shapes=["0"]), Catalog(), None, None, launch=launch)


def test_the_state_dir_in_the_launch_options_is_protected_from_the_worker(tmp_path):
    state = tmp_path / "state"
    spec = _trial(LaunchOptions(state_dir=state)).launch_spec(tmp_path / "scratch")
    assert state.resolve() in spec.protected
    assert all(root in spec.protected for root in (r.resolve() for r in Catalog().roots))


def test_without_one_the_default_state_dir_is_protected(tmp_path, monkeypatch):
    monkeypatch.setenv("ATREX_STATE_DIR", str(tmp_path / "cli-state"))
    spec = _trial().launch_spec(tmp_path / "scratch")
    assert paths.default_state_dir().resolve() in spec.protected


def test_the_server_no_longer_writes_the_state_dir_into_the_environment():
    tree = ast.parse((ROOT / "atrex_mcp" / "server" / "app.py").read_text())
    writes = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Subscript) and "environ" in ast.unparse(target.value)
    ]
    assert not writes


def test_the_loops_judge_gives_its_state_dir_to_every_evaluation(tmp_path, monkeypatch):
    seen = []

    def evaluate(request, catalog, *, progress=None, cancel=None, launch=None):
        seen.append(launch)
        raise RuntimeError("stop here")

    monkeypatch.setattr(evaluator_judge, "evaluate", evaluate)
    judge = evaluator_judge.EvaluatorJudge(Catalog(), state_dir=tmp_path)
    try:
        judge.check("rms_norm", "", ["0"], hardware="h200", dsl="triton", timing=False)
    except RuntimeError:
        pass
    assert [launch.state_dir for launch in seen] == [tmp_path]
