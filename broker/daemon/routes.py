"""One endpoint per command, each making the same core call as the direct CLI, for the peer the kernel names.

Answers are the documents the CLI prints; a ``BrokerError`` becomes
``{"error", "exit_code"}`` with its exit code and an HTTP status that says the
same thing. Anything else is a bug: one line, exit 1, never a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

from broker import __version__
from broker.core.broker import Broker
from broker.core.revoking import RevokeReport
from broker.daemon.access import operators_only, owned_session, owner_filter
from broker.daemon.holds import Holds, Link
from broker.daemon.peer import Peer
from broker.host.wire import HTTP_STATUS, Raw, Request, Send, error_body
from broker.vocab.errors import (
    REPORT_URL,
    AwaitingApproval,
    BrokerError,
    PolicyDenied,
    RevokeIncomplete,
    UnknownSession,
    UsageError,
)
from broker.vocab.logs import event
from broker.vocab.tracing import OFF, annotate, span

LOG = logging.getLogger("broker.daemon")
SESSION_PATH = re.compile(r"/v1/sessions/([^/]{1,64})")
RENEW_PATH = re.compile(r"/v1/sessions/([^/]{1,64})/renew")
HOLD_PATH = re.compile(r"/v1/sessions/([^/]{1,64})/hold")
NETWORK_PATH = re.compile(r"/v1/sessions/([^/]{1,64})/network")
ROUTES = {
    "GET": ("/v1/health", "/v1/sessions", "/metrics", "/v1/approvals"),
    "POST": ("/v1/sessions", "/v1/policy/check", "/v1/sweep", "/v1/exec"),
    "DELETE": ("/v1/sessions",),
}
TEMPLATES = (
    (SESSION_PATH, ("DELETE", "/v1/sessions/{id}")),
    (HOLD_PATH, ("POST", "/v1/sessions/{id}/hold")),
    (RENEW_PATH, ("POST", "/v1/sessions/{id}/renew")),
    (NETWORK_PATH, ("POST", "/v1/sessions/{id}/network")),
    *(
        (re.compile(rf"/v1/approvals/([^/]{{1,64}})/{action}"), ("POST", f"/v1/approvals/{{id}}/{action}"))
        for action in ("approve", "deny", "wait", "collect")
    ),
)


class Routes:
    def __init__(self, base: Broker, stopping: threading.Event) -> None:
        self.base = base
        self.stopping = stopping
        self.holds = Holds()

    def release(self, peer: Peer, link: Link) -> None:
        """A connection ended: the exec sessions it held are revoked."""
        if link.sessions:
            broker = dataclasses.replace(self.base, requester=peer.requester())
            try:
                self.holds.release(broker, link)
            finally:
                _finish(broker, None)

    def handle(self, request: Request, peer: Peer, send: Send, link: Link) -> None:
        """Answer ``request``; whatever goes wrong, the peer gets one JSON line, never a traceback.

        Each request is one trace (``<METHOD> <route>``) when tracing is on; a scrape of ``/metrics`` is not
        traced (one every few seconds would drown the rest)."""
        broker = dataclasses.replace(self.base, requester=peer.requester())
        path = urlsplit(request.target).path
        template = route_template(request.method, path)
        name = f"{request.method} {template}" if template is not None else "HTTP unknown route"
        answered: list[int] = []

        def sending(status: int, document: Any, exit_code: int = 0, incomplete: str = "") -> None:
            answered.append(status)
            send(status, document, exit_code, incomplete)

        requester = str(peer.requester())
        traced = span(name, method=_method(request.method), route=template, requester=requester)
        with traced if template != "/metrics" else OFF as root:
            try:
                self._dispatch(broker, peer, request, sending, link)
            except AwaitingApproval as exc:  # nothing minted yet: the request, for the client to wait on or resume
                body = {**error_body(exc.message, exc.exit_code), "request": exc.request, "digest": exc.digest}
                _answer(sending, 202, body, exc.exit_code)
                root.set(exit_code=exc.exit_code)
            except BrokerError as exc:
                status = 404 if isinstance(exc, UnknownSession) else HTTP_STATUS.get(exc.exit_code, 500)
                _answer(sending, status, error_body(exc.message, exc.exit_code))
                root.set(exit_code=exc.exit_code)
            except Exception as exc:  # a bug: logged here, one line to the peer
                LOG.exception("daemon request failed")
                message = f"internal error ({type(exc).__name__}) in the daemon; please report it at {REPORT_URL}"
                _answer(sending, 500, error_body(message, 1))
                root.set(exit_code=1)
            finally:
                if answered:
                    root.set(status=answered[-1])
                event(LOG, "request", method=request.method, path=path, uid=peer.uid)

    def _dispatch(self, broker: Broker, peer: Peer, request: Request, send: Send, link: Link) -> None:
        url = urlsplit(request.target)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        route = (request.method, url.path)
        if route == ("GET", "/v1/health"):
            send(200, {"status": "ok", "version": __version__})
        elif route == ("GET", "/metrics"):
            operators_only(peer, "read the metrics")
            send(200, _metrics(broker))
        elif route == ("POST", "/v1/sessions"):
            self._issue(broker, peer, request, send)
        elif route == ("GET", "/v1/sessions"):
            send(200, _status(broker, peer, query))
        elif route == ("DELETE", "/v1/sessions"):
            send(200, *self._revoke_task(broker, peer, query))
        elif route == ("POST", "/v1/policy/check"):
            send(*_check(broker, peer, request))
        elif route == ("POST", "/v1/sweep"):
            operators_only(peer, "sweep")
            send(200, *_sweep(broker))
        elif request.method == "DELETE" and (match := SESSION_PATH.fullmatch(url.path)):
            send(200, *self._revoke(broker, peer, match.group(1)))
        elif route == ("POST", "/v1/exec"):
            _answer(send, 201, self.holds.start(broker, peer, _json_body(request), link))  # a peer gone: revoked
        elif request.method == "POST" and (match := HOLD_PATH.fullmatch(url.path)):
            self._hold(broker, match.group(1), link, send)
        elif request.method == "POST" and (match := RENEW_PATH.fullmatch(url.path)):
            send(200, *_renew(broker, peer, match.group(1)))
        elif request.method == "POST" and (match := NETWORK_PATH.fullmatch(url.path)):
            send(200, _network(broker, peer, match.group(1), _json_body(request)))
        elif url.path == "/v1/approvals" or url.path.startswith("/v1/approvals/"):
            from broker.daemon import approval_routes

            approval_routes.dispatch(broker, peer, request, send, self.stopping)
        else:
            _answer(send, 404, error_body(f"no endpoint {request.method[:10]} {url.path[:80]}", 2))

    def _issue(self, broker: Broker, peer: Peer, request: Request, send: Send) -> None:
        from broker.core.inputs.manifest import parse_manifest
        from broker.core.issuing import issuing

        manifest = parse_manifest(request.body, broker.config, as_json=True, identity=(peer.uid, peer.gid))
        with issuing(broker, manifest) as session:
            annotate(session=session.id, task=session.task)
            # The answer leaves while the session can still be rolled back: a peer that is gone gets nothing minted.
            send(201, session.to_json())
        with contextlib.suppress(BrokerError):
            broker.witness()

    def _hold(self, broker: Broker, session: str, link: Link, send: Send) -> None:
        """Answer (the revoke report) only when the exec session ended; a holder that is gone gets nothing."""
        held = self.holds.get(session) if session in link.sessions else None
        if held is None:
            raise UnknownSession(f"session {session[:64]!r} is not an exec session this connection holds")
        report = _finish(broker, self.holds.hold(broker, held, link, self.stopping))
        _answer(send, 200, report.to_json(), *_incomplete([report]))

    def _revoke(self, broker: Broker, peer: Peer, session: str) -> tuple[Any, int, str]:
        annotate(session=session)
        report = self.revoke_one(broker, owned_session(broker, peer, _session_id(session), "revoke").id)
        return _finish(broker, report.to_json()), *_incomplete([report])

    def _revoke_task(self, broker: Broker, peer: Peer, query: dict[str, str]) -> tuple[Any, int, str]:
        """Every live session of the task that the peer may act on (its own; all of them for root)."""
        from broker.core.revoking import revoke_many
        from broker.core.store.states import SHOWN_SESSION_STATES
        from broker.vocab.errors import UsageError

        task = query.get("task")
        annotate(task=task)
        if not task:
            raise UsageError("revoke needs a task (DELETE /v1/sessions?task=NAME) or a session id")
        owned = owner_filter(broker, peer)
        found = broker.store.sessions(states=SHOWN_SESSION_STATES, task=task)
        sessions = [s.id for s in found if owned is None or owned(s)]
        if not sessions:
            raise UnknownSession(f"no live session for task {task[:64]!r}")
        held = {session: self.holds.get(session) for session in sessions}
        others = revoke_many(broker, [s for s in found if s.id in sessions and held[s.id] is None])
        by_id = {report.session: report for report in others}  # the fleet's holders asked and waited for at once
        reports = [by_id[s] if held[s] is None else self.revoke_one(broker, s) for s in sessions]
        return _finish(broker, [report.to_json() for report in reports]), *_incomplete(reports)

    def revoke_one(self, broker: Broker, session: str) -> RevokeReport:
        """An exec session's proxy is closed first (it refuses at once), then every session is revoked as usual."""
        from broker.core.revoking import revoke_session

        held = self.holds.get(session)
        return self.holds.end(broker, held, "revoke") if held is not None else revoke_session(broker, session)


def route_template(method: str, path: str) -> str | None:
    """The route ``path`` is, as a template (``/v1/sessions/{id}``): a span's name, never the session id itself."""
    if path in ROUTES.get(method, ()):
        return path
    for pattern, template in TEMPLATES:
        if method == template[0] and pattern.fullmatch(path):
            return template[1]
    return None


def _method(method: str) -> str:
    return method if method in ROUTES else "OTHER"


def _metrics(broker: Broker) -> Raw:
    """The Prometheus text format of the daemon's metrics (every family, the store's gauges read now)."""
    from broker.telemetry.metrics import CONTENT_TYPE

    if broker.metrics is None:
        raise UnknownSession("this daemon keeps no metrics")
    return Raw(broker.metrics.exposition(), CONTENT_TYPE)


def _answer(send: Send, status: int, body: dict[str, Any], exit_code: int = 0, incomplete: str = "") -> None:
    with contextlib.suppress(OSError):
        send(status, body, exit_code, incomplete)


def _json_body(request: Request) -> Any:
    import json

    from broker.vocab.errors import BadInput

    try:
        return json.loads(request.body)
    except ValueError:
        raise BadInput("the request body is not JSON") from None


def _finish(broker: Broker, result: Any) -> Any:
    """Sign the log head for what this request appended, as a CLI command does when it closes."""
    broker.checkpoint()
    broker.witness()
    return result


def _status(broker: Broker, peer: Peer, query: dict[str, str]) -> Any:
    from broker.core.status import session_status

    providers = broker.config.providers if query.get("budgets") == "1" else None
    found = session_status(
        broker.store,
        include_ended=query.get("all") == "1",
        providers=providers,
        now=broker.clock(),
        owned=owner_filter(broker, peer),
    )
    return [session.to_json() for session in found]


def _session_id(value: str) -> str:
    from broker.vocab.session_ids import check_session_id

    return check_session_id(value)


def _incomplete(reports: list[RevokeReport]) -> tuple[int, str]:
    pending = [report.session for report in reports if not report.complete]
    return (RevokeIncomplete.exit_code if pending else 0), ",".join(pending)


def _renew(broker: Broker, peer: Peer, session: str) -> tuple[Any, int]:
    from broker.core.renewing import renew_session
    from broker.core.running.forcing import RunningRenewal, outcome_error

    record = owned_session(broker, peer, _session_id(session), "renew")
    renewals = renew_session(broker, record.id)
    failed = outcome_error([r for r in renewals if isinstance(r, RunningRenewal)])
    pending = any(renewal.old_outcome == "pending" for renewal in renewals)
    code = failed.exit_code if failed is not None else RevokeIncomplete.exit_code if pending else 0
    return _finish(broker, [r.to_json() for r in renewals]), code


def _network(broker: Broker, peer: Peer, session: str, body: Any) -> Any:
    """``session allow|disallow``: ``{"destination": "HOST:PORT", "allow": true}`` for a session the peer owns."""
    from broker.core.running.allowing import change_network

    record = owned_session(broker, peer, _session_id(session), "change the network of")
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("destination"), str)
        or body.get("allow")
        not in (
            True,
            False,
        )
    ):
        raise UsageError('session allow|disallow needs {"destination": "HOST:PORT", "allow": true or false}')
    change = change_network(broker, record.id, body["destination"], allow=body["allow"])
    return _finish(broker, change.to_json())


def _sweep(broker: Broker) -> tuple[Any, int]:
    from broker.core.sweeping import sweep

    report = sweep(broker)
    return _finish(broker, report.to_json()), 0 if report.complete else RevokeIncomplete.exit_code


def _check(broker: Broker, peer: Peer, request: Request) -> tuple[int, Any]:
    """The decision for the peer the kernel names (nothing in the request names another requester or a default
    sandbox identity); a denial is the exit-3 error with the decision beside it, for the client to print."""
    from broker.core.inputs.manifest import parse_manifest
    from broker.core.inputs.policy import decide

    manifest = parse_manifest(request.body, broker.config, as_json=True, identity=(peer.uid, peer.gid))
    decision = decide(broker.policy, manifest, peer.requester(), broker.config)
    if not decision.allowed:
        return 403, {**error_body(decision.denial_message(), PolicyDenied.exit_code), "decision": decision.to_json()}
    return 200, decision.to_json()
