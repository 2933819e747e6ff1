"""Human output for the CLI: tables, time left, colours only on a terminal and never with NO_COLOR."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from rich.progress import TaskID


def use_colour(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def console(stream: TextIO | None = None) -> Console:
    stream = stream or sys.stdout
    if use_colour(stream):
        return Console(file=stream, soft_wrap=True)
    return Console(file=stream, width=1000, no_color=True, color_system=None, highlight=False)


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    table = Table(*columns, box=None, header_style="bold", pad_edge=False, highlight=False)
    for row in rows:
        table.add_row(*row)
    console().print(table)


def time_left(moment: datetime, now: datetime) -> str:
    """``in 14m``, ``in 1h05m``, ``3m ago`` (expired)."""
    seconds = int((moment - now).total_seconds())
    span = abs(seconds)
    if span < 60:
        text = f"{span}s"
    elif span < 3600:
        text = f"{span // 60}m"
    else:
        text = f"{span // 3600}h{(span % 3600) // 60:02d}m"
    return f"in {text}" if seconds >= 0 else f"{text} ago"


@contextmanager
def progress_bar(label: str, *, minimum: int = 20) -> Iterator[Callable[[int, int], None]]:
    """A progress callback drawing a bar on stderr, only on a terminal and only for ``minimum`` items or more."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.progress import Progress

    with Progress(console=console(sys.stderr), transient=True) as bar:
        task: list[TaskID] = []

        def update(done: int, total: int) -> None:
            if total < minimum:
                return
            if not task:
                task.append(bar.add_task(label, total=total))
            bar.update(task[0], completed=done)

        yield update
