"""What the proxy answers itself instead of forwarding, and the kinds of refusal a session's records count.

``Refused`` is raised wherever a request is refused (the listener, the allow-list at connect time, the guards and
the framing of a terminated request) and answered with its status and one line of text. A refusal of a request
to a terminated host names its ``Refusal`` kind (``why``), which the proxy counts per destination
(``RefusedRequest``) for the session's ``egress.refused`` records (``broker.egress.proxy.denials``); a destination
that is not allowed is counted apart, as a denial (``egress.denied``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: What every request gets once the session is revoked (the listener's answer, and the terminated path's).
REVOKED = "this session has been revoked"


class Refused(Exception):
    """A request the proxy answers itself, with ``status`` and a one-line reason.

    ``why`` names a refusal of a request to a credential host (an ``egress.refused`` record counts it); a
    destination that is not allowed is counted apart, as a denial.
    """

    def __init__(self, status: int, reason: str, why: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.why = why


class Refusal(enum.StrEnum):
    """Why a request to a credential host was refused (the ``reason`` of an ``egress.refused`` record)."""

    PLAIN_HTTP = "plain-http"  # a plain-HTTP request to a credential host: only https carries the secret
    HOST = "host"  # the request names another host than the tunnel's
    TARGET = "target"  # not an origin-form target
    MALFORMED = "malformed"  # not HTTP/1.1 that h11 accepts
    FRAMING = "framing"  # two framings of the body (Transfer-Encoding and Content-Length): ``terminate.framing``
    OVERRIDE = "override"  # a header naming another method or path than the request line's
    WRAPPED = "wrapped-answer"  # an answer holding what its provider's guard refuses (Vault: a wrapping token)
    UNCHECKED = "unchecked-answer"  # a guarded JSON answer too long to be checked
    CREDENTIAL = "credential"  # a credential's injector refused it (an AWS signature that does not verify)
    ACTION = "action"  # an action its credential's injector does not re-sign (AWS: AssumeRole, CreateSession)
    UNKNOWN_KEY = "unknown-key"  # an answer holding credentials the session does not own (an AWS key id not its own)


@dataclass(frozen=True, order=True)
class RefusedRequest:
    """One kind of refused request to a credential host: where it went and why (what the proxy counts)."""

    destination: str
    reason: Refusal
