"""Time as providers read it: the ``clock`` check every provider's ``health`` makes from a response's ``Date``
header, and the times in a provider's answers.

A credential's expiry is judged by this host's clock and the provider's:
more skew than ``MAX_CLOCK_SKEW`` between them fails the check. An expiry a
provider answers with is read by ``parse_time`` (ISO 8601 with a zone, or
nothing), and a time without a zone is taken as UTC by ``aware``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from broker.vocab.checks import Check

#: More clock skew than this against a provider fails the ``clock`` check (seconds).
MAX_CLOCK_SKEW = 60


def clock_check(date_header: str | None, received: float, provider: str) -> Check | None:
    """The ``clock`` check from a response's ``Date`` header (received at ``received``); None without one."""
    try:
        server = parsedate_to_datetime(date_header).timestamp() + 0.5 if date_header else None
    except (TypeError, ValueError):
        server = None
    if server is None:
        return None
    skew = round(server - received)
    if abs(skew) <= MAX_CLOCK_SKEW:
        return Check("clock", True, f"skew {skew:+d} s against {provider}")
    side = "behind" if skew > 0 else "ahead of"
    return Check(
        "clock",
        False,
        f"this host is {abs(skew)} s {side} {provider} (more than {MAX_CLOCK_SKEW} s)",
        "synchronise this host's clock (chrony, systemd-timesyncd)",
    )


def aware(moment: datetime) -> datetime:
    """``moment`` as UTC when it carries no zone (the store's and the tests' clocks may be naive)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def parse_time(value: object) -> datetime | None:
    """An ISO 8601 time with its zone, as a provider's answer gives an expiry; None for anything else."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
