"""One request to the daemon as its answering function gets it: the open broker as the peer, the request, the
route's values, and what the daemon holds (exec sessions, the stop signal); ``answer`` sends the reply.

Every endpoint (``broker.daemon.endpoints``) takes a ``Call`` and answers through it, so the dispatch
(``broker.daemon.routes``) is one loop over the table rather than one branch per endpoint.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.core.broker import Broker
from broker.core.revoking import RevokeReport
from broker.daemon.holds import Holds, Link
from broker.daemon.peer import Peer
from broker.host.serving.wire import Request, Send
from broker.vocab.errors import BadInput, RevokeIncomplete

if TYPE_CHECKING:
    from broker.daemon.gateway import GatewayHolds


@dataclass(frozen=True)
class Call:
    broker: Broker  # the daemon's, with the peer as its requester
    peer: Peer
    request: Request
    send: Send
    link: Link  # the connection: the exec sessions it holds
    params: dict[str, str]  # the route's values (``{id}``), unchecked
    query: dict[str, str]  # the last value of each query parameter
    holds: Holds
    stopping: threading.Event
    revoke_one: Callable[[Broker, str], RevokeReport]  # an exec session's proxy closed first, then revoked
    gateway: GatewayHolds | None = None  # the sessions the daemon's gateway holds ([gateway] listen)

    @property
    def id(self) -> str:
        """The ``{id}`` of the route, unchecked: the endpoint checks it as the id it is."""
        return self.params["id"]

    def answer(self, status: int, body: Any, exit_code: int = 0, incomplete: str = "") -> None:
        """Send the answer; a peer already gone is no error (what was done is done, or rolled back by the caller)."""
        with contextlib.suppress(OSError):
            self.send(status, body, exit_code, incomplete)

    def json_body(self) -> Any:
        try:
            return json.loads(self.request.body)
        except ValueError:
            raise BadInput("the request body is not JSON") from None


def finish(broker: Broker, result: Any) -> Any:
    """Sign the log head for what this request appended, as a CLI command does when it closes."""
    broker.checkpoint()
    broker.witness()
    return result


def incomplete(reports: list[RevokeReport]) -> tuple[int, str]:
    """The exit code and the ``Broker-Incomplete`` sessions of a revoke's reports."""
    pending = [report.session for report in reports if not report.complete]
    return (RevokeIncomplete.exit_code if pending else 0), ",".join(pending)
