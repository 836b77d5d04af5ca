"""What every subcommand shares: a parser whose errors are one line (raised, printed by cli.main),
options that may stand before or after the action, the problem-set flag, checked numbers and
candidate files read as UTF-8 text."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from atrex_mcp.errors import AtrexError, did_you_mean

PROBLEMS_HELP = (
    "problem root (repeatable; a later root's problem of the same name wins; "
    "default: ATREX_PROBLEMS or the shipped set)"
)


class UsageError(Exception):
    """A command line argparse refused; cli.main prints it as one `error:` line."""


def one_line(text: str) -> str:
    return " ".join(text.split())


class Parser(argparse.ArgumentParser):
    """argparse with errors raised instead of printed, and a suggestion for a mistyped choice."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            hint = did_you_mean(str(value), choices)
            raise argparse.ArgumentError(action, f"invalid choice {value!r}{hint}; choose from {', '.join(choices)}")


class DeprecatedAlias(argparse.Action):
    """An old flag name kept working: stores into the new flag's dest and says which name to use."""

    def __init__(self, option_strings, dest, new_flag: str = "", append: bool = False, **kwargs):
        self.new_flag, self.append = new_flag, append
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"warning: {option_string} is deprecated; use {self.new_flag}", file=sys.stderr)
        if self.append:
            current = getattr(namespace, self.dest, None)
            values = (list(current) if isinstance(current, list) else []) + [values]
        setattr(namespace, self.dest, values)


def add_problems_option(
    parser: argparse.ArgumentParser, *, after_action: bool = False, help: str = PROBLEMS_HELP
) -> None:
    """`--problems DIR` (repeatable), with `--root` as a hidden deprecated alias. On an action's own
    parser (after_action) it leaves the value given before the action alone when not repeated."""
    default = argparse.SUPPRESS if after_action else None
    parser.add_argument("--problems", action="append", type=Path, metavar="DIR", default=default, help=help)
    parser.add_argument(
        "--root",
        dest="problems",
        type=Path,
        action=DeprecatedAlias,
        new_flag="--problems",
        append=True,
        default=default,
        help=argparse.SUPPRESS,
    )


def shared_options(
    group: argparse.ArgumentParser, actions: list[argparse.ArgumentParser], add: Callable[..., None]
) -> None:
    """Options of a command group accepted before the action (`runs --state-dir D list`) and after
    it (`runs list --state-dir D`): `add(parser, after_action=...)` declares them once."""
    add(group, after_action=False)
    for action in actions:
        add(action, after_action=True)


def count(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [minimum, maximum], refused in one line otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            upper = f" and at most {maximum}" if maximum is not None else ""
            raise argparse.ArgumentTypeError(f"must be at least {minimum}{upper}, got {value}")
        return value

    return parse


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def read_source(path: Path, what: str = "candidate") -> str:
    """A Python source file as text; a folder, a missing file, binary or non-UTF-8 bytes are input errors."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AtrexError(
            "input",
            f"unreadable_{what}",
            f"Cannot read {path}: {exc.strerror or exc}.",
            "Pass the path of a Python file.",
        ) from None
    if b"\0" in data:
        raise AtrexError(
            "input",
            f"binary_{what}",
            f"{path} is a binary file, not Python source.",
            "Pass the .py file that defines class Model.",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AtrexError(
            "input",
            f"{what}_not_utf8",
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}).",
            "Save the file as UTF-8.",
        ) from None


def add_state_dir_option(parser: argparse.ArgumentParser, after_action: bool = False) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=argparse.SUPPRESS if after_action else None,
        help="state directory (default: ATREX_STATE_DIR or ~/.local/state/atrex-mcp)",
    )
