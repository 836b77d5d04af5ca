"""The GPU job queue with injected fake jobs: timed work never overlaps any other work on its
device, correctness work runs in parallel up to the limit, jobs start in arrival order, and
waiting jobs hear their queue position."""

import anyio
import pytest

from atrex_mcp.server.gpu_queue import GpuQueue


@pytest.fixture
def anyio_backend():
    return "asyncio"


class Recorder:
    """Tracks which jobs run on which device at every moment."""

    def __init__(self):
        self.running: dict[str, list[str]] = {}
        self.peak_correctness = 0
        self.started: list[str] = []
        self.overlaps: list[str] = []

    async def job(self, queue: GpuQueue, name: str, kind: str, seconds: float, positions: list | None = None):
        async def on_position(position, waiting):
            positions.append((position, waiting))

        async with queue.slot(kind, on_position if positions is not None else None) as device:
            here = self.running.setdefault(device, [])
            if kind == "timed" and here:
                self.overlaps.append(f"{name} started next to {here}")
            if any(k == "timed" for _, k in here):
                self.overlaps.append(f"{name} started next to a timed job")
            here.append((name, kind))
            self.started.append(name)
            total = sum(1 for jobs in self.running.values() for _, k in jobs if k == "correctness")
            self.peak_correctness = max(self.peak_correctness, total)
            await anyio.sleep(seconds)
            here.remove((name, kind))


@pytest.mark.anyio
async def test_timed_jobs_never_overlap_on_one_gpu():
    queue, rec = GpuQueue(["cuda:0"], correctness_limit=3), Recorder()
    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(rec.job, queue, f"t{i}", "timed", 0.02)
            tg.start_soon(rec.job, queue, f"c{i}", "correctness", 0.02)
    assert rec.overlaps == []
    assert sorted(rec.started) == sorted([f"t{i}" for i in range(4)] + [f"c{i}" for i in range(4)])


@pytest.mark.anyio
async def test_correctness_runs_in_parallel_within_the_limit():
    queue, rec = GpuQueue(["cpu"], correctness_limit=2), Recorder()
    with anyio.fail_after(5):
        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(rec.job, queue, f"c{i}", "correctness", 0.1)
        elapsed = anyio.current_time() - start
    assert rec.peak_correctness == 2
    assert 0.25 < elapsed < 0.6  # three waves of two, not six in a row


@pytest.mark.anyio
async def test_two_gpus_time_two_jobs_at_once_and_arrival_order_holds():
    queue, rec = GpuQueue(["cuda:0", "cuda:1"], correctness_limit=4), Recorder()
    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(rec.job, queue, name, "timed", 0.05)
            await anyio.sleep(0.005)
    assert rec.overlaps == []
    assert rec.started == ["a", "b", "c"]


@pytest.mark.anyio
async def test_waiting_jobs_hear_their_position_and_cancelled_waiters_leave():
    queue, rec = GpuQueue(["cuda:0"]), Recorder()
    positions: list = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.job, queue, "first", "timed", 0.1)
        await anyio.sleep(0.01)
        doomed_scope = anyio.CancelScope()

        async def doomed():
            with doomed_scope:
                await rec.job(queue, "doomed", "timed", 0.1)

        tg.start_soon(doomed)
        await anyio.sleep(0.01)
        tg.start_soon(rec.job, queue, "third", "timed", 0.01, positions)
        await anyio.sleep(0.01)
        assert queue.state().waiting == ["timed", "timed"]
        doomed_scope.cancel()
    assert "doomed" not in rec.started
    assert positions[0] == (2, 2) and positions[-1][0] == 1
    assert queue.state().waiting == [] and queue.state().running == {"cuda:0": []}
