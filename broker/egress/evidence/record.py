"""The ``egress.request`` record of one request through a terminated host: what the session did with its access.

One record per request, whatever happened to it: forwarded, refused by
the operations check, by a credential's injector or by the guards, or cut
short. It names the destination (``host``: ``HOST:PORT``), the method, the path (the query string cut
off: it may carry tokens), the decision (``allowed`` or ``refused``), the
rule and the section that decided, the reason, the credential whose secret
was put in (none when none was), what the client got (``status``) and what
the upstream answered (``upstream_status``, none when nothing went
upstream), the body bytes each way, and the SHA-256 of the request head as
it arrived (request line and headers in their order and case; for an
``inject: proxy`` credential it holds the placeholder, never the secret) and
of the request body as it arrived (``body_complete`` says whether the whole
body arrived, or the hash covers its start). ``failure`` says why an allowed
request got no answer from upstream. The operations kind that decided may
add fields of its own (``Decision.details``: an MCP call's method, tool and
the SHA-256 of its arguments). Text from the request is cut to one
printable line.
"""

from __future__ import annotations

import hashlib
from typing import Any

import h11

from broker.egress.operations import Decision
from broker.egress.operations.decision import clipped

MAX_PATH = 1024


def head_bytes(request: h11.Request) -> bytes:
    """The request head as it arrived: the request line, each header with its name as sent, the empty line."""
    lines = [b"%s %s HTTP/%s" % (request.method, request.target, request.http_version)]
    lines.extend(name + b": " + value for name, value in request.headers.raw_items())
    return b"\r\n".join(lines) + b"\r\n\r\n"


class Evidence:
    """The record of one request, filled in as the request goes."""

    def __init__(self, destination: str, request: h11.Request, target: bytes | None = None) -> None:
        """The record of ``request`` as it arrived; ``target``: its origin form, when it arrived in absolute form."""
        self.destination = destination
        self.method = clipped(request.method.decode("latin-1"), 32)
        path = (target or request.target).partition(b"?")[0]
        self.path = clipped(path.decode("latin-1"), MAX_PATH)
        self.head_sha256 = hashlib.sha256(head_bytes(request)).hexdigest()
        self._body = hashlib.sha256()
        self.request_bytes = 0
        self.body_complete = False
        self.answer_bytes = 0
        self.status: int | None = None
        self.upstream_status: int | None = None
        self.allowed: bool | None = None
        self.rule: str | None = None
        self.operations: str | None = None
        self.reason = ""
        self.credential: str | None = None
        self.failure: str | None = None
        self.details: dict[str, Any] = {}

    def body(self, data: bytes) -> None:
        self._body.update(data)
        self.request_bytes += len(data)

    def decided(self, decision: Decision | None) -> None:
        """The operations decision (None: no operations apply to the session)."""
        if decision is None:
            self.allowed, self.operations, self.reason = True, "none", "no operations limit this session"
            return
        self.allowed, self.rule, self.operations, self.reason = (
            decision.allowed,
            decision.rule,
            decision.kind.value,
            decision.reason,
        )
        self.details = dict(decision.details)

    def refused(self, reason: str) -> None:
        """Refused by something other than the operations check (a guard, an injector, the session's end)."""
        if self.allowed is False:
            return
        if self.allowed is True:  # the operations allowed it; what came after refused it
            self.reason = clipped(f"{self.reason}; then refused: {reason}")
        else:
            self.reason = clipped(reason)
        self.allowed = False

    def fields(self) -> dict[str, Any]:
        return {
            "host": self.destination,
            "credential": self.credential,
            "method": self.method,
            "path": self.path,
            "decision": "allowed" if self.allowed else "refused",
            "rule": self.rule,
            "operations": self.operations,
            "reason": self.reason,
            "status": self.status,
            "upstream_status": self.upstream_status,
            "request_bytes": self.request_bytes,
            "answer_bytes": self.answer_bytes,
            "head_sha256": self.head_sha256,
            "body_sha256": self._body.hexdigest(),
            "body_complete": self.body_complete,
            "failure": self.failure,
            **self.details,
        }
