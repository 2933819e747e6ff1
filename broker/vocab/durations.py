"""Durations as SPEC.md defines them: ``90s``, ``15m``, ``1h`` or a whole number of seconds.

What a session lives is at most a week (``parse_duration``); the operator's
longer periods (a witness's retention, how long a fleet's revoke waits) also
take days, ``400d``, and may be zero where the key says so
(``parse_long_duration``).
"""

from __future__ import annotations

import re

from broker.vocab.errors import BadInput, UsageError

_DURATION = re.compile(r"([1-9][0-9]{0,8})([smh]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}
#: Nothing the broker hands out lives longer than a week; larger values are typos or attacks.
MAX_DURATION_SECONDS = 7 * 24 * 3600
_LONG_DURATION = re.compile(r"([0-9]{1,6})([smhd])")
_LONG_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: object, field: str, error: type[BadInput] = BadInput) -> int:
    """Seconds for a duration value; raise ``error`` naming ``field`` when invalid."""
    if isinstance(value, bool):
        raise error(f"{field}: expected a duration such as 90s, 15m or 1h, got a boolean")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match is None:
            raise error(f"{field}: {value[:40]!r} is not a duration (a positive integer followed by s, m or h)")
        seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise error(f"{field}: expected a duration such as 90s, 15m or 1h")
    if seconds <= 0:
        raise error(f"{field}: a duration must be positive")
    if seconds > MAX_DURATION_SECONDS:
        shown = f"{seconds}s" if seconds < 10**20 else "the value"  # a 4000-digit number stays out of the message
        raise error(f"{field}: {shown} is longer than the 168h the broker accepts")
    return seconds


def parse_long_duration(value: object, field: str, error: type[BadInput] = BadInput, *, allow_zero: bool) -> int:
    """Seconds for ``400d``, ``12h``, ``0s`` or an integer (days are allowed here, unlike session TTLs)."""
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and (match := _LONG_DURATION.fullmatch(value)):
        seconds = int(match.group(1)) * _LONG_UNITS[match.group(2)]
    else:
        raise error(f"{field}: expected a duration such as 0s, 12h or 400d")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise error(f"{field}: {'must be positive' if not allow_zero else 'must not be negative'}")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest exact spelling: ``3600`` -> ``1h``, ``90`` -> ``90s``."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def wait_seconds(wait: str | None, no_wait: bool) -> float | None:
    """``issue``'s and ``exec``'s ``--wait DURATION`` in seconds, 0 with ``--no-wait``, None (until the request
    expires) without either; both commands lines read them here."""
    if wait is not None and no_wait:
        raise UsageError("--wait and --no-wait exclude each other")
    if no_wait:
        return 0.0
    return float(parse_duration(wait, "--wait", UsageError)) if wait is not None else None
