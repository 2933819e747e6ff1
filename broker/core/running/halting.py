"""An outside ``revoke`` of a session ``exec`` is running: the proxy refuses at once, then the command is stopped.

``exec`` holds the session lock until its command ends, so the revoke asks
it over its control socket (``broker.host.control``) instead of waiting.
``Halt`` is what the exec process does then, in this order: the secrets
are dropped from the proxy and it refuses everything (new connections get
a 403 or are refused, open tunnels are cut), then the command gets SIGTERM
and, if it is still running after ``grace`` seconds, SIGKILL. The
revocation at the providers is exec's own teardown, as when the command
ends by itself: there is one revocation path. The same socket carries
``broker session allow|disallow`` to the running proxy (``running`` hands it
over, ``broker.core.running.allowing`` changes it). A session a gateway holds
runs no command: once its proxy refuses, its holder is told (``then``) and
ends it, as a command ending would.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.host.spawning import GRACE, stop

if TYPE_CHECKING:
    from broker.egress.proxy.thread import ServedProxy
    from broker.egress.terminate.interceptor import Interceptor


class Halt:
    """Called from the control socket's thread; the exec's main thread attaches what it starts."""

    def __init__(self, grace: float = GRACE, then: Callable[[], None] | None = None) -> None:
        self.grace = grace
        self._then = then  # told once the proxy refuses (a gateway's session: its holder ends it)
        self._requested = threading.Event()
        self._lock = threading.Lock()
        self._proxy: ServedProxy | None = None
        self._interceptor: Interceptor | None = None
        self._child: subprocess.Popen[bytes] | None = None

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def attach_proxy(self, proxy: ServedProxy | None, interceptor: Interceptor | None) -> None:
        with self._lock:
            self._proxy, self._interceptor = proxy, interceptor
        if self.requested:
            self._refuse()

    def attach_child(self, child: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._child = child
        if self.requested:
            self._stop_child()

    def __call__(self) -> None:
        """The session is being revoked: refuse at once, then stop the command."""
        self._requested.set()
        self._refuse()
        self._stop_child()
        if self._then is not None:
            self._then()

    def cut(self) -> None:
        """The proxy refuses at once (its holder revokes the session next; ``__call__`` is an outside revoke)."""
        self._refuse()

    def running(self) -> tuple[ServedProxy, Interceptor | None] | None:
        """The session's running proxy and its interceptor (``broker session allow|disallow`` changes them:
        ``broker.core.running.allowing``); None when this exec runs no proxy or the session is being revoked."""
        with self._lock:
            proxy, interceptor = self._proxy, self._interceptor
        if proxy is None or self.requested:
            return None
        return proxy, interceptor

    def _refuse(self) -> None:
        with self._lock:
            proxy, interceptor = self._proxy, self._interceptor
        if interceptor is not None:
            interceptor.revoke()
        if proxy is not None:
            proxy.refuse()

    def _stop_child(self) -> None:
        with self._lock:
            child = self._child
        if child is None or child.poll() is not None:
            return
        threading.Thread(target=stop, args=(child, self.grace), name="exec-halt", daemon=True).start()
