"""``egress.denied`` and ``egress.refused`` records: one per refused destination, and one per kind of refused request
to a credential host, per session, each with how often it happened.

The session's ``Gate`` counts both (``broker.egress.allowlist.gate``: a bounded number of distinct entries; past
the bound, an ``(other destinations)`` entry keeps counting, so nothing refused goes uncounted) and the session's
end writes them. A record names the destination (``HOST:PORT``), for ``egress.refused`` the reason
(``broker.egress.exchange.refusals.Refusal``: ``plain-http``, ``host``, ``target``, ``malformed``, ``framing``,
``override``, ``wrapped-answer``, ``unchecked-answer``, ``credential``, ``action``, ``unknown-key``) and the count:
never a header, a path or a body, so never a secret.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.audit.log import AppendLog
from broker.egress.exchange.refusals import RefusedRequest


def log_denials(
    log: AppendLog, denials: Mapping[str | RefusedRequest, int], *, session: str, task: str, requester: str
) -> int:
    """Append the session's refused destinations, then its refused requests (each sorted, so the log reads the
    same every time); returns how many records were written."""
    destinations = sorted((key, count) for key, count in denials.items() if isinstance(key, str))
    requests = sorted((key, count) for key, count in denials.items() if isinstance(key, RefusedRequest))
    for destination, count in destinations:
        log.append(
            "egress.denied", session=session, task=task, requester=requester, destination=destination, count=count
        )
    for refused, count in requests:
        log.append(
            "egress.refused",
            session=session,
            task=task,
            requester=requester,
            destination=refused.destination,
            reason=str(refused.reason),
            count=count,
        )
    return len(destinations) + len(requests)
