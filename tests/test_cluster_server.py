"""`serve --cluster`: the server's GPU work (validate, profile_kernel, a run's checks) runs on a
Dask cluster's workers instead of its local queue; two servers (two agents) share one pool, get
the local path's verdicts, and a benchmark-mode server still hides the hidden figures."""

from __future__ import annotations

import shutil
import time

import anyio
import psutil
import pytest

distributed = pytest.importorskip("distributed")

from atrex_mcp.cluster.engine import connect as connect_cluster  # noqa: E402
from atrex_mcp.cluster.engine import local_cluster  # noqa: E402
from atrex_mcp.cluster.remote import ClusterPool  # noqa: E402
from atrex_mcp.paths import REPO_ROOT  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from tests.server_fixtures import (  # noqa: E402
    config,
    connect,
    hidden_figures,
    leaks,
    result_text,
    with_hanging_forward,
)

pytestmark = pytest.mark.anyio

EXAMPLE = REPO_ROOT / "examples" / "rms_norm_triton.py"
SMOKE = {"op": "rms_norm", "shapes": ["smoke"], "seeds": 1}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def pool():
    # worker processes: every job spec and result crosses by pickle
    with local_cluster(["0", "1"]) as cluster, connect_cluster(cluster.scheduler_address) as connection:
        yield ClusterPool(connection, Catalog()), cluster


def descendants() -> set[int]:
    """Live processes below this one: the cluster's worker processes and the sandbox workers they started."""
    alive = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.add(process.pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def _cluster_config(tmp_path, pool, mode="optimize"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = config(tmp_path, mode, cluster=pool)
    shutil.copy(EXAMPLE, cfg.workspaces[0] / "kernel.py")
    return cfg


@pytest.mark.slow
async def test_two_servers_share_the_pool_with_the_local_verdicts(tmp_path, pool):
    cluster_pool, _cluster = pool
    (tmp_path / "local").mkdir()
    local_cfg = config(tmp_path / "local")
    wrong = EXAMPLE.read_text().replace("y = x * inv_rms * w", "y = x * inv_rms * w * 1.5")
    async with connect(local_cfg) as client:
        local = [
            (await client.call_tool("validate", {**SMOKE, "source": s})).structured_content
            for s in (EXAMPLE.read_text(), wrong)
        ]

    messages: list[str] = []
    remote: list[dict] = [{}, {}]
    texts = ["", ""]

    async def agent(i: int, source: str) -> None:
        async def progress(value, total, message):
            messages.append(message)

        mode = "benchmark" if i else "optimize"  # the second agent's server hides the hidden figures
        async with connect(_cluster_config(tmp_path / f"agent{i}", cluster_pool, mode)) as client:
            answer = await client.call_tool("validate", {**SMOKE, "source": source}, progress_callback=progress)
            remote[i] = answer.structured_content
            texts[i] = result_text(answer)

    with distributed.get_task_stream(client=cluster_pool.connection.client) as stream:
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent, 0, EXAMPLE.read_text())
            tg.start_soon(agent, 1, wrong)
    for here, there in zip(local, remote):
        assert [(s["id"], s["correct"], s["stage"], s["category"]) for s in there["shapes"]] == [
            (s["id"], s["correct"], s["stage"], s["category"]) for s in here["shapes"]
        ]
        assert there["compiled"] == here["compiled"] and there["candidate_sha256"] == here["candidate_sha256"]
    assert remote[0]["passed"] == 1 and remote[1]["failed"] == 1
    assert any("sent to the cluster" in m for m in messages) and any("shape smoke" in m for m in messages)
    numbers, strings = hidden_figures("rms_norm")
    assert leaks(texts[1], numbers, strings) == []
    calls = [t for t in stream.data if str(t["key"]).startswith("atrex-call-")]
    assert len(calls) == 2 and len({t["worker"] for t in calls}) == 2  # one call per worker GPU, side by side


async def test_profile_and_run_checks_run_on_the_cluster_and_are_stored_by_the_server(tmp_path, pool):
    cluster_pool, _ = pool
    cfg = _cluster_config(tmp_path, cluster_pool)
    async with connect(cfg) as client:
        profile = await client.call_tool("profile_kernel", {"op": "rms_norm", "path": "kernel.py"})
        run = (await client.call_tool("start_run", {"op": "rms_norm", "shapes": ["smoke"]})).structured_content
        baseline = await client.call_tool("submit_baseline", {"run_id": run["run_id"], "path": "kernel.py"})
    assert not profile.is_error, profile.content[0].text
    assert profile.structured_content["profile_id"].startswith("prof-") and profile.structured_content["fallback"]
    assert not baseline.is_error, baseline.content[0].text
    record = baseline.structured_content["record"]
    assert record["status"] == "accepted" and baseline.structured_content["accepted"] == 0


async def test_cancelling_a_cluster_call_stops_its_evaluation_on_the_worker(tmp_path, pool):
    cluster_pool, _ = pool
    before = descendants()
    hanging = with_hanging_forward(EXAMPLE.read_text(), 120)
    async with connect(_cluster_config(tmp_path, cluster_pool)) as client:
        started = anyio.Event()

        async def progress(value, total, message):
            if "shape smoke" in message:
                started.set()

        with anyio.move_on_after(90) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: client.call_tool("validate", {**SMOKE, "source": hanging}, progress_callback=progress)
                )
                await started.wait()
                assert descendants() - before, "the sandbox worker should be running under the cluster worker"
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
    deadline = time.monotonic() + 30
    while descendants() - before and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    assert not descendants() - before  # the worker's evaluation killed its sandbox worker
