"""A delegating session's ``broker.sock``: the one session it answers for, served to its sandbox alone.

``broker exec`` (direct, or the daemon holding an exec session) serves it in
threads of its own while the command runs. It speaks the daemon's HTTP/1.1
and JSON (``broker.host.serving.wire``), so the thin client in the sandbox
(``BROKER_SOCKET`` points at it) and ``curl --unix-socket`` both work, but it
answers only for its session:

* ``POST /v1/sessions``: a child session (``broker.core.delegation.delegating``), 201;
* ``POST /v1/policy/check``: whether a child manifest is covered, minting nothing;
* ``GET /v1/sessions``: its children; ``DELETE /v1/sessions/ID``: revoke one of them;
* ``GET /v1/health``: which session this is.

A child is asked for only while the policy, as its files say now, still
allows the session itself (``broker.core.running.standing``: else exit 3,
and the withdrawal is logged once); the child's own decision reads the
policy as it is then too (``Broker.policy``).

A request for a child, and a policy check that finds a wider manifest, is
counted in the session's ``ChildBudget`` (``delegate_rate`` a minute,
``delegate_total`` in all, shared with its children's sockets); past it the
answer is 429 with a one-line reason (``broker.core.delegation.records``
logs it, once a minute). Nothing else of the broker is reachable through it
(every other request is 404), and only its owner connects: the socket is
0600, owned by the sandbox user (or the launcher whose user namespace maps
it), and a peer of any other uid (``SO_PEERCRED``) is closed at once. A
connection that sends no request head in time is closed (as the daemon's),
and at most ``MAX_CONNECTIONS`` are served at once. A child that may
delegate further gets a socket of its own, served here too and closed with
this one; the last to close, the session's own, logs how many requests the
tree's sockets refused. Its connections are accepted by the broker's one
accept loop (``broker.host.serving.listening``) with these limits, and its
requests routed by a small route table (``ROUTES``, ``broker.host.serving.routing``).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from broker.core.broker import Broker
from broker.core.delegation.budget import ChildBudget
from broker.core.delegation.delegating import check_child, child_manifest, delegating, describe_parent, parent_session
from broker.core.delegation.records import admit, log_refused
from broker.core.revoking import RevokeReport, revoke_session
from broker.core.running.standing import Standing
from broker.core.status import session_status
from broker.host.peercred import peer_credentials
from broker.host.serving.listening import Acceptor, Limits, Refusals
from broker.host.serving.routing import Router
from broker.host.serving.wire import HTTP_STATUS, Request, Send, busy, error_body, serve_connection
from broker.vocab.errors import (
    REPORT_URL,
    BrokerError,
    DaemonUnreachable,
    PolicyDenied,
    RateLimited,
    RevokeIncomplete,
    UnknownSession,
)
from broker.vocab.logs import event
from broker.vocab.session_ids import check_session_id

LOG = logging.getLogger("broker.delegation")
MAX_CONNECTIONS = 8


class SessionSocket:
    """Serves one session's ``broker.sock`` (``listener``) to the uid ``owner`` until ``close``; what it may mint is
    ``budget`` (its own, or its parent's for a child's socket)."""

    def __init__(
        self,
        broker: Broker,
        session_id: str,
        listener: socket.socket,
        owner: int,
        budget: ChildBudget,
        standing: Standing | None = None,
    ) -> None:
        self.broker = broker
        self.session_id = session_id
        self.standing = standing  # the exec's session as the policy decides it now (None: a child's socket)
        self.listener = listener
        self.owner = owner
        self.budget = budget
        self.stopping = threading.Event()
        self._mutex = threading.Lock()
        self._children: dict[str, SessionSocket] = {}
        self.acceptor: Acceptor[int] = Acceptor(  # the daemon's accept loop: its owner alone, 8 at once
            listener,
            identify=lambda connection: peer_credentials(connection).uid,
            key=lambda uid: uid,
            admit=self._admit,
            serve=self._serve,
            refuse=lambda connection, why: busy(connection, why, DaemonUnreachable.exit_code),
            limits=Limits(total=MAX_CONNECTIONS),
            stopping=self.stopping,
            refusals=Refusals(full=f"session {session_id}'s socket is busy; try again"),
            name="session-conn",
        )
        self._accepting: threading.Thread | None = None

    def start(self) -> SessionSocket:
        self._accepting = self.acceptor.start("session-socket")
        return self

    def close(self) -> None:
        """No more children: stop accepting, finish the requests in flight, close the children's sockets too."""
        self.acceptor.stop()
        if self._accepting is not None:
            self._accepting.join()  # the loop's end waits for the requests in flight
        with self._mutex:
            children = list(self._children.values())
        for child in children:
            child.close()
        if self.budget.session == self.session_id:  # the budget's own socket: the tree's refusals, counted
            try:
                log_refused(self.broker, self.budget)
            except BrokerError as exc:  # the session's revocation comes next, whatever became of this record
                event(LOG, "refusals not logged", session=self.session_id, error=exc.message)

    def __enter__(self) -> SessionSocket:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _admit(self, connection: socket.socket, uid: int) -> bool:
        """Its owner's connection; any other is closed unanswered (and logged)."""
        if uid != self.owner:
            event(LOG, "refused a peer of another uid", session=self.session_id, uid=uid)
            return False
        return True

    def _serve(self, connection: socket.socket, uid: int) -> None:
        try:
            serve_connection(connection, self._handle, self.stopping, self.acceptor.limits.head_deadline)
        except Exception:  # a bug in one connection never stops the socket
            LOG.exception("session socket connection failed")

    def _handle(self, request: Request, send: Send) -> None:
        try:
            self._dispatch(request, send)
        except BrokerError as exc:
            status = 404 if isinstance(exc, UnknownSession) else HTTP_STATUS.get(exc.exit_code, 500)
            status = 429 if isinstance(exc, RateLimited) else status
            _answer(send, status, error_body(exc.message, exc.exit_code))
        except Exception as exc:
            LOG.exception("session socket request failed")
            message = f"internal error ({type(exc).__name__}) in the broker; please report it at {REPORT_URL}"
            _answer(send, 500, error_body(message, 1))
        finally:
            event(LOG, "request", session=self.session_id, method=request.method, path=urlsplit(request.target).path)

    def _dispatch(self, request: Request, send: Send) -> None:
        path = urlsplit(request.target).path
        found = ROUTES.find(request.method, path)
        if found is None:
            name = f"{request.method[:10]} {path[:80]}"
            _answer(send, 404, error_body(f"no endpoint {name}: this socket answers only for {self.session_id}", 2))
            return
        found.value(self, request, found.params, send)

    def _health(self, request: Request, params: dict[str, str], send: Send) -> None:
        record = self.broker.store.get_session(self.session_id)
        if record is None:
            raise UnknownSession(f"unknown session {self.session_id}")
        send(200, {"status": "ok", **describe_parent(record)})

    def _ask_child(self, request: Request, params: dict[str, str], send: Send) -> None:
        self._still_allowed()
        self._child(request.body, send)

    def _ask_check(self, request: Request, params: dict[str, str], send: Send) -> None:
        self._still_allowed()
        self._check(request.body, send)

    def _list_children(self, request: Request, params: dict[str, str], send: Send) -> None:
        send(200, [s.to_json() for s in self._children_status()])

    def _revoke_child(self, request: Request, params: dict[str, str], send: Send) -> None:
        report = self._revoke(params["id"])
        pending = "" if report.complete else report.session
        send(200, report.to_json(), RevokeIncomplete.exit_code if pending else 0, pending)

    def _check(self, body: bytes, send: Send) -> None:
        """The coverage decision; counted in the budget only when it finds the manifest wider (or refuses)."""
        broker = self.broker
        ticket = admit(broker, self.session_id, self.budget)
        try:
            parent = parent_session(broker, self.session_id)
            decision = check_child(broker, parent, child_manifest(broker, parent, body), self.budget)
        except PolicyDenied:
            raise
        except BaseException:
            self.budget.give_back(ticket)
            raise
        self.budget.give_back(ticket)  # covered: nothing minted, nothing logged
        send(200, decision.to_json())

    def _still_allowed(self) -> None:
        """A session the policy no longer allows has no children (exit 3; its withdrawal logged once)."""
        if self.standing is not None:
            self.standing.require("child denied")

    def _child(self, body: bytes, send: Send) -> None:
        broker = self.broker
        admit(broker, self.session_id, self.budget)  # counted whatever comes of it
        owner = self._socket_owner()
        with delegating(broker, self.session_id, body, owner, self.budget) as (session, socket_request):
            if socket_request.listener is not None:  # it may delegate further: its own socket, served here
                child = SessionSocket(broker, session.id, socket_request.listener, self.owner, self.budget)
                with self._mutex:
                    self._children[session.id] = child
                child.start()
            send(201, session.to_json())  # while it can still be rolled back: a peer that is gone gets nothing
        broker.checkpoint()

    def _socket_owner(self) -> tuple[int, int]:
        record = self.broker.store.get_session(self.session_id)
        assert record is not None
        return (self.owner, record.gid)

    def _children_status(self) -> list[Any]:
        return session_status(
            self.broker.store, include_ended=False, owned=lambda record: record.parent == self.session_id
        )

    def _revoke(self, child_id: str) -> RevokeReport:
        broker = self.broker
        record = broker.store.get_session(check_session_id(child_id))
        if record is None or record.parent != self.session_id:
            raise UnknownSession(f"session {child_id[:64]} is not a child of {self.session_id}")
        with self._mutex:
            socket_of_child = self._children.pop(record.id, None)
        if socket_of_child is not None:
            socket_of_child.close()
        report = revoke_session(broker, record.id)
        broker.checkpoint()
        return report


#: What a session's socket answers, five routes, with the daemon's routing pieces (``broker.host.serving.routing``).
ROUTES: Router[Callable[[SessionSocket, Request, dict[str, str], Send], None]] = Router(
    (
        ("GET", "/v1/health", SessionSocket._health),
        ("POST", "/v1/sessions", SessionSocket._ask_child),
        ("POST", "/v1/policy/check", SessionSocket._ask_check),
        ("GET", "/v1/sessions", SessionSocket._list_children),
        ("DELETE", "/v1/sessions/{id}", SessionSocket._revoke_child),
    )
)


def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        send(status, body)
