"""``broker issue --gateway`` through the daemon: ``POST /v1/gateway/sessions`` issues a session the daemon's
gateway serves and holds (``broker.daemon.gateway``) until it is revoked or expires.

The body is ``{"manifest": ...}`` (and ``"resume": REQUEST`` once a person approved it); the answer is the session
document, which names the gateway in ``proxy_url`` (its proxy credential is the file ``proxy/credential`` in the
session's directory, never in the answer). A session whose answer cannot be delivered is revoked at once.
"""

from __future__ import annotations

import contextlib

from broker.daemon.call import Call
from broker.vocab.errors import BadInput, BrokerError
from broker.vocab.tracing import annotate


def issue(call: Call) -> None:
    gateway = call.gateway
    if gateway is None:
        raise BadInput("issue --gateway: this daemon runs no gateway; set [gateway] listen in its config")
    document = gateway.open(call.broker, call.peer, call.json_body())
    annotate(session=document.id, task=document.task)
    try:
        call.send(201, document.to_json())
    except OSError:  # the launcher never got it: it must not stay live
        held = gateway.get(document.id)
        if held is not None:
            gateway.end(call.broker, held, "issue not delivered")
        raise
    with contextlib.suppress(BrokerError):
        call.broker.witness()
