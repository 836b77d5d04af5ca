"""The worker's memory cap: one memory cgroup holds the worker and everything it forks, so the sum
of what RLIMIT_DATA does not count (small shared mappings, tmpfs files, forked children's memory) is
bounded. Each attack of tests/exploits/shared_memory_sum.py is stopped by the kernel and reported
as over the memory cap; the worker's Isolation record carries the cap, and no cgroup is left.
Where the tree is not writable the worker runs without a cap and says so."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from atrex_mcp.evaluate import EvalRequest
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.evaluator import CPU_HOST_MEMORY_BYTES, Trial
from atrex_mcp.problemset.catalog import Catalog
from eval_support import EXAMPLES, exploit_source, make_problem_root, run_eval
from sandbox import memory_cgroup
from sandbox.launcher import import_paths, isolation_plan

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU worker (TRITON_INTERPRET=1)")

CAP = 512 << 20  # the attacks' cap: room for the worker's start-up (about 160 MiB here), a third of what they take
V1_MEMORY = Path("/sys/fs/cgroup/memory")
ACTIVE = memory_cgroup.hierarchy()
needs_cap = pytest.mark.skipif(isinstance(ACTIVE, str), reason=f"no memory cgroup here: {ACTIVE}")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return Catalog(make_problem_root(tmp_path_factory.mktemp("problems")))


def _worker_cgroups() -> set[str]:
    """This process's worker cgroups in the tree."""
    if isinstance(ACTIVE, str):
        return set()
    return {name for name in os.listdir(ACTIVE.base) if name.startswith(f"atrex-worker-{os.getpid()}-")}


@pytest.fixture
def cgroups_before() -> set[str]:
    """The worker cgroups alive before the test: a spare worker another test file started ahead
    keeps its own cgroup until it is used or stopped, and is not this test's leftover."""
    return _worker_cgroups()


def _ours(before: set[str]) -> list[str]:
    """Worker cgroups made since `before` that are still in the tree."""
    return sorted(_worker_cgroups() - before)


def test_the_cap_is_active_where_the_tree_is_writable():
    """Root with the v1 memory hierarchy writable (this machine, CI): the cap must be made, not skipped."""
    plan = isolation_plan(import_paths())
    if os.geteuid() == 0 and os.access(V1_MEMORY / "memory.limit_in_bytes", os.W_OK):
        assert isinstance(ACTIVE, memory_cgroup.Hierarchy), ACTIVE
    if isinstance(ACTIVE, memory_cgroup.Hierarchy):
        assert plan["memory_cgroup"] == ACTIVE.version in (1, 2)
        assert not any("no memory cgroup" in note for note in plan["notes"]), plan["notes"]
    else:
        assert plan["memory_cgroup"] is None
        assert any(note.startswith("no memory cgroup per worker") for note in plan["notes"]), plan["notes"]


def test_an_honest_kernel_is_judged_under_the_default_cap_and_its_cgroup_goes(catalog, cgroups_before):
    result = run_eval(catalog, (EXAMPLES / "rms_norm_triton.py").read_text())
    assert all(s.correct for s in result.shapes), [s.message for s in result.shapes]
    if isinstance(ACTIVE, str):
        assert result.isolation.memory_cap_bytes is None and result.isolation.memory_peak_bytes is None
        assert any(w.startswith("no memory cgroup per worker") for w in result.isolation.warnings)
        return
    cap = memory_cgroup.default_cap(CPU_HOST_MEMORY_BYTES)
    assert result.isolation.memory_cap_bytes == cap
    assert 0 < (result.isolation.memory_peak_bytes or 0) <= cap
    assert _ours(cgroups_before) == []


def test_without_a_writable_tree_the_worker_reports_no_cap(catalog, monkeypatch):
    monkeypatch.setattr(memory_cgroup, "hierarchy", lambda: "the cgroup tree is read-only here")
    result = run_eval(catalog, (EXAMPLES / "rms_norm_triton.py").read_text())
    assert all(s.correct for s in result.shapes), [s.message for s in result.shapes]
    assert result.isolation.memory_cap_bytes is None and result.isolation.memory_peak_bytes is None
    assert "no memory cgroup per worker (the cgroup tree is read-only here)" in " ".join(result.isolation.warnings)


def _load(catalog: Catalog, source: str, scratch: Path):
    """Start a worker as evaluate() does, under a CAP-byte memory cap, and import `source` there."""
    trial = Trial(EvalRequest(op="rms_norm", source=source, shapes=["0"], seeds=1), catalog, None, None)
    session = trial.open_session(scratch)
    # A scratch tmpfs larger than the cap: the cap, not the quota, must stop the scratch variants.
    session.spec = dataclasses.replace(session.spec, memory_cap_bytes=CAP, scratch_bytes=2 << 30)
    try:
        failure = trial.load(session)
    finally:
        session.stop()
    return failure, session.isolation


@needs_cap
@pytest.mark.parametrize("variant", ["many_mappings", "grown_scratch_file", "forked_children", "scratch_writes"])
def test_shared_memory_past_the_cap_is_killed_and_named(catalog, tmp_path, variant, cgroups_before):
    source = exploit_source("shared_memory_sum").replace('VARIANT = "many_mappings"', f"VARIANT = {variant!r}")
    failure, isolation = _load(catalog, source, tmp_path)
    assert failure is not None, "the candidate took 1.5 GiB under a 512 MiB cap"
    assert (failure.stage, failure.category) == (tx.COMPILE, tx.COMPILE_OOM), failure
    assert "memory cap of 512 MiB (LaunchSpec.memory_cap_bytes" in failure.message, failure.message
    assert isolation.memory_cap_bytes == CAP
    assert isolation.memory_peak_bytes is not None and isolation.memory_peak_bytes <= CAP
    assert _ours(cgroups_before) == []


@needs_cap
def test_shared_memory_past_the_cap_in_forward_fails_the_shape_and_the_judge_goes_on(
    catalog, monkeypatch, cgroups_before
):
    monkeypatch.setattr(memory_cgroup, "default_cap", lambda host_memory_bytes: CAP)
    source = exploit_source("shared_memory_sum").replace('VARIANT = "many_mappings"', 'VARIANT = "in_forward"')
    result = run_eval(catalog, source, shapes=["0", "1"])
    assert result.compiled and result.isolation.memory_cap_bytes == CAP
    for shape in result.shapes:  # the worker restarted after the first kill, and was killed again
        assert (shape.stage, shape.category) == (tx.RUNTIME, tx.OOM), shape
        assert "memory cap of 512 MiB (LaunchSpec.memory_cap_bytes" in shape.message, shape.message
    assert _ours(cgroups_before) == []


@needs_cap
def test_a_crashed_servers_worker_cgroups_are_swept(tmp_path):
    """A cgroup named for a server that is gone, with a process still in it: killed and removed."""
    assert isinstance(ACTIVE, memory_cgroup.Hierarchy)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    group = memory_cgroup.MemoryCgroup.create(ACTIVE, 64 << 20)
    stale = f"atrex-worker-{gone.pid}-1-0"
    os.rename(group.path, ACTIVE.base / stale)
    os.close(group._dir_fd)
    group._dir_fd = -1
    group.close_join()
    with open(ACTIVE.base / stale / "cgroup.procs", "w") as procs:
        left = subprocess.Popen(["sleep", "60"])
        procs.write(str(left.pid))
    assert memory_cgroup.sweep_stale(ACTIVE) == [stale]
    assert left.wait(timeout=10) == -9
    assert not (ACTIVE.base / stale).exists()
