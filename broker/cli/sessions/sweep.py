"""``broker sweep``: expired sessions revoked, pending revocations retried, a crash's leftovers finished."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import Progress, TaskID

from broker.cli.context import Invocation, echo, print_json
from broker.cli.opening import open_broker
from broker.cli.output import console
from broker.core.sweeping import sweep as run_sweep
from broker.vocab.errors import RevokeIncomplete
from broker.vocab.fields import shown


def sweep(run: Invocation, as_json: bool) -> None:
    config = run.load_config()
    with open_broker(config, teardown=True) as broker, progress_bar("sweeping sessions") as progress:
        report = run_sweep(broker, progress)
    if as_json:
        print_json(report.to_json())
    else:
        echo(
            f"expired {len(report.expired)}, recovered {len(report.recovered)}, retried {len(report.retried)},"
            f" orphans removed {len(report.orphans_removed)}, busy {len(report.busy)}, pending {len(report.pending)},"
            f" foreign {len(report.foreign)}, malformed {len(report.malformed)}"
        )
        for item in report.pending:
            echo(f"  pending: {item['session']} {item['credential']}")
        for name in report.foreign:
            echo(f"  foreign, left alone: {shown(name, 80)}")
        for row in report.malformed:
            echo(f"  malformed {row['table']} row, skipped: {shown(row['row'], 80)}: {'; '.join(row['problems'])}")
    if not report.complete:
        raise RevokeIncomplete(f"{len(report.pending)} credential(s) still pending; the next sweep retries them")


@contextmanager
def progress_bar(label: str, *, minimum: int = 20) -> Iterator[Callable[[int, int], None]]:
    """A progress callback drawing a bar on stderr, only on a terminal and only for ``minimum`` items or more."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    with Progress(console=console(sys.stderr), transient=True) as bar:
        task: list[TaskID] = []

        def update(done: int, total: int) -> None:
            if total < minimum:
                return
            if not task:
                task.append(bar.add_task(label, total=total))
            bar.update(task[0], completed=done)

        yield update
