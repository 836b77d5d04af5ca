"""Stopping an evaluation early — the caller cancelled, or the request's deadline passed —
without losing what was already judged."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Literal

from atrex_mcp.errors import AtrexError

if TYPE_CHECKING:
    from atrex_mcp.evaluate.models import EvalResult

StopReason = Literal["deadline", "cancelled"]


class StopSignal(threading.Event):
    """Reads as set once the caller's `cancel` event is set (or this one is) or `deadline_s`
    seconds have passed since it was made. The session polls is_set() while it waits on the
    worker and kills the worker when it turns true; `reason` then says which came first."""

    def __init__(self, cancel: threading.Event | None, deadline_s: float | None):
        super().__init__()
        self.cancel = cancel
        self.deadline_s = deadline_s
        self.until = None if deadline_s is None else time.monotonic() + deadline_s
        self.reason: StopReason | None = None

    def is_set(self) -> bool:
        if self.reason is None:
            if super().is_set() or (self.cancel is not None and self.cancel.is_set()):
                self.reason = "cancelled"
            elif self.until is not None and time.monotonic() >= self.until:
                self.reason = "deadline"
        return self.reason is not None


class EvaluationCancelled(AtrexError):
    """The caller cancelled: raised (as AtrexError runtime/cancelled, what callers that abandon
    cancelled work expect) with the partial result attached, so nothing judged is lost."""

    def __init__(self, result: EvalResult):
        judged = sum(s.judged for s in result.shapes)
        super().__init__(
            "runtime",
            "cancelled",
            f"The evaluation was cancelled after {judged} of {len(result.shapes)} shapes were judged; "
            "its worker was killed.",
        )
        self.result = result
