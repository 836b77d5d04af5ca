"""A worker spawned ahead (evaluate.standby): a series of evaluations adopts it when the launch
settings match, gets the same verdicts and the same sandbox as with a worker of its own, and
nothing of a spare outlives the standby."""

from __future__ import annotations

import dataclasses
import os
import textwrap
import threading
import time

import pytest

from atrex_mcp.evaluate import EvalRequest, Standby, evaluate, open_session
from atrex_mcp.evaluate.session import protected_roots
from atrex_mcp.problemset.catalog import Catalog
from eval_support import CANARY, EXAMPLES, make_problem_root
from sandbox.launcher import LaunchSpec, Worker
from sandbox.messages import ProfileRequest

RMS = (EXAMPLES / "rms_norm_triton.py").read_text()


@pytest.fixture()
def catalog(tmp_path):
    return Catalog(make_problem_root(tmp_path / "problems"))


def _request(source: str, shapes: list[str] | None = None) -> EvalRequest:
    return EvalRequest(op="rms_norm", source=source, shapes=shapes or ["0", "1"], seeds=2)


def _spare_pid(standby: Standby) -> int:
    (spare,) = standby.waiting()
    assert spare.worker.alive
    return spare.worker.proc.pid


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_a_series_adopts_the_worker_spawned_during_the_evaluation_before(catalog):
    alone = evaluate(_request(RMS), catalog)
    with Standby(depth=1) as standby:
        first = evaluate(_request(RMS), catalog, standby=standby)
        spare_pid = _spare_pid(standby)  # spawned once the first candidate had loaded
        second = evaluate(_request(RMS), catalog, standby=standby)
        assert (standby.spawned, standby.adopted, standby.discarded) == (2, 1, 0)
    assert first.overhead.spawned_ahead_s == 0.0 and alone.overhead.spawned_ahead_s == 0.0
    assert second.overhead.spawned_ahead_s > 0.0
    for result in (first, second):
        assert [(s.id, s.correct, s.category) for s in result.shapes] == [
            (s.id, s.correct, s.category) for s in alone.shapes
        ]
        # the same sandbox (RLIMIT_DATA is the worker's own mapped size at init plus a fixed allowance; the
        # memory peak is what that worker's cgroup measured)
        measured = {"rlimits", "memory_peak_bytes"}
        assert result.isolation.model_dump(exclude=measured) == alone.isolation.model_dump(exclude=measured)
        assert result.isolation.rlimits.keys() == alone.isolation.rlimits.keys()
    assert _gone(spare_pid)  # it was the second evaluation's worker, stopped with it


@pytest.mark.slow
def test_an_adopted_worker_sees_its_own_files_and_still_not_the_hidden_ones(catalog):
    peek = RMS + textwrap.dedent(f"""
        import pathlib as _p
        _root = {str(catalog.roots[0])!r}
        for _f in _p.Path(_root).rglob("*.json"):
            try:
                if {CANARY!r} in _f.read_text():
                    raise SystemExit("read a hidden file: " + str(_f))
            except PermissionError:
                pass
        assert _p.Path("candidate.py").read_text().startswith({RMS[:40]!r})
    """)
    with Standby(depth=1) as standby:
        evaluate(_request(RMS, ["0"]), catalog, standby=standby)
        adopted = evaluate(_request(peek, ["0"]), catalog, standby=standby)
    assert adopted.overhead.spawned_ahead_s > 0.0
    assert adopted.compile_error is None, adopted.compile_error
    assert adopted.shapes[0].correct


@pytest.mark.slow
def test_a_candidate_that_fails_to_load_still_leaves_a_spare_and_its_verdict_is_unchanged(catalog):
    with Standby(depth=1) as standby:
        broken = evaluate(_request("import nonexistent_module_xyz\n"), catalog, standby=standby)
        assert broken.compile_error is not None and broken.compile_error.category == "import_error"
        after = evaluate(_request(RMS), catalog, standby=standby)
    assert after.overhead.spawned_ahead_s > 0.0 and all(s.correct for s in after.shapes)


@pytest.mark.slow
def test_mismatched_or_dead_spares_are_discarded_and_the_evaluation_spawns_its_own(catalog, tmp_path):
    other = Catalog(make_problem_root(tmp_path / "other"))  # other protected roots: other launch settings
    with Standby(depth=1) as standby:
        evaluate(_request(RMS, ["0"]), catalog, standby=standby)
        stale = _spare_pid(standby)
        result = evaluate(_request(RMS, ["0"]), other, standby=standby)
        assert (standby.adopted, standby.discarded) == (0, 1) and _gone(stale)
        assert result.overhead.spawned_ahead_s == 0.0 and result.shapes[0].correct

        standby.waiting()[0].worker.kill()  # the spare the second evaluation left died while waiting
        result = evaluate(_request(RMS, ["0"]), other, standby=standby)
        assert (standby.adopted, standby.discarded) == (0, 2)
        assert result.overhead.spawned_ahead_s == 0.0 and result.shapes[0].correct


@pytest.mark.parametrize("depth", [1, 2])
def test_closing_the_standby_kills_every_spare_and_removes_its_directory(catalog, depth):
    standby = Standby(depth=depth)
    evaluate(_request(RMS, ["0"]), catalog, standby=standby)
    spares = standby.waiting()
    assert len(spares) == depth and all(spare.worker.alive and spare.scratch.is_dir() for spare in spares)
    standby.close()
    assert standby.waiting() == []
    assert all(_gone(spare.worker.proc.pid) and not spare.scratch.exists() for spare in spares)
    standby.close()  # a second close does nothing


def test_profile_runs_an_untimed_forward_first_only_for_a_shape_the_worker_has_not_run(catalog):
    counting = RMS + textwrap.dedent("""
        _forward = Model.forward
        def _counted(self, *args, **kwargs):
            print("ATREX-FORWARD", flush=True)  # the scratch directory's top level is read-only to the worker
            return _forward(self, *args, **kwargs)
        Model.forward = _counted
    """)
    with open_session(catalog, "rms_norm", counting, shapes=["0", "1"], seeds=1) as worker:

        def forwards() -> int:
            time.sleep(0.2)  # the worker's output is drained on a thread
            return worker.session.worker.log_tail(64 * 1024).count("ATREX-FORWARD")

        worker.check("0")
        assert forwards() == 1
        count = 1
        for shape, warm_up in (("0", 0), ("1", 1)):  # "0" ran in the check; "1" did not
            request = ProfileRequest(shape=worker.trial.payload_shape(worker.trial.problem.shape(shape)), seed=7)
            reply = worker.session.call(request, 60)
            profiled = isinstance(reply, dict)  # without a GPU the profiler may refuse its CUDA activity
            assert profiled or "activities" in reply.message, reply
            count += warm_up + profiled
            assert forwards() == count


def test_a_spare_warms_up_only_on_a_gpu_and_is_adopted_as_if_it_had_not(catalog, tmp_path):
    cuda = LaunchSpec(scratch=tmp_path, device="cuda", protected=protected_roots(catalog.roots, None))
    cpu = dataclasses.replace(cuda, device="cpu")
    wrapped = dataclasses.replace(cuda, wrapper=["env", "A=1"])
    with Standby(depth=1) as standby:  # the profiler's warm-up is the default
        for spec, steps in ((cuda, ("triton_driver", "profiler")), (cpu, ()), (wrapped, ())):
            standby.refill(spec)
            assert [spare.worker.spec.warm for spare in standby.waiting()] == [steps]
            spare = standby.take(spec)  # the evaluation's own spec asks for no warm-up
            assert spare is not None and spare.worker.alive
            spare.close()
        assert (standby.spawned, standby.adopted, standby.discarded) == (3, 3, 0)
    with Standby(warm_profiler=False, depth=1) as standby:  # the profiler's warm-up can be left out
        standby.refill(cuda)
        assert [spare.worker.spec.warm for spare in standby.waiting()] == [("triton_driver",)]
    with Standby() as standby:  # the second spare warms up as the first does
        standby.refill(cuda)
        assert [spare.worker.spec.warm for spare in standby.waiting()] == [("triton_driver", "profiler")] * 2


def test_a_warm_up_step_that_fails_leaves_the_worker_serving(monkeypatch):
    from sandbox import worker

    ran = []

    def broken() -> None:
        ran.append("broken")
        raise RuntimeError("no driver here")

    monkeypatch.setattr(worker.torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(worker.WARM_STEPS, "profiler", broken)
    monkeypatch.setitem(worker.WARM_STEPS, "triton_driver", lambda: ran.append("driver"))
    worker.warm_up(["triton_driver", "profiler"])
    assert ran == ["driver", "broken"]
    monkeypatch.setattr(worker.torch.cuda, "is_available", lambda: False)
    worker.warm_up(["triton_driver"])  # no GPU: nothing runs
    assert ran == ["driver", "broken"]


def _cpu_spec(catalog, tmp_path, **settings) -> LaunchSpec:
    return LaunchSpec(scratch=tmp_path, device="cpu", protected=protected_roots(catalog.roots, None), **settings)


def _pids(spares) -> list[int]:
    return [spare.worker.proc.pid for spare in spares]


def test_two_spares_wait_and_are_taken_oldest_first_and_a_refill_tops_up_to_two(catalog, tmp_path):
    spec = _cpu_spec(catalog, tmp_path)
    with Standby() as standby:
        assert standby.depth == 2
        standby.refill(spec)
        standby.refill(spec)  # full: nothing more is spawned
        first, second = standby.waiting()
        assert first.worker.alive and second.worker.alive and first.scratch != second.scratch
        assert first.worker.spawned_at <= second.worker.spawned_at

        taken = standby.take(spec)
        assert taken is first
        standby.refill(spec)  # one was taken: one is spawned, behind the one still waiting
        assert standby.waiting()[0] is second and len(standby.waiting()) == 2
        assert standby.take(spec) is second
        taken.close()
        second.close()
        assert (standby.spawned, standby.adopted, standby.discarded) == (3, 2, 0)


def test_a_mismatched_or_dead_spare_is_discarded_and_the_next_matching_one_is_taken(catalog, tmp_path):
    spec = _cpu_spec(catalog, tmp_path)
    other = _cpu_spec(catalog, tmp_path, env={"ATREX_OTHER_SETTINGS": "1"})
    with Standby() as standby:
        standby.refill(other)
        standby.take(other).close()
        standby.refill(spec)  # waiting: one of `other`'s settings, then one of `spec`'s
        stale, matching = standby.waiting()
        assert standby.take(spec) is matching
        assert _gone(stale.worker.proc.pid) and not stale.scratch.exists() and standby.waiting() == []
        matching.close()
        assert (standby.spawned, standby.adopted, standby.discarded) == (3, 2, 1)

        standby.refill(spec)
        dead, alive = standby.waiting()
        dead.worker.kill()  # died while waiting: passed over
        assert standby.take(spec) is alive and standby.discarded == 2
        alive.close()

        standby.refill(spec)
        standby.waiting()[0].worker.kill()
        standby.refill(spec)  # a dead spare is replaced, not counted as waiting
        assert len(standby.waiting()) == 2 and all(spare.worker.alive for spare in standby.waiting())
        assert (standby.spawned, standby.discarded) == (8, 3)
    with pytest.raises(ValueError, match="depth 0"):
        Standby(depth=0)


def test_concurrent_refills_and_takes_never_hold_more_than_depth_spares(catalog, tmp_path, monkeypatch):
    spec = _cpu_spec(catalog, tmp_path)
    spawn, lock = Worker.spawn, threading.Lock()
    in_flight, held = [0], []

    def slow_spawn(worker: Worker) -> None:  # widens the window between a refill's check and its spare
        with lock:
            in_flight[0] += 1
        held.append(len(standby.waiting()) + in_flight[0])
        time.sleep(0.05)
        spawn(worker)
        with lock:
            in_flight[0] -= 1

    monkeypatch.setattr(Worker, "spawn", slow_spawn)
    with Standby() as standby:
        start = threading.Barrier(8)

        def refill() -> None:
            start.wait()
            standby.refill(spec)

        threads = [threading.Thread(target=refill) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert standby.spawned == 2 and len(standby.waiting()) == 2

        taken = []
        start = threading.Barrier(8)

        def take_or_refill(i: int) -> None:
            start.wait()
            for _ in range(3):
                if i % 2:
                    spare = standby.take(spec)
                    if spare is not None:
                        taken.append(spare)
                else:
                    standby.refill(spec)

        threads = [threading.Thread(target=take_or_refill, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        waiting = standby.waiting()
        assert max(held) <= 2 and len(waiting) <= 2
        assert len(taken) == standby.adopted and len({id(spare) for spare in taken}) == len(taken)
        assert standby.spawned == standby.adopted + standby.discarded + len(waiting)
        for spare in taken:
            spare.close()


def test_closing_during_a_refill_also_ends_the_spare_being_spawned(catalog, tmp_path, monkeypatch):
    spec = _cpu_spec(catalog, tmp_path)
    spawn, entered, release, spawned = Worker.spawn, threading.Event(), threading.Event(), []

    def held_spawn(worker: Worker) -> None:
        entered.set()
        assert release.wait(30)
        spawn(worker)
        spawned.append(worker)

    monkeypatch.setattr(Worker, "spawn", held_spawn)
    standby = Standby()
    refill = threading.Thread(target=standby.refill, args=(spec,))
    refill.start()
    assert entered.wait(30)
    close = threading.Thread(target=standby.close)
    close.start()
    time.sleep(0.2)
    assert close.is_alive()  # it waits for the spawn under way
    release.set()
    close.join(30)
    assert not close.is_alive()
    refill.join(30)
    (worker,) = spawned
    assert worker.proc is not None and _gone(worker.proc.pid) and not worker.spec.scratch.exists()
    assert standby.waiting() == [] and standby.spawned == 1  # the refill stopped: its second spare never started


@pytest.mark.slow
def test_a_series_with_two_spares_adopts_one_spawned_two_evaluations_ahead(catalog):
    with Standby() as standby:
        results = [evaluate(_request(RMS, ["0"]), catalog, standby=standby) for _ in range(3)]
        assert (standby.spawned, standby.adopted, standby.discarded) == (4, 2, 0)
        assert len(standby.waiting()) == 2
    first, second, third = results
    assert first.overhead.spawned_ahead_s == 0.0
    # both spares the first evaluation spawned: the third's waited through the second evaluation as well
    assert third.overhead.spawned_ahead_s > second.overhead.spawned_ahead_s > 0.0
    assert all(r.shapes[0].correct for r in results)
