"""The daemon's dispatch, made from the command table: each route a command declares (``broker.commands.table``),
and the daemon's own (health, metrics, sweep), answered by the function the route names.

Built when this module is imported: a route whose function does not exist is
an error then, naming its command, never a 404 at the first request. Answers
are the documents the CLI prints; a ``BrokerError`` becomes ``{"error",
"exit_code"}`` with its exit code and an HTTP status that says the same
thing. Anything else is a bug: one line, exit 1, never a traceback.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from broker.commands.declaring import Route, TableError, resolve
from broker.commands.table import COMMANDS
from broker.core.broker import Broker
from broker.core.revoking import RevokeReport, revoke_session
from broker.daemon.call import Call, finish
from broker.daemon.holds import Holds, Link
from broker.daemon.peer import Peer
from broker.host.serving.routing import Router
from broker.host.serving.wire import HTTP_STATUS, Request, Send, error_body
from broker.vocab.errors import REPORT_URL, AwaitingApproval, BrokerError, UnknownSession
from broker.vocab.logs import event
from broker.vocab.tracing import OFF, span

if TYPE_CHECKING:
    from broker.daemon.gateway import GatewayHolds

LOG = logging.getLogger("broker.daemon")
SERVICE = "broker.daemon.endpoints.service"
#: The daemon's own routes, which no command owns: its health, its metrics, a sweep.
OWN = (
    Route("GET", "/v1/health", f"{SERVICE}:health"),
    Route("GET", "/metrics", f"{SERVICE}:metrics"),
    Route("POST", "/v1/sweep", f"{SERVICE}:sweep"),
)
Endpoint = Callable[[Call], None]


def declared() -> Iterator[tuple[str, Route]]:
    """Every route the daemon answers and who declares it (``broker NAME``, or ``broker serve`` for its own)."""
    for command in COMMANDS:
        for route in command.routes:
            yield f"broker {command.name}", route
    for route in OWN:
        yield "broker serve", route


def _router() -> Router[Endpoint]:
    answers: dict[tuple[str, str], Endpoint] = {}
    for owner, route in declared():
        try:
            found = resolve(route.answer)
        except (ImportError, AttributeError) as exc:
            missing = f"{owner}: {route.method} {route.path} names {route.answer}, which is not there"
            raise TableError(f"{missing}: {exc}") from None
        known = answers.setdefault((route.method, route.path), found)  # type: ignore[arg-type]
        if known is not found:
            raise TableError(f"{owner}: {route.method} {route.path} is answered by two functions")
    return Router((method, path, answer) for (method, path), answer in answers.items())


ROUTER = _router()


class Routes:
    def __init__(self, base: Broker, stopping: threading.Event, gateway: GatewayHolds | None = None) -> None:
        self.base = base
        self.stopping = stopping
        self.holds = Holds()
        self.gateway = gateway

    def release(self, peer: Peer, link: Link) -> None:
        """A connection ended: the exec sessions it held are revoked."""
        if link.sessions:
            broker = dataclasses.replace(self.base, requester=peer.requester())
            try:
                self.holds.release(broker, link)
            finally:
                finish(broker, None)

    def handle(self, request: Request, peer: Peer, send: Send, link: Link) -> None:
        """Answer ``request``; whatever goes wrong, the peer gets one JSON line, never a traceback.

        Each request is one trace (``<METHOD> <route>``) when tracing is on; a scrape of ``/metrics`` is not
        traced (one every few seconds would drown the rest)."""
        broker = dataclasses.replace(self.base, requester=peer.requester())
        url = urlsplit(request.target)
        found = ROUTER.find(request.method, url.path)
        template = found.template if found is not None else None
        name = f"{request.method} {template}" if template is not None else "HTTP unknown route"
        answered: list[int] = []

        def sending(status: int, document: Any, exit_code: int = 0, incomplete: str = "") -> None:
            answered.append(status)
            send(status, document, exit_code, incomplete)

        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        call = Call(
            broker, peer, request, sending, link, found.params if found else {}, query, self.holds, self.stopping,
            self.revoke_one, self.gateway,
        )  # fmt: skip
        requester = str(peer.requester())
        method = request.method if request.method in ROUTER.methods else "OTHER"
        traced = span(name, method=method, route=template, requester=requester)
        with traced if template != "/metrics" else OFF as root:
            try:
                if found is None:
                    call.answer(404, error_body(f"no endpoint {request.method[:10]} {url.path[:80]}", 2))
                else:
                    found.value(call)
            except AwaitingApproval as exc:  # nothing minted yet: the request, for the client to wait on or resume
                body = {**error_body(exc.message, exc.exit_code), "request": exc.request, "digest": exc.digest}
                call.answer(202, body, exc.exit_code)
                root.set(exit_code=exc.exit_code)
            except BrokerError as exc:
                status = 404 if isinstance(exc, UnknownSession) else HTTP_STATUS.get(exc.exit_code, 500)
                call.answer(status, error_body(exc.message, exc.exit_code))
                root.set(exit_code=exc.exit_code)
            except Exception as exc:  # a bug: logged here, one line to the peer
                LOG.exception("daemon request failed")
                message = f"internal error ({type(exc).__name__}) in the daemon; please report it at {REPORT_URL}"
                call.answer(500, error_body(message, 1))
                root.set(exit_code=1)
            finally:
                if answered:
                    root.set(status=answered[-1])
                event(LOG, "request", method=request.method, path=url.path, uid=peer.uid)

    def revoke_one(self, broker: Broker, session: str) -> RevokeReport:
        """An exec session's proxy is closed first (it refuses at once), a gateway's session is cut at once, then
        every session is revoked as usual."""
        held = self.holds.get(session)
        if held is not None:
            return self.holds.end(broker, held, "revoke")
        gatewayed = self.gateway.get(session) if self.gateway is not None else None
        if gatewayed is not None and self.gateway is not None:
            return self.gateway.end(broker, gatewayed, "revoke")
        return revoke_session(broker, session)
