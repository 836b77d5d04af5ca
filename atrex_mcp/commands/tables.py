"""Tables on the terminal through rich: a header row, columns sized to their content, no
wrapping when the output goes to a file or a pipe."""

from __future__ import annotations

import sys

from rich.console import Console, JustifyMethod
from rich.table import Table

PIPE_WIDTH = 10_000  # piped output is never wrapped or cut


def plain_table(headers: list[str], justify: dict[str, JustifyMethod] | None = None) -> Table:
    """A borderless table with a bold header, as `ls -l`-style listings look."""
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for name in headers:
        table.add_column(name, justify=(justify or {}).get(name, "left"), no_wrap=True)
    return table


def console() -> Console:
    """stdout as rich sees it: colours and the terminal's width on a TTY, plain and unbounded elsewhere."""
    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, width=None if tty else PIPE_WIDTH, soft_wrap=not tty, highlight=False)


def print_table(table: Table) -> None:
    """On a TTY as rich draws it; elsewhere without the padding after the last column."""
    out = console()
    if out.is_terminal:
        out.print(table)
        return
    with out.capture() as captured:
        out.print(table)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
