"""Progress of a long run: operators done, what each running one is doing, time elapsed and an ETA.

On a terminal a rich live board redraws in place (a summary line and one line per running
operator; finished operators scroll above it). Anywhere else (a log file, CI) it prints one
plain line per change, so the record reads top to bottom.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from atrex_mcp.progress import clock

REDRAW_PER_S = 2


class ProgressBoard:
    """Thread-safe: workers call `stage(op, text)` and `finish(op, text)`."""

    def __init__(
        self,
        title: str,
        total: int,
        stream: TextIO | None = None,
        live: bool | None = None,
        estimate_s: float | None = None,
    ):
        self.title, self.total, self.estimate_s = title, total, estimate_s
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.console = Console(file=self.stream, force_terminal=self.live, highlight=False, soft_wrap=not self.live)
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._running: dict[str, tuple[str, float]] = {}  # op -> (stage, since)
        self._done = self._done_here = 0
        self._board: Live | None = None

    def begin(self, already_done: int = 0) -> None:
        self._done = already_done
        self._write(
            f"{self.title}: {self.total} operator(s), {already_done} already done"
            + (f"; estimate {clock(self.estimate_s)}" if self.estimate_s else "")
        )
        if self.live:
            self._board = Live(
                get_renderable=self._render,
                console=self.console,
                refresh_per_second=REDRAW_PER_S,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._board.start()

    def stage(self, op: str, text: str) -> None:
        with self._lock:
            previous = self._running.get(op)
            if previous and previous[0] == text:
                return
            self._running[op] = (text, previous[1] if previous else time.monotonic())
            if not self.live:
                self._write(f"[{clock(time.monotonic() - self._start)}] {op}: {text}")

    def note(self, text: str) -> None:
        """A line that stays (above the live board on a terminal)."""
        with self._lock:
            self._write(text)

    def finish(self, op: str, text: str, counted: bool = True) -> None:
        with self._lock:
            now = time.monotonic()
            since = self._running.pop(op, ("", now))[1]
            self._done += counted
            self._done_here += counted
            self._write(
                f"[{clock(now - self._start)}] {op}: {text} ({clock(now - since)}) — "
                f"{self._done}/{self.total} done{self._eta()}"
            )

    def close(self, summary: str = "") -> None:
        if self._board is not None:
            self._board.stop()
        with self._lock:
            if summary:
                self._write(summary)

    def _eta(self) -> str:
        left = self.total - self._done
        if not left:
            return ""
        if self._done_here:
            return f", ETA {clock((time.monotonic() - self._start) / self._done_here * left)}"
        return f", ETA {clock(self.estimate_s - (time.monotonic() - self._start))}" if self.estimate_s else ""

    def _write(self, text: str) -> None:
        self.console.print(Text(text), crop=self.live)

    def _render(self) -> Group:
        now = time.monotonic()
        with self._lock:
            head = Text(
                f"{self.title}: {self._done}/{self.total} done, {len(self._running)} running, "
                f"{clock(now - self._start)} elapsed{self._eta()}"
            )
            table = Table.grid(padding=(0, 2))
            for op, (text, since) in sorted(self._running.items()):
                table.add_row(f"  {op}", clock(now - since), Text(text, overflow="ellipsis", no_wrap=True))
        return Group(head, table)
