"""Sandbox workers spawned ahead, for the next evaluations of a series to adopt.

Before its first shape an evaluation waits for its worker's process to start and import torch,
the DSL and the profiler (2-5 s on the H200's host, most of its fixed cost). None of that needs
the candidate or touches the GPU (`sandbox.launcher.Worker.spawn`; with `warm_profiler` the
profiler's set-up does create a CUDA context), so a series of evaluations
(a candidate set, a baseline run) spawns the next ones' workers while the current one runs:

    with Standby() as standby:
        for request in requests:
            evaluate(request, catalog, standby=standby)

A spare is an empty scratch directory, an output arena and a spawned worker that has not
been sent `init`: the evaluation that adopts it writes its files into that directory and then
starts the worker as it would a new one (CUDA, the sandbox's rules, the candidate's import all
come after). An evaluation whose launch settings differ from the spares' (another device, DSL
environment or profiler wrapper) discards them and spawns its own.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from atrex_mcp.evaluate.transfer import OutputArena
from sandbox.launcher import LaunchSpec, Worker


def _settings(spec: LaunchSpec) -> LaunchSpec:
    """What a spare must share with the evaluation adopting it: everything but its own
    scratch directory, arena and what it set up while it waited."""
    return dataclasses.replace(spec, scratch=Path("."), output_fd=None, warm=())


@dataclass
class Spare:
    """A spawned worker with the scratch directory and arena it was spawned with; whoever takes
    it owns all three (`close` when it is not used)."""

    directory: tempfile.TemporaryDirectory
    arena: OutputArena
    worker: Worker

    @property
    def scratch(self) -> Path:
        return Path(self.directory.name)

    def close(self) -> None:
        self.worker.kill()
        self.arena.close()
        self.directory.cleanup()


DEFAULT_DEPTH = 2


class Standby:
    """Holds up to `depth` spares, oldest first; thread-safe, so evaluations on several threads
    may share it.

    A spare takes 9-10 s on the H200's host from its spawn until it is ready (the process, torch
    and Triton's imports, the warm-up below). One spare, spawned when the evaluation before
    loads its candidate, is still starting when that evaluation takes less: the next one waits
    for the rest. With two, each spare is spawned two evaluations ahead of the one that adopts
    it. In a series the pool is topped up once per evaluation, so two spawn at once only at the
    first refill (and after a discard); after that one spawns per evaluation, as with one.

    What the second spare costs: one more process waiting beside the evaluation (in a memory
    cgroup of its own: the host memory of torch and the DSL imported) and, on a GPU with
    `warm_profiler`, one more CUDA context (a few hundred MiB of GPU memory) while the evaluation
    runs; two spawning at once use host CPU (imports, Triton's C helper build) while the
    evaluation may be timing. A series' last two spares, not one, are spawned for nothing. The
    two of a first refill are not staggered: a refill comes once the evaluation has loaded its
    candidate, before its timing, and the probe below (which fills a standby of this depth)
    measures what spawning them together does to a timing beside them. `depth=1` keeps one: half
    the head start, none of the second spare's costs.

    A spare on a GPU sets up Triton's CUDA driver while it waits (sandbox.worker.WARM_STEPS: the
    C helper Triton builds with the system compiler on first use, no CUDA context), so the
    evaluation adopting it does not pay that in its first kernel launch. With `warm_profiler` (the
    default) it also opens an empty profiler session: the first profiled shape then does not pay
    the profiler's set-up (about 4 s on the H200, 5.7 s for an evaluation without a warmed spare).
    That creates the spare's CUDA context beside the evaluation that holds the GPU; on the H200 a
    timed 64 MiB copy beside a spare warming its profiler kept its median (34.75 µs, 27,000 calls
    in each 10 s window) and its slowest half-second bin (35.46 µs alone, 34.78 beside:
    measurements/judge_throughput_gpu.py's probe, 2026-12-02). Every spare warms the same: each
    becomes the oldest in turn, and its warm-up is fixed at spawn (a waiting worker takes no
    request before `init`). A spare under a profiler wrapper warms nothing.

    `spawned` counts the spares spawned, `adopted` those taken by an evaluation and `discarded`
    those closed because their settings did not match or their process had died; what `close`
    ends (a series' last spares) is in none but `spawned`."""

    def __init__(self, warm_profiler: bool = True, depth: int = DEFAULT_DEPTH) -> None:
        if depth < 1:
            raise ValueError(f"standby: depth {depth} keeps no spare; use 1 or more, or evaluate without a Standby")
        self.warm_profiler = warm_profiler
        self.depth = depth
        self._spares: deque[Spare] = deque()
        self._spawning = 0  # spares being spawned outside the lock, counted against `depth`
        self._generation = 0  # raised by `close`: a spawn it overlapped closes its spare
        self._changed = threading.Condition()
        self.spawned = self.adopted = self.discarded = 0

    def waiting(self) -> list[Spare]:
        """The spares waiting now, oldest first (still the standby's: take one to own it)."""
        with self._changed:
            return list(self._spares)

    def take(self, spec: LaunchSpec) -> Spare | None:
        """The oldest spare spawned with `spec`'s settings whose process still runs; None when
        there is none. Every waiting spare of other settings or with a dead process is closed."""
        settings = _settings(spec)
        with self._changed:
            chosen, kept, stale = None, deque[Spare](), []
            for spare in self._spares:
                if _settings(spare.worker.spec) != settings or not spare.worker.alive:
                    stale.append(spare)
                elif chosen is None:
                    chosen = spare
                else:
                    kept.append(spare)
            self._spares = kept
            self.discarded += len(stale)
            self.adopted += chosen is not None
        for spare in stale:
            spare.close()
        return chosen

    def _steps(self, spec: LaunchSpec) -> tuple[str, ...]:
        """What a spare of `spec` sets up while it waits (sandbox.launcher.LaunchSpec.warm)."""
        if spec.device != "cuda" or spec.wrapper:
            return ()
        return ("triton_driver", "profiler") if self.warm_profiler else ("triton_driver",)

    def _spawn(self, spec: LaunchSpec) -> Spare | None:
        """A spare of `spec`'s settings in a directory of its own; None when the spawn failed."""
        directory = tempfile.TemporaryDirectory(prefix="atrex-eval-")
        arena = None
        try:
            arena = OutputArena(cuda=spec.device == "cuda")
            worker = Worker(
                dataclasses.replace(spec, scratch=Path(directory.name), output_fd=arena.fd, warm=self._steps(spec))
            )
            worker.spawn()
        except (OSError, subprocess.SubprocessError):
            if arena is not None:
                arena.close()
            directory.cleanup()
            return None
        return Spare(directory, arena, worker)

    def refill(self, spec: LaunchSpec) -> None:
        """Spawn spares with `spec`'s settings until `depth` wait (those being spawned by another
        thread count); a spare whose process died is closed first. The spawns run outside the
        lock, one after another, each spare waiting as soon as it is spawned. A spawn that fails
        ends the refill: the next evaluation without a spare spawns its own worker, which reports
        the problem."""
        with self._changed:
            dead = [waiting for waiting in self._spares if not waiting.worker.alive]
            self._spares = deque(waiting for waiting in self._spares if waiting.worker.alive)
            self.discarded += len(dead)
            wanted = self.depth - len(self._spares) - self._spawning
            self._spawning += max(0, wanted)
            generation = self._generation
        for gone in dead:
            gone.close()
        for left in range(wanted, 0, -1):
            spare, late = None, False
            try:
                spare = self._spawn(spec)
            finally:
                with self._changed:
                    if spare is not None:
                        self.spawned += 1
                        late = generation != self._generation
                    if spare is not None and not late:
                        self._spares.append(spare)
                        self._spawning -= 1
                    elif spare is None:  # this reservation and the rest are released
                        self._spawning -= left
                    self._changed.notify_all()
            if spare is None:
                return
            if late:  # `close` ran meanwhile and waits for this spare to be closed
                try:
                    spare.close()
                finally:
                    with self._changed:
                        self._spawning -= left
                        self._changed.notify_all()
                return

    def close(self) -> None:
        """Close every waiting spare, and those being spawned once they are; the standby may be
        refilled afterwards."""
        with self._changed:
            self._generation += 1
            spares, self._spares = list(self._spares), deque()
        for spare in spares:
            spare.close()
        with self._changed:
            self._changed.wait_for(lambda: self._spawning == 0)

    def __enter__(self) -> Standby:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
