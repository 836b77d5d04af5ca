"""A run from start to accepted kernel with a scripted judge: baseline, accepted, rejected and
failed iterations, citations, the agent's view in both modes, and the re-measure on a race."""

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.policy import Policy
from atrex_mcp.runs.models import Category, Plan
from tests.runs_fixtures import OP, SHAPES, ScriptedJudge, make_service, plan, source, store_profile


@pytest.mark.slow
def test_start_run_records_target_workspace_and_roofline(tmp_path):
    service = make_service(tmp_path)
    run = service.start_run(OP, SHAPES, workspace_root="/work/agent")
    assert run.run_id.startswith("run-") and run.shapes == SHAPES and run.baseline is None
    assert set(run.workspace["visible_files"]) == {"reference.py", "input.py", "shapes.json"}
    assert run.roofline["hardware"] == "h200" and run.roofline["shapes"]["0"]["bound"] == "memory"
    assert run.roofline["shapes"]["0"]["t_sol_ms"] > 0 and "hbm_bandwidth" in run.roofline["sources"]
    assert service.start_run(OP).shapes == SHAPES  # all scored shapes by default (smoke excluded)
    with pytest.raises(AtrexError, match="Unknown shape"):
        service.start_run(OP, ["0", "99"])
    with pytest.raises(AtrexError, match="Unknown problem"):
        service.start_run("no_such_op")


@pytest.mark.slow
def test_baseline_must_be_correct_and_becomes_the_accepted_kernel(tmp_path):
    service = make_service(tmp_path)
    run = service.start_run(OP, SHAPES)
    with pytest.raises(AtrexError, match="baseline must be correct") as err:
        service.submit_baseline(run.run_id, source(1.0, "bad", wrong=True))
    assert err.value.info.category == "baseline_not_correct"
    base = service.submit_baseline(run.run_id, source(1.0, "baseline"))
    assert base.number == 0 and base.status == "accepted" and base.times.time_ms == {"0": 0.02, "1": 0.04}
    assert base.times.score["0"] == pytest.approx(run.roofline["shapes"]["0"]["t_sol_ms"] / 0.02)
    stored = service.store.get_run(run.run_id)
    assert stored.baseline == 0 and stored.accepted == 0
    kinds = [e.kind for e in service.store.events(run.run_id)]
    assert kinds == ["run_started", "baseline_refused", "baseline_accepted"]
    with pytest.raises(AtrexError, match="already has a baseline"):
        service.submit_baseline(run.run_id, source(2.0, "again"))


def test_iterations_are_verified_by_the_server_and_all_kept(tmp_path):
    service = make_service(tmp_path)
    run = service.start_run(OP, SHAPES)
    with pytest.raises(AtrexError, match="no baseline"):
        service.record_iteration(run.run_id, plan("prof-x"), source(1.2, "early"))
    service.submit_baseline(run.run_id, source(1.0, "baseline"))
    prof = store_profile(service, run.run_id)

    faster = service.record_iteration(run.run_id, plan(prof, Category.vectorisation, 1.2), source(1.25, "a"))
    same = service.record_iteration(run.run_id, plan(prof, Category.tiling), source(1.25, "b"))
    wrong = service.record_iteration(run.run_id, plan(prof, Category.prefetching), source(3.0, "c", wrong=True))
    identical = service.record_iteration(run.run_id, plan(prof), source(1.25, "a"))
    again = service.record_iteration(run.run_id, plan(prof, Category.launch_configuration), source(1.6, "d"))

    assert (faster.number, faster.status, faster.compared_to) == (1, "accepted", 0)
    assert faster.decision.speedup == pytest.approx(1.25, rel=0.03) and faster.decision.ci_low > 1
    assert same.status == "rejected" and "noise" in same.reason and same.compared_to == 1
    assert wrong.status == "failed" and "shape 1" in wrong.reason and wrong.decision is None
    assert identical.status == "rejected" and identical.reason == "identical to the accepted kernel"
    assert again.status == "accepted" and again.compared_to == 1

    state = service.run_state(run.run_id)
    assert state.accepted.number == 5 and "speed: 1.6" in state.accepted.source
    assert state.baseline.number == 0 and "speed: 1.0" in state.baseline.source
    assert state.accepted.speedup_vs_baseline == pytest.approx(1.6, rel=0.05)
    assert state.summary.recorded == state.summary.visible == 5
    assert (state.summary.accepted, state.summary.rejected, state.summary.failed) == (2, 2, 1)
    assert state.summary.by_category["vectorisation"].accepted == 1
    assert [it.number for it in state.iterations] == [1, 2, 3, 4, 5]
    assert all(it.plan is not None and len(it.source_sha256) == 64 for it in state.iterations)
    assert state.roofline is not None and state.accepted.times.score["0"] is not None


def test_benchmark_view_hides_roofline_and_scores(tmp_path):
    service = make_service(tmp_path)
    run = service.start_run(OP, SHAPES)
    service.submit_baseline(run.run_id, source(1.0, "baseline"))
    prof = store_profile(service, run.run_id)
    service.record_iteration(run.run_id, plan(prof), source(1.5, "a"))
    hidden = Policy("benchmark", service.catalog).run_state_view(service.run_state(run.run_id))
    assert hidden.roofline is None
    assert hidden.baseline.times.score == {} and hidden.accepted.times.score == {}
    assert all(it.times.score == {} for it in hidden.iterations)
    assert hidden.accepted.times.time_ms["0"] > 0  # the agent's own times stay visible
    text = hidden.model_dump_json()
    assert "t_sol_ms" not in text and 'score": {"' not in text


def test_plans_must_cite_stored_profiles_of_the_same_operator(tmp_path):
    service = make_service(tmp_path)
    run = service.start_run(OP, SHAPES)
    service.submit_baseline(run.run_id, source(1.0, "baseline"))
    with pytest.raises(AtrexError, match="never stored"):
        service.record_iteration(run.run_id, plan("prof-missing"), source(1.2, "a"))
    other = service.store.save_profile(op="silu_and_mul", shape="0", source_sha256="0" * 64, tool="ncu", report={})
    with pytest.raises(AtrexError, match="another operator"):
        service.record_iteration(run.run_id, plan(other), source(1.2, "a"))
    service.doc_exists = lambda doc_id: doc_id.startswith("patterns/")
    bad_doc = plan(store_profile(service)).model_copy(update={"knowledge": ["nope/doc"]})
    with pytest.raises(AtrexError, match="name no document") as refused:
        service.record_iteration(run.run_id, bad_doc, source(1.2, "a"))
    assert "exactly as wiki_search returned them" in refused.value.info.hint  # says how to fix, e.g. '-' vs '_'
    assert "nope/doc" not in str(refused.value.info)  # the caller's text is not echoed
    with pytest.raises(ValueError):
        Plan(change="x y z", bottleneck="memory", evidence=[], expected_effect=1.1, category="tiling")
    with pytest.raises(ValueError):
        Plan(change="x y z", bottleneck="memory", evidence=["p"], expected_effect=1.1, category="tiling_and_fusion")


def test_a_candidate_timed_against_a_superseded_kernel_is_measured_again(tmp_path):
    """Another client's iteration is accepted while ours is being timed: ours must be re-timed
    against the new accepted kernel, never committed against the old one."""
    judge = ScriptedJudge()
    service = make_service(tmp_path, judge)
    run = service.start_run(OP, SHAPES)
    service.submit_baseline(run.run_id, source(1.0, "baseline"))
    prof = store_profile(service, run.run_id)
    raced = []

    def rival_commits_first():
        if not raced:
            raced.append(True)
            service.record_iteration(run.run_id, plan(prof), source(1.5, "rival"))

    judge.on_time_pair = rival_commits_first
    ours = service.record_iteration(run.run_id, plan(prof), source(1.3, "ours"))
    assert ours.number == 2 and ours.compared_to == 1
    assert ours.status == "rejected"  # 1.3 is slower than the rival's accepted 1.5
    assert judge.calls["time_pair"] == 3  # ours, rival's, ours again
