"""Projected tokens: a running session's file-delivered tokens written anew before they end.

A session token of the broker's issuer lives an hour at most; a task may run
for a day, and reads its token from a file, like a Kubernetes pod reads its
projected service-account token. While an ``exec`` runs (directly or held by
the daemon), a ``Projector`` thread renews each file-delivered credential
whose provider declares it ``projected`` and that ends before its session: at
four fifths of its lifetime (never later than ``SPARE`` seconds before its
end). One renewal, under the exec's session lock (held for the whole
command):

1. the policy is decided again for the stored manifest, as its files say now
   (``standing``; a denied renewal stops renewing that credential,
   ``credential.renewal_denied``, and it ends when its token does);
2. the credential is replaced in the store, the log and the session directory
   (``broker.core.credential.replacing``): the sandbox reads the new token
   from the same path, the old one is revoked (``reason: renewed``; a token
   of a live session is not listed as revoked: it simply ends) and
   ``credential.renewed`` is logged;
3. the session document gets the credential's new ``expires_at``.

A failed renewal is tried again (``credential.renewal_failed``) while the old
token lasts. ``stop`` waits for a renewal under way, so the session's
revocation sees every credential it made. Credentials behind the proxy are
the ``Rotator``'s (``broker.core.running.rotating``).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from broker.core.broker import Broker
from broker.core.credential.mint import Minting
from broker.core.credential.replacing import replace_in_files
from broker.core.inputs.manifest import Manifest
from broker.core.running.documenting import refresh_document
from broker.core.running.standing import Standing
from broker.core.store.interface import SessionRecord
from broker.core.store.lineage import ancestors
from broker.core.store.states import CredentialState
from broker.host.sessiondir import SessionDirectory
from broker.vocab.errors import BrokerError, PolicyDenied
from broker.vocab.time import iso
from providers.base import CredentialRequest

FRACTION = 4 / 5  # as the kubelet refreshes a projected token
SPARE = 30.0  # renewed at least this long before it ends (or at its fraction, for a shorter lifetime)
RETRY = 30.0  # a failed renewal is tried again after this (or sooner, before the token ends)


@dataclass(frozen=True)
class _Projected:
    """One projected credential: its request, when the one in the file was minted and ends, a retry time."""

    request: CredentialRequest
    minted_at: datetime
    expires_at: datetime
    retry_at: datetime | None = None

    def due(self) -> datetime:
        if self.retry_at is not None:
            return self.retry_at
        lifetime = (self.expires_at - self.minted_at).total_seconds()
        spare = min(SPARE, lifetime * (1 - FRACTION))
        return min(self.minted_at + timedelta(seconds=lifetime * FRACTION), self.expires_at - timedelta(seconds=spare))


class Projector:
    """Renews a running session's projected credentials in their files (see the module docstring)."""

    def __init__(self, broker: Broker, manifest: Manifest, session: SessionRecord, standing: Standing) -> None:
        self.broker = broker
        self.manifest = manifest
        self.session = session
        self.standing = standing
        self.renewals = 0
        self._due: dict[str, _Projected] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="project", daemon=True)

    def start(self) -> Projector:
        """Find the projected credentials that end before the session; start renewing them (none: no thread)."""
        broker, session = self.broker, self.session
        requests = {request.name: request for request in self.manifest.credentials}
        now = broker.clock()
        for record in broker.store.credentials(session.id):
            provider = broker.config.providers.get(record.provider)
            if provider is None or not provider.projected or record.name not in requests:
                continue  # a retired record (name~n) is not a manifest's name
            if record.name in self.manifest.proxied or record.state != CredentialState.ACTIVE:
                continue
            if record.expires_at is not None and record.expires_at < session.expires_at:
                self._due[record.name] = _Projected(requests[record.name], now, record.expires_at)
        if self._due:
            self._thread.start()
        return self

    def stop(self) -> None:
        """No renewal after this returns (one under way is finished first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> Projector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while self._due and not self._stop.is_set():
            name, due = min(self._due.items(), key=lambda item: item[1].due())
            wait = (due.due() - self.broker.clock()).total_seconds()
            if wait > 0 and self._stop.wait(wait):
                return
            self._attempt(name, due)

    def _attempt(self, name: str, due: _Projected) -> None:
        try:
            self._renew(name, due)
        except PolicyDenied as exc:
            del self._due[name]
            with contextlib.suppress(BrokerError):
                self._log("credential.renewal_denied", name, reason=exc.message)
        except Exception as exc:  # a provider's refusal, or a bug: the token in the file lasts until it ends
            why = exc.message if isinstance(exc, BrokerError) else f"unexpected {type(exc).__name__}"
            now = self.broker.clock()
            left = (due.expires_at - now).total_seconds()
            if left <= 0 or now >= self.session.expires_at:
                del self._due[name]
                return
            retry = now + timedelta(seconds=max(1.0, min(RETRY, left / 4)))
            self._due[name] = replace(due, retry_at=retry)
            with contextlib.suppress(BrokerError):
                self._log("credential.renewal_failed", name, reason=why, retry_at=iso(retry))

    def _renew(self, name: str, due: _Projected) -> None:
        broker, session = self.broker, self.session
        now = broker.clock()
        remaining = int((session.expires_at - now).total_seconds())
        if remaining <= 0:
            del self._due[name]
            return
        decision = self.standing.require("renewal denied by policy")  # the policy as it is now
        minting = Minting(broker, self.manifest, decision, session.id, session.expires_at, parent=session.parent)
        records = broker.store.credentials(session.id)
        old = next((record for record in records if record.name == name), None)
        if old is None or old.state != CredentialState.ACTIVE:
            del self._due[name]  # revoked meanwhile: the session's revocation takes the rest
            return
        generation = 1 + sum(1 for record in records if "~" in record.name)
        directory = SessionDirectory(
            broker.runtime, session.id, session.uid, session.gid, ancestors(broker.store, session)
        )
        done = replace_in_files(minting, directory, due.request, old, generation=generation, remaining=remaining)
        credential = done.credential
        self.renewals += 1
        self._log(
            "credential.renewed",
            name,
            renewal_of=done.retired,
            generation=generation,
            expires_at=iso(credential.expires_at),
            fingerprint=broker.keys.fingerprint(credential.secret),
        )
        if credential.expires_at >= session.expires_at:
            del self._due[name]  # it lasts as long as the session now
        else:
            self._due[name] = _Projected(due.request, now, credential.expires_at)
        current = broker.store.get_session(session.id)
        if current is not None:
            try:
                refresh_document(broker, current, {name: iso(credential.expires_at)})
            except BrokerError as exc:  # the renewal stands: the file has the new token, the log says so
                self._log("credential.document_stale", name, reason=exc.message)

    def _log(self, event: str, name: str, **fields: object) -> None:
        session = self.session
        self.broker.log.append(
            event, session=session.id, task=session.task, requester=session.requester, credential=name, **fields
        )
