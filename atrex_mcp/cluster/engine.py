"""Reaching the cluster that judges: a running Dask scheduler, or one started on this host.

`--cluster tcp://HOST:8786` connects to a scheduler whose workers were started with the
ordinary Dask commands (`dask worker tcp://HOST:8786 --nthreads 1 --resources GPU=1`, or
`dask cuda worker`); `--cluster local[:N]` starts a scheduler and N workers here: with
dask-cuda installed and GPUs present a LocalCUDACluster, otherwise one worker process per
visible GPU (or N CPU slots on a machine without one), each pinned to its GPU through
CUDA_VISIBLE_DEVICES.

Every job asks for the resource GPU=1 and every worker offers exactly one GPU and one thread,
so no two jobs ever share a GPU (the local path's rule: timed work has a GPU to itself).
A task whose worker dies is rescheduled by the scheduler; one that killed allowed-failures + 1
workers fails with KilledWorker. A local cluster is started with allowed-failures = 1 (a shard
gets one retry); a remote scheduler keeps its own setting, which the run's record states.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from atrex_mcp.errors import AtrexError

GPU = "GPU"  # the worker resource one judging job takes
ALLOWED_FAILURES = 1  # workers a task may kill before it is failed (KilledWorker): one retry
CONNECT_TIMEOUT_S = 30.0
INSTALL_HINT = "pip install 'atrex-mcp[cluster]' (Dask distributed) on this host and on every worker host."
WORKER_HINT = (
    "Start workers with `dask worker tcp://HOST:8786 --nthreads 1 --resources GPU=1 --memory-limit 0` "
    "(or `dask cuda worker tcp://HOST:8786 --resources GPU=1`), one per GPU."
)


@dataclass(frozen=True)
class ClusterTarget:
    """Where to judge: a scheduler's address, or a cluster on this host (address None)."""

    address: str | None
    workers: int | None = None  # local only: how many workers (None: one per visible GPU)

    @property
    def local(self) -> bool:
        return self.address is None


def parse_target(text: str) -> ClusterTarget:
    """`tcp://HOST:PORT` (any Dask address), `local` or `local:N`."""
    text = text.strip()
    if text == "local" or text.startswith("local:"):
        count = text.partition(":")[2]
        if not count:
            return ClusterTarget(None)
        if not count.isdigit() or int(count) < 1:
            raise AtrexError(
                "input",
                "bad_cluster",
                f"--cluster {text}: the worker count after local: must be a whole number >= 1.",
                "Write local, local:2, or a scheduler address such as tcp://HOST:8786.",
            )
        return ClusterTarget(None, int(count))
    if "://" in text:
        return ClusterTarget(text)
    raise AtrexError(
        "input",
        "bad_cluster",
        f"--cluster {text!r} is neither a scheduler address nor local[:N].",
        "Write a scheduler address such as tcp://HOST:8786, or local / local:N for workers on this host.",
    )


def require_distributed() -> Any:
    """The `distributed` module, or a clear error naming the extra to install."""
    try:
        import distributed
    except ImportError:
        raise AtrexError(
            "input",
            "cluster_unavailable",
            "Dask distributed is not installed, so --cluster cannot be used.",
            INSTALL_HINT,
        ) from None
    return distributed


def visible_devices(count: int | None) -> list[str]:
    """CUDA_VISIBLE_DEVICES values, one per worker: the first `count` GPUs this process may use
    (its own CUDA_VISIBLE_DEVICES when set); without a GPU, `count` (default 1) CPU slots whose
    value is only a label."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())]
    if not ids:
        ids = [str(i) for i in range(count or 1)]
    return ids[: count or len(ids)]


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def worker_name(device: str, lane: int, lanes: int) -> str:
    return device if lanes == 1 else f"{device}-{lane}"


def local_cluster(devices: list[str], lanes: int = 1) -> Any:
    """A scheduler on the loopback and one single-threaded worker process per device (per lane
    of a device), each offering GPU=1 and seeing only its own device. dask-cuda's
    LocalCUDACluster is used instead when it is installed, a GPU is present and each device has
    one worker: it also sets the workers' CPU affinity to their GPU's NUMA node. No worker has a
    memory limit: the nanny would kill a judge holding large pinned buffers, and the candidate's
    own process is bounded by the sandbox's rlimits."""
    distributed = require_distributed()
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        if lanes == 1 and _has_cuda():
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                pass
            else:
                return LocalCUDACluster(
                    CUDA_VISIBLE_DEVICES=",".join(devices),
                    threads_per_worker=1,
                    resources={GPU: 1},
                    host="127.0.0.1",
                    dashboard_address=None,
                    memory_limit=0,
                )
        workers = {
            worker_name(d, lane, lanes): {
                "cls": distributed.Nanny,
                "options": {
                    "nthreads": 1,
                    "resources": {GPU: 1},
                    "env": {"CUDA_VISIBLE_DEVICES": d},
                    "host": "127.0.0.1",
                    "memory_limit": 0,
                    "name": worker_name(d, lane, lanes),
                    "silence_logs": logging.ERROR,
                },
            }
            for d in devices
            for lane in range(1, lanes + 1)
        }
        scheduler = {
            "cls": distributed.Scheduler,
            "options": {
                "host": "127.0.0.1",
                "dashboard": False,
                "dashboard_address": None,
                "allowed_failures": ALLOWED_FAILURES,
            },
        }
        return distributed.SpecCluster(
            workers=workers, scheduler=scheduler, silence_logs=logging.ERROR, name="atrex-local"
        )


@dataclass
class Connection:
    """A client of the cluster and what it was told to connect to."""

    client: Any
    target: ClusterTarget
    cluster: Any = None  # the local cluster this connection started, if any

    @property
    def scheduler_address(self) -> str:
        return self.client.scheduler.address

    def allowed_failures(self) -> int:
        """The scheduler's allowed-failures: how many workers a task may kill before it fails."""
        return int(self.client.run_on_scheduler(_scheduler_allowed_failures))

    def workers(self) -> dict[str, dict[str, Any]]:
        """Worker address -> name, resources and threads, as the scheduler knows them."""
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return {
            addr: {"name": str(w.get("name")), "resources": w.get("resources", {}), "nthreads": w.get("nthreads")}
            for addr, w in info.items()
        }


def _scheduler_allowed_failures(dask_scheduler: Any) -> int:
    return dask_scheduler.allowed_failures


@contextmanager
def connect(text: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[Connection]:
    """A Connection to `text` (see parse_target) with at least one GPU-offering worker; the local
    cluster it started, if any, is closed on exit."""
    target = parse_target(text)
    distributed = require_distributed()
    cluster = None
    try:
        if target.local:
            devices = visible_devices(target.workers)
            if target.workers is not None and len(devices) < target.workers:
                raise AtrexError(
                    "input",
                    "bad_cluster",
                    f"--cluster {text}: this host has only {len(devices)} GPU(s) ({', '.join(devices)}).",
                    f"Write local:{len(devices)} or less, or local for one worker per GPU.",
                )
            try:
                cluster = local_cluster(devices)
            except (OSError, RuntimeError, TimeoutError) as exc:
                raise AtrexError(
                    "runtime",
                    "cluster_start_failed",
                    f"The local Dask cluster did not start: {exc}",
                    "Check that this host can start Python processes and bind loopback ports.",
                ) from None
            client = distributed.Client(cluster, timeout=timeout_s)
        else:
            try:
                client = distributed.Client(target.address, timeout=timeout_s)
            except (OSError, TimeoutError) as exc:
                raise AtrexError(
                    "input",
                    "cluster_unreachable",
                    f"No Dask scheduler answered at {target.address} ({exc}).",
                    f"Start one with `dask scheduler` on that host, then check the address and port. {WORKER_HINT}",
                ) from None
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
    connection = Connection(client, target, cluster)
    try:
        _wait_for_gpu_workers(connection, timeout_s)
        yield connection
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _wait_for_gpu_workers(connection: Connection, timeout_s: float) -> None:
    try:
        connection.client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError:
        raise AtrexError(
            "input",
            "cluster_no_workers",
            f"The scheduler at {connection.scheduler_address} has no workers (waited {timeout_s:.0f} s).",
            WORKER_HINT,
        ) from None
    if not any(w["resources"].get(GPU) for w in connection.workers().values()):
        raise AtrexError(
            "input",
            "cluster_no_gpu_resource",
            f"No worker of {connection.scheduler_address} offers the resource {GPU}: jobs would wait forever.",
            WORKER_HINT,
        )
