"""Progress of a long run: operators done, what each running one is doing, time elapsed.

On a terminal the board redraws in place (a summary line and one line per running operator;
finished operators scroll above it). Anywhere else (a log file, CI) it prints one plain line
per change, so the record reads top to bottom.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import TextIO

REDRAW_S = 0.5
_UP_AND_CLEAR = "\x1b[{n}F\x1b[J"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


class ProgressBoard:
    """Thread-safe: workers call `stage(op, text)` and `finish(op, text)`."""

    def __init__(self, title: str, total: int, stream: TextIO | None = None, live: bool | None = None):
        self.title = title
        self.total = total
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._running: dict[str, tuple[str, float]] = {}  # op -> (stage, since)
        self._done = 0
        self._drawn = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ public
    def begin(self, already_done: int = 0) -> None:
        self._done = already_done
        self._emit_line(f"{self.title}: {self.total} operator(s), {already_done} already done")
        if self.live:
            self._thread = threading.Thread(target=self._redraw_loop, name="progress", daemon=True)
            self._thread.start()

    def stage(self, op: str, text: str) -> None:
        with self._lock:
            previous = self._running.get(op)
            if previous and previous[0] == text:
                return
            self._running[op] = (text, previous[1] if previous else time.monotonic())
            if not self.live:
                self._write(f"[{_clock(time.monotonic() - self._start)}] {op}: {text}\n")

    def note(self, text: str) -> None:
        """A line that stays (above the live block on a terminal)."""
        with self._lock:
            self._clear()
            self._write(text + "\n")
            if self.live:
                self._draw()

    def finish(self, op: str, text: str, counted: bool = True) -> None:
        with self._lock:
            since = self._running.pop(op, ("", time.monotonic()))[1]
            self._done += counted
            line = f"[{_clock(time.monotonic() - self._start)}] {op}: {text} ({_clock(time.monotonic() - since)}) — {self._done}/{self.total} done"
            if self.live:
                self._clear()
                self._write(line + "\n")
                self._draw()
            else:
                self._write(line + "\n")

    def close(self, summary: str = "") -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self.live:
                self._clear()
            if summary:
                self._write(summary + "\n")

    # ------------------------------------------------------------ drawing
    def _emit_line(self, text: str) -> None:
        with self._lock:
            self._write(text + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _clear(self) -> None:
        if self._drawn:
            self._write(_UP_AND_CLEAR.format(n=self._drawn))
            self._drawn = 0

    def _draw(self) -> None:
        now = time.monotonic()
        lines = [f"{self.title}: {self._done}/{self.total} done, {len(self._running)} running, {_clock(now - self._start)} elapsed"]
        width = max((len(op) for op in self._running), default=0)
        for op, (text, since) in sorted(self._running.items()):
            lines.append(f"  {op:<{width}}  {_clock(now - since):>5}  {text}")
        columns = max(20, shutil.get_terminal_size().columns - 1)  # a wrapped line would break the redraw
        self._write("\n".join(line[:columns] for line in lines) + "\n")
        self._drawn = len(lines)

    def _redraw_loop(self) -> None:
        while not self._stop.wait(REDRAW_S):
            with self._lock:
                self._clear()
                self._draw()
