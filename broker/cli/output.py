"""Human output for the CLI: tables, colours only on a terminal and never with NO_COLOR."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TextIO

from rich.console import Console
from rich.table import Table


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
