"""Providers made ready in the background: a cold broker opens their connections while it does local work.

``broker issue`` starts this as soon as it knows the manifest's providers,
``revoke`` as soon as it knows the session's: each provider's ``warm_up``
(its SDK, clients, kept-alive connections; nothing minted or changed) runs
in a thread of its own, so the TCP and TLS handshakes overlap with the
imports, the policy decision and the store instead of preceding the first
call. Once per provider object: a long-lived broker's are warm already.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable
from typing import Any

from broker.core.config import Config

LOG = logging.getLogger("broker.warm")
_STARTED: weakref.WeakSet[Any] = weakref.WeakSet()
_GUARD = threading.Lock()


def warm_up(config: Config, names: Iterable[str], *, minting: bool) -> None:
    """Start warming each named provider of ``config`` (returns at once)."""
    for name in sorted(set(names)):
        provider = config.providers.get(name)
        with _GUARD:
            if provider is None or provider in _STARTED:
                continue
            _STARTED.add(provider)
        threading.Thread(target=_warm, args=(provider, minting), name=f"warm-{name}", daemon=True).start()


def _warm(provider: Any, minting: bool) -> None:
    try:
        provider.warm_up(minting)
    except Exception as exc:  # the call that needs the provider reports it
        LOG.debug("warm-up failed", extra={"broker_fields": {"provider": provider.name, "error": type(exc).__name__}})
