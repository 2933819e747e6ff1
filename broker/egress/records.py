"""``egress.denied`` records: one per refused destination per session, with how often it was refused."""

from __future__ import annotations

from broker.audit.log import AppendLog


def log_denials(log: AppendLog, denials: dict[str, int], *, session: str, task: str, requester: str) -> int:
    """Append the session's refused destinations (sorted, so the log reads the same every time)."""
    for destination, count in sorted(denials.items()):
        log.append(
            "egress.denied", session=session, task=task, requester=requester, destination=destination, count=count
        )
    return len(denials)
