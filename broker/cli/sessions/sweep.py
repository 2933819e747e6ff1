"""``broker sweep``: expired sessions revoked, pending revocations retried, a crash's leftovers finished."""

from __future__ import annotations

from broker.cli.context import Invocation, echo, print_json
from broker.cli.opening import open_broker
from broker.cli.output import progress_bar
from broker.core.sweeping import sweep as run_sweep
from broker.vocab.errors import RevokeIncomplete
from broker.vocab.fields import shown


def sweep(run: Invocation, as_json: bool) -> None:
    config = run.load_config()
    with open_broker(config) as broker, progress_bar("sweeping sessions") as progress:
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
