"""Structured errors: every failure a caller sees names its stage, category, message and hint."""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, Field

Stage = Literal["input", "compile", "runtime", "correctness", "performance", "policy", "internal"]


class ErrorInfo(BaseModel):
    """What went wrong, where, and what to do about it."""

    stage: Stage = Field(
        description="Pipeline stage that failed: input (bad argument), compile, runtime, correctness, performance, "
        "policy (refused by the mode), internal."
    )
    category: str = Field(
        description="Stable machine-readable failure category, e.g. unknown_problem, syntax_error, numeric_mismatch."
    )
    message: str = Field(description="What went wrong, in one or two sentences.")
    hint: str = Field(default="", description="What the caller can do about it.")


class AtrexError(Exception):
    """An error meant for the caller: carries an ErrorInfo and never hidden data."""

    def __init__(self, stage: Stage, category: str, message: str, hint: str = "", *, shell_message: str = ""):
        super().__init__(message)
        self.info = ErrorInfo(stage=stage, category=category, message=message, hint=hint)
        # For a person at this machine's shell only (the CLI): may quote the caller's own input, which
        # a tool answer never does (an answer that repeats a caller's text is one step from an oracle).
        self.shell_message = shell_message

    def __str__(self) -> str:
        return self._render(self.info.message)

    def shell_text(self) -> str:
        """The one line the command line prints."""
        return self._render(self.shell_message or self.info.message)

    def _render(self, message: str) -> str:
        text = f"[{self.info.stage}/{self.info.category}] {message}"
        return f"{text} Hint: {self.info.hint}" if self.info.hint else text


def did_you_mean(value: str, choices: list[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_choice(kind: str, value: str, choices: list[str]) -> AtrexError:
    """An unknown operator, shape, profile… answered with the valid choices. A tool answer does not
    echo the caller's value (one step from an oracle) and is the same for every unknown value; the
    command line's line names the value and the closest choice."""
    shown = ", ".join(choices[:60]) + (" …" if len(choices) > 60 else "")
    return AtrexError(
        "input",
        f"unknown_{kind}",
        f"Unknown {kind.replace('_', ' ')}.",
        f"Valid choices: {shown}",
        shell_message=f"Unknown {kind.replace('_', ' ')} {value!r}{did_you_mean(value, choices)}.",
    )
