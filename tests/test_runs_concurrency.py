"""Two clients writing one run at once (two processes, and threads) do not corrupt it: numbers
are unique and dense, every verdict was measured against the kernel that was accepted when it
was committed, and the audit trail matches the records."""

import itertools
import subprocess
import sys
import textwrap
import threading

from atrex_mcp.paths import REPO_ROOT
from atrex_mcp.runs.audit import timeline
from atrex_mcp.runs.store import RunStore
from tests.runs_fixtures import make_service, plan, source, store_profile

CLIENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from atrex_mcp.problemset.catalog import Catalog
    from atrex_mcp.runs.iterations import RunService
    from atrex_mcp.runs.store import RunStore
    from tests.runs_fixtures import ScriptedJudge, plan, source
    service = RunService(RunStore(Path({state!r})), Catalog([Path({problems!r})]), ScriptedJudge(pairs=12))
    for i in range({count}):
        service.record_iteration({run!r}, plan({prof!r}), source(1.0 + 0.05 * i, "{name}-%d" % i))
        if i % 4 == 0:
            service.partial_restart({run!r}, 0.3, seed=i)
        if i % 5 == 0:
            service.unmask({run!r})
""")


def _check_consistent(store: RunStore, run_id: str, expected: int) -> None:
    t = timeline(store, run_id)
    numbers = [it.number for it in t.iterations]
    assert numbers == list(range(expected + 1))
    by_number = {it.number: it for it in t.iterations}
    accepted = [it for it in t.iterations if it.status == "accepted"]
    # accepted iterations form one chain: each compared against the previous accepted one
    for prev, cur in itertools.pairwise(accepted):
        assert cur.compared_to == prev.number
    assert t.run.accepted == accepted[-1].number
    for it in t.iterations[1:]:
        assert it.compared_to is not None and by_number[it.compared_to].status == "accepted"
        assert it.compared_to < it.number
    logged = [e.detail["number"] for e in t.events if e.kind.startswith(("iteration_", "baseline_"))]
    assert sorted(logged) == numbers


def test_two_processes_hammering_one_run(tmp_path):
    service = make_service(tmp_path)
    run = service.start_run("rms_norm", ["0", "1"])
    service.submit_baseline(run.run_id, source(1.0, "baseline"))
    prof = store_profile(service, run.run_id)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CLIENT.format(
                    root=str(REPO_ROOT),
                    state=str(tmp_path / "state"),
                    problems=str(tmp_path / "problems"),
                    run=run.run_id,
                    prof=prof,
                    count=12,
                    name=name,
                ),
            ]
        )
        for name in ("alpha", "beta")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    _check_consistent(RunStore(tmp_path / "state"), run.run_id, 24)


def test_threads_in_one_server(tmp_path):
    service = make_service(tmp_path)
    run = service.start_run("rms_norm", ["0", "1"])
    service.submit_baseline(run.run_id, source(1.0, "baseline"))
    prof = store_profile(service, run.run_id)
    errors = []

    def client(name):
        try:
            for i in range(8):
                service.record_iteration(run.run_id, plan(prof), source(1.0 + 0.07 * i, f"{name}-{i}"))
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in ("t1", "t2", "t3")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _check_consistent(service.store, run.run_id, 24)
