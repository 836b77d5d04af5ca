"""Partial restart: a seeded, logged, reversible mask over iteration memories that never hides
the baseline, the accepted kernel or the audit trail."""

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.runs.dropout import choose_masked, mask_count
from tests.runs_fixtures import loop_with_iterations


def test_choice_depends_only_on_seed_and_eligible_set():
    eligible = list(range(1, 21))
    assert choose_masked(eligible, 0.5, seed=11) == choose_masked(list(reversed(eligible)), 0.5, seed=11)
    assert choose_masked(eligible, 0.5, seed=11) != choose_masked(eligible, 0.5, seed=12)
    assert len(choose_masked(eligible, 0.5, seed=11)) == 10
    assert mask_count(3, 0.5) == 2 and mask_count(4, 0.0) == 0 and mask_count(4, 1.0) == 4
    with pytest.raises(AtrexError):
        choose_masked(eligible, 1.5, seed=1)


def test_partial_restart_masks_a_seeded_subset_and_is_reversible(tmp_path):
    service, run_id = loop_with_iterations(tmp_path, speeds=[1.3, 1.0, 0.7, 1.0, 1.6, 1.0])
    before = service.run_state(run_id)
    accepted = before.accepted.number
    mask = service.partial_restart(run_id, fraction=0.5, seed=42)

    assert 0 not in mask.eligible and accepted not in mask.eligible
    assert set(mask.masked) <= set(mask.eligible) and len(mask.masked) == mask_count(len(mask.eligible), 0.5)
    after = service.run_state(run_id)
    shown = {it.number for it in after.iterations}
    assert shown.isdisjoint(mask.masked)
    assert after.baseline.number == 0 and after.accepted.number == accepted
    assert after.summary.masked == len(mask.masked) and after.live_masks == [mask.mask_id]

    # The audit trail keeps everything and says exactly what was masked.
    events = service.store.events(run_id)
    logged = [e for e in events if e.kind == "masked"]
    assert logged[-1].detail["masked"] == mask.masked and logged[-1].detail["seed"] == 42
    assert sum(e.kind.startswith("iteration_") for e in events) == len(before.iterations)

    service.unmask(run_id, mask.mask_id)
    restored = service.run_state(run_id)
    assert [it.number for it in restored.iterations] == [it.number for it in before.iterations]
    assert restored.live_masks == [] and restored.summary == before.summary


def test_same_seed_same_state_masks_the_same_records(tmp_path):
    a_service, a_run = loop_with_iterations(tmp_path / "a", speeds=[1.0, 1.2, 1.0, 0.9, 1.0])
    b_service, b_run = loop_with_iterations(tmp_path / "b", speeds=[1.0, 1.2, 1.0, 0.9, 1.0])
    assert a_service.partial_restart(a_run, 0.6, seed=5).masked == b_service.partial_restart(b_run, 0.6, seed=5).masked


def test_masks_stack_and_unmask_all_restores_everything(tmp_path):
    service, run_id = loop_with_iterations(tmp_path, speeds=[1.0] * 6)
    first = service.partial_restart(run_id, 0.5, seed=1)
    second = service.partial_restart(run_id, 0.5, seed=2)
    assert set(first.masked).isdisjoint(second.masked)
    assert set(second.eligible) == set(first.eligible) - set(first.masked)
    reverted = service.unmask(run_id)
    assert {m.mask_id for m in reverted} == {first.mask_id, second.mask_id}
    assert service.run_state(run_id).summary.masked == 0
    with pytest.raises(AtrexError, match="no live mask"):
        service.unmask(run_id, first.mask_id)
