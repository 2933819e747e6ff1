"""Providers made ready in the background: a cold broker opens their connections while it does local work.

``broker issue`` starts this as soon as it knows the manifest's providers,
``revoke`` as soon as it knows the session's (``warm_revocation``: the store
opened before the core is even imported, and kept for the command): each
provider's SDK is imported and its ``warm_up`` (``providers.capabilities.Warming``:
clients, kept-alive connections; nothing minted or changed) run in a thread of its own, so the
TCP and TLS handshakes overlap
with the broker's local work instead of preceding its first call. Providers
marked ``warm_first`` (the longest chain of round trips) get the CPU first:
the others start importing once their SDKs are in. ``sdk_ready`` lets the
core's own preload wait for these imports rather than race them (some SDKs
break when two threads import them first). Once per provider object: a
long-lived broker's are warm already.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from broker.vocab.tracing import carried, span
from providers.capabilities import Warming

if TYPE_CHECKING:
    from broker.core.inputs.config import Config
    from broker.core.store.interface import SessionStore

LOG = logging.getLogger("broker.warm")
_IMPORTED: weakref.WeakKeyDictionary[Any, threading.Event] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def warm_up(config: Config, names: Iterable[str], *, minting: bool) -> None:
    """Start warming each named provider of ``config`` (returns at once)."""
    started: list[tuple[Any, threading.Event]] = []
    with _GUARD:
        for name in sorted(set(names)):
            provider = config.providers.get(name)
            if isinstance(provider, Warming) and provider not in _IMPORTED:
                _IMPORTED[provider] = threading.Event()
                started.append((provider, _IMPORTED[provider]))
    first = [imported for provider, imported in started if provider.warm_first]
    for provider, imported in started:
        after = () if provider.warm_first else first
        thread = threading.Thread(
            target=carried(_warm), args=(provider, minting, imported, after), name=f"warm-{provider.name}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: the calls do it themselves
            imported.set()


def warm_revocation(config: Config, session_id: str | None, task: str | None) -> SessionStore | None:
    """The store a cold ``revoke`` works on, opened now, with the providers it will call starting to warm.

    The revoked session's providers (or those of the task's live sessions)
    open their connections while the command loads the core; the command's
    ``Broker`` takes this store, so it is opened once. None when there is no
    store yet: the ``Broker`` creates one, and there is nothing to revoke.
    """
    from broker.core.store import ensure_state_dir, has_store, open_config_store, state_room
    from broker.core.store.states import LIVE_SESSION_STATES

    ensure_state_dir(config)  # the checks Broker.open makes, before anything in the directory is read
    room = state_room(config)
    if room is not None:
        room.release()  # on a nearly full disk, the room kept for revoke, before the store is opened
    if not has_store(config):
        return None
    store = open_config_store(config)
    try:
        if session_id is not None:
            sessions = [session_id]
        else:
            sessions = [s.id for s in store.sessions(states=LIVE_SESSION_STATES, task=task)]
        names = {record.provider for session in sessions for record in store.credentials(session)}
    except BaseException:
        store.close()
        raise
    warm_up(config, names, minting=False)
    return store


def sdk_ready(provider: Any) -> None:
    """Return once a warm-up started for ``provider`` has imported its SDK (at once when none was)."""
    with _GUARD:
        imported = _IMPORTED.get(provider)
    if imported is not None:
        imported.wait()


def _warm(provider: Any, minting: bool, imported: threading.Event, after: Sequence[threading.Event]) -> None:
    try:
        for gate in after:
            gate.wait()
        try:
            provider.preload(minting)
        finally:
            imported.set()
        with span("provider.warm_up", provider=provider.name, provider_type=provider.type_name):
            provider.warm_up(minting)
    except Exception as exc:  # the call that needs the provider reports it
        LOG.debug("warm-up failed", extra={"broker_fields": {"provider": provider.name, "error": type(exc).__name__}})
