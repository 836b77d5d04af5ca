"""Per-shape progress of one evaluation on stderr: the shape being judged, time elapsed and an
ETA (from the shapes done so far, before that from the estimate). A rich progress bar on a
terminal, one plain line per step anywhere else."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


def clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:d}:{rest % 60:02d}"


class ShapeProgress:
    """The evaluator's progress callback (message, fraction) turned into lines or a bar; use as a
    context manager so the bar is removed when the evaluation ends."""

    def __init__(self, total: int, estimate_s: float, stream: TextIO | None = None, live: bool | None = None):
        self.total, self.estimate_s = total, estimate_s
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.start = time.monotonic()
        self.first_shape_at: float | None = None
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> ShapeProgress:
        if self.live:
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA {task.fields[eta]}"),
                console=Console(file=self.stream),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("starting", total=self.total, eta=clock(self.estimate_s))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def eta(self, done: int) -> float:
        now = time.monotonic()
        if done and self.first_shape_at is not None:
            return (now - self.first_shape_at) / done * (self.total - done)
        return self.estimate_s - (now - self.start)

    def __call__(self, message: str, fraction: float) -> None:
        done = min(self.total, int(fraction * self.total + 1e-9))
        if message.startswith("shape ") and self.first_shape_at is None:
            self.first_shape_at = time.monotonic()
        step = f"[{min(done + 1, self.total)}/{self.total}] {message}" if message.startswith("shape ") else message
        elapsed = clock(time.monotonic() - self.start)
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=done, description=message, eta=clock(self.eta(done)))
        else:
            left = "" if fraction >= 1 else f", ETA {clock(self.eta(done))}"
            print(f"{step}  (elapsed {elapsed}{left})", file=self.stream, flush=True)
