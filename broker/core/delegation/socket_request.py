"""A session's ``broker.sock`` as ``issuing`` is asked for it, and what it hands back: the listener and its limits.

``broker exec`` (direct, or the daemon holding an exec) and a delegating
socket (for a child that may delegate further) make one and give it to
``issuing``. When the session's rules allow children, ``issuing`` binds the
socket in the session directory before the directory is sealed, owned by
``owner``, and says how many children the rules allow (``limits``:
``delegate_rate`` a minute and ``delegate_total`` in all, the smallest of
its rules'); the caller serves it (``broker.core.session_socket``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.core.inputs.approval import NO_DELEGATION, Delegation

if TYPE_CHECKING:
    import socket


class DelegationSocket:
    """Asks ``issuing`` for the session's ``broker.sock`` (when its rules allow children), owned by ``owner``;
    holds the listening socket once it is bound, and the children its rules allow."""

    def __init__(self, owner: tuple[int, int] | None) -> None:
        self.owner = owner
        self.listener: socket.socket | None = None
        self.limits: Delegation = NO_DELEGATION
