"""Run state survives a server restart (a new store on the same directory) and a crash (a
writer process killed mid-loop) with every committed record intact."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from atrex_mcp.paths import REPO_ROOT
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.runs.iterations import RunService
from atrex_mcp.runs.store import RunStore
from tests.runs_fixtures import ScriptedJudge, loop_with_iterations, make_problem_root


def test_everything_survives_a_restart(tmp_path):
    service, run_id = loop_with_iterations(tmp_path, speeds=[1.3, 1.0, 1.5, 0.8])
    mask = service.partial_restart(run_id, 0.5, seed=3)
    before = service.run_state(run_id)
    events = service.store.events(run_id)
    del service  # the server goes away

    reopened = RunService(RunStore(tmp_path / "state"), Catalog([tmp_path / "problems"]), ScriptedJudge())
    assert reopened.run_state(run_id) == before
    assert reopened.store.events(run_id) == events
    assert reopened.store.masks(run_id)[0].masked == mask.masked
    # and the loop continues where it stopped
    profile = reopened.store.save_profile(op="rms_norm", shape="0", source_sha256="0" * 64, tool="ncu", report={})
    from tests.runs_fixtures import plan, source

    nxt = reopened.record_iteration(run_id, plan(profile), source(2.0, "after-restart"))
    assert nxt.number == len(before.iterations) + len(mask.masked) + 1 and nxt.status == "accepted"


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from atrex_mcp.problemset.catalog import Catalog
    from atrex_mcp.runs.iterations import RunService
    from atrex_mcp.runs.store import RunStore
    from tests.runs_fixtures import ScriptedJudge, plan, source
    service = RunService(RunStore(Path({state!r})), Catalog([Path({problems!r})]), ScriptedJudge())
    run = service.start_run("rms_norm", ["0", "1"])
    service.submit_baseline(run.run_id, source(1.0, "baseline"))
    prof = service.store.save_profile(op="rms_norm", shape="0", source_sha256="0" * 64, tool="ncu", report={{}},
                                      run_id=run.run_id)
    print(run.run_id, flush=True)
    i = 0
    while True:
        service.record_iteration(run.run_id, plan(prof), source(1.0 + 0.01 * (i % 7), f"k{{i}}"))
        i += 1
""")


def test_a_killed_writer_leaves_a_consistent_store(tmp_path):
    problems = make_problem_root(tmp_path / "problems")
    script = WRITER.format(root=str(REPO_ROOT), state=str(tmp_path / "state"), problems=str(problems))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    store = RunStore(tmp_path / "state")
    deadline = time.monotonic() + 30
    while len(store.iterations(run_id)) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # a crash: no cleanup, possibly mid-transaction
    proc.wait()

    iterations = store.iterations(run_id)
    assert len(iterations) >= 6
    assert [it.number for it in iterations] == list(range(len(iterations)))
    run = store.get_run(run_id)
    assert run.accepted in {it.number for it in iterations if it.status == "accepted"}
    logged = [e.detail["number"] for e in store.events(run_id) if e.kind.startswith(("iteration_", "baseline_"))]
    assert logged == [it.number for it in iterations]  # every record has its audit line, none without a record
    assert store.source(run_id, iterations[-1].number)
