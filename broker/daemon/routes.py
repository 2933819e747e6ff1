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
from typing import Any
from urllib.parse import parse_qs, urlsplit

from broker import __version__
from broker.core.broker import Broker
from broker.core.revoking import RevokeReport
from broker.daemon.access import owned_session, owner_filter
from broker.daemon.peer import Peer
from broker.daemon.wire import Request, Send, error_body
from broker.vocab.errors import REPORT_URL, BrokerError, PolicyDenied, RevokeIncomplete, UnknownSession
from broker.vocab.logs import event

LOG = logging.getLogger("broker.daemon")
SESSION_PATH = re.compile(r"/v1/sessions/([^/]{1,64})")
RENEW_PATH = re.compile(r"/v1/sessions/([^/]{1,64})/renew")
HTTP_STATUS = {1: 500, 2: 400, 3: 403, 4: 502, 5: 200, 6: 500, 7: 503}


class Routes:
    def __init__(self, base: Broker) -> None:
        self.base = base

    def handle(self, request: Request, peer: Peer, send: Send) -> None:
        """Answer ``request``; whatever goes wrong, the peer gets one JSON line, never a traceback."""
        broker = dataclasses.replace(self.base, requester=peer.requester())
        try:
            self._dispatch(broker, peer, request, send)
        except BrokerError as exc:
            status = 404 if isinstance(exc, UnknownSession) else HTTP_STATUS.get(exc.exit_code, 500)
            _answer(send, status, error_body(exc.message, exc.exit_code))
        except Exception as exc:  # a bug: logged here, one line to the peer
            LOG.exception("daemon request failed")
            message = f"internal error ({type(exc).__name__}) in the daemon; please report it at {REPORT_URL}"
            _answer(send, 500, error_body(message, 1))
        finally:
            event(LOG, "request", method=request.method, path=urlsplit(request.target).path, uid=peer.uid)

    def _dispatch(self, broker: Broker, peer: Peer, request: Request, send: Send) -> None:
        url = urlsplit(request.target)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        route = (request.method, url.path)
        if route == ("GET", "/v1/health"):
            send(200, {"status": "ok", "version": __version__})
        elif route == ("POST", "/v1/sessions"):
            self._issue(broker, request, send)
        elif route == ("GET", "/v1/sessions"):
            send(200, _status(broker, peer, query))
        elif route == ("DELETE", "/v1/sessions"):
            send(200, *_revoke_task(broker, peer, query))
        elif route == ("POST", "/v1/policy/check"):
            send(*_check(broker, request))
        elif route == ("POST", "/v1/sweep"):
            send(200, *_sweep(broker))
        elif request.method == "DELETE" and (match := SESSION_PATH.fullmatch(url.path)):
            send(200, *_revoke(broker, peer, match.group(1)))
        elif request.method == "POST" and (match := RENEW_PATH.fullmatch(url.path)):
            send(200, *_renew(broker, peer, match.group(1)))
        else:
            _answer(send, 404, error_body(f"no endpoint {request.method[:10]} {url.path[:80]}", 2))

    def _issue(self, broker: Broker, request: Request, send: Send) -> None:
        from broker.core.issuing import issue
        from broker.core.manifest import parse_manifest

        manifest = parse_manifest(request.body, broker.config, as_json=True, what="manifest")
        # The answer leaves while the session can still be rolled back: a peer that is gone gets nothing minted.
        issue(broker, manifest, lambda document: send(201, document))
        with contextlib.suppress(BrokerError):
            broker.witness()


def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        send(status, body)


def _finish(broker: Broker, result: Any) -> Any:
    """Sign the log head for what this request appended, as a CLI command does when it closes."""
    broker.checkpoint()
    broker.witness()
    return result


def _status(broker: Broker, peer: Peer, query: dict[str, str]) -> Any:
    from broker.core.status import session_status

    providers = broker.config.providers if query.get("budgets") == "1" else None
    return session_status(
        broker.store,
        include_ended=query.get("all") == "1",
        providers=providers,
        now=broker.clock(),
        requester=owner_filter(peer),
    )


def _session_id(value: str) -> str:
    from broker.vocab.session_ids import check_session_id

    return check_session_id(value)


def _revoke(broker: Broker, peer: Peer, session: str) -> tuple[Any, int, str]:
    from broker.core.revoking import revoke_session

    record = owned_session(broker, peer, _session_id(session), "revoke")
    report = revoke_session(broker, record.id)
    return _finish(broker, report.to_json()), *_incomplete([report])


def _revoke_task(broker: Broker, peer: Peer, query: dict[str, str]) -> tuple[Any, int, str]:
    from broker.core.revoking import revoke_task
    from broker.vocab.errors import UsageError

    task = query.get("task")
    if not task:
        raise UsageError("revoke needs a task (DELETE /v1/sessions?task=NAME) or a session id")
    reports = revoke_task(broker, task, requester=owner_filter(peer))
    return _finish(broker, [report.to_json() for report in reports]), *_incomplete(reports)


def _incomplete(reports: list[RevokeReport]) -> tuple[int, str]:
    pending = [report.session for report in reports if not report.complete]
    return (RevokeIncomplete.exit_code if pending else 0), ",".join(pending)


def _renew(broker: Broker, peer: Peer, session: str) -> tuple[Any, int]:
    from broker.core.renewing import renew_session

    record = owned_session(broker, peer, _session_id(session), "renew")
    renewals = renew_session(broker, record.id)
    pending = any(renewal.old_outcome == "pending" for renewal in renewals)
    return _finish(broker, [r.to_json() for r in renewals]), RevokeIncomplete.exit_code if pending else 0


def _sweep(broker: Broker) -> tuple[Any, int]:
    from broker.core.sweeping import sweep

    report = sweep(broker)
    return _finish(broker, report.to_json()), 0 if report.complete else RevokeIncomplete.exit_code


def _check(broker: Broker, request: Request) -> tuple[int, Any]:
    """The decision; a denial is the exit-3 error with the decision beside it, for the client to print."""
    from broker.core.manifest import parse_manifest
    from broker.core.policy import decide

    manifest = parse_manifest(request.body, broker.config, as_json=True, what="manifest")
    decision = decide(broker.policy, manifest, broker.requester, broker.config)
    if not decision.allowed:
        return 403, {**error_body(decision.denial_message(), PolicyDenied.exit_code), "decision": decision.to_json()}
    return 200, decision.to_json()
