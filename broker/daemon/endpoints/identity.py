"""The issuer's public documents on the daemon's socket: ``GET /.well-known/openid-configuration``,
``/.well-known/jwks.json`` and ``/.well-known/revoked``, answered as every listener serving the issuer answers them
(``broker.core.identity.wellknown``). Any peer may read them: they are public."""

from __future__ import annotations

from urllib.parse import urlsplit

from broker.core.identity.documents import required
from broker.core.identity.wellknown import answer
from broker.daemon.call import Call
from broker.host.serving.wire import Raw


def published(call: Call) -> None:
    broker = call.broker
    issuer = required(broker.issuer)
    found = answer(issuer, broker.config.providers, broker.store, urlsplit(call.request.target).path, broker.clock())
    assert found is not None  # the route is one of the issuer's paths
    call.send(found.status, Raw(found.body, found.content_type))
