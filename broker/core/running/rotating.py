"""Placeholders that outlive the token: a running session's ``inject: proxy`` credentials renewed behind them.

A GitHub installation token ends after an hour; a task may run for a day.
Behind the proxy the sandbox holds a placeholder that never changes, so the
broker can renew what stands behind it. While an ``exec`` runs (directly or
held by the daemon) or a gateway holds the session, a ``Rotator`` renews each proxied credential
that ends before its session: at five sixths of the lifetime the provider
reported for a GitHub token (50 minutes of an hour), at two thirds for the
others (Vault, AWS STS keys), never later than ``SPARE`` seconds before its end (nor
than twice ``GRACE``, so that the old one is revoked before it ends). One
renewal, under the exec's session lock (held for the whole command):

1. the policy is decided again for the stored manifest, as its files say
   now (``standing``: a rule tightened since applies; a denied renewal
   stops renewing, ``credential.renewal_denied``, and the withdrawal is
   logged once, ``session.policy_withdrawn``);
2. the current record is renamed ``<name>~<n>`` and a new credential is
   minted and recorded (``credential.issued`` with ``renewal_of``), for no
   longer than the session has left;
3. the proxy takes the new secret behind the same placeholder
   (``Interceptor.rotate``: a request under way keeps the one it began
   with, so none fails during the swap); for AWS the new STS key id, secret
   and token, which the proxy re-signs with from then on (the sandbox's
   placeholder keys, and the secret its signatures are verified with, stay);
4. after ``GRACE`` seconds (requests already sent with the old secret are
   answered; for AWS, also once no request re-signed with the old keys is
   still under way, or they end, ``Interceptor.draining``) the old
   credential is revoked, and ``credential.renewed`` is logged;
5. the session document (``session.json`` and the store's copy) gets the
   new ``expires_at`` of the credential (``refresh_document``).

A failed mint leaves the old secret in the proxy and is tried again
(``credential.renewal_failed``) while the old one lasts. The files never
change: they hold the placeholder. It runs on a timer
(``broker.core.running.timers``: a thread of its own, or a gateway's shared
scheduler). ``stop`` waits for a renewal under way, so the session's
revocation sees every credential it made. ``rotate_now`` renews one at once
(``broker renew`` reaching the exec, ``broker.core.running.forcing``), one
renewal at a time with the timer's.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from broker.core.broker import Broker
from broker.core.credential.mint import Minting
from broker.core.credential.proxied import proxy_secret
from broker.core.credential.revoke import revoke_credential
from broker.core.inputs.manifest import Manifest
from broker.core.running.documenting import refresh_document
from broker.core.running.standing import Standing
from broker.core.running.timers import OwnThreads, Timer, Timers
from broker.core.store.states import CredentialState
from broker.egress.terminate.interceptor import Interceptor
from broker.vocab.errors import BrokerError, PolicyDenied
from broker.vocab.time import iso
from providers.base import CredentialRequest

#: The part of a credential's lifetime after which it is renewed, per provider type (others: two thirds).
FRACTION = {"github_app": 5 / 6}
DEFAULT_FRACTION = 2 / 3
SPARE = 30.0  # renewed at least this long before it ends (or at its fraction, for a shorter lifetime)
GRACE = 2.0  # the old secret stays valid this long after the swap
DRAIN_POLL = 0.1  # how often the end of requests still under way on the old secret is looked for
RETRY = 30.0  # a failed renewal is tried again after this (or sooner, before the old one ends)


@dataclass
class _Held:
    """One proxied credential: the request, when the secret in the proxy was minted and ends, and its record."""

    request: CredentialRequest
    minted_at: datetime
    expires_at: datetime
    record: str  # the store name of the credential whose secret the proxy holds now
    fraction: float
    retry_at: datetime | None = None

    def due(self) -> datetime:
        if self.retry_at is not None:
            return self.retry_at
        lifetime = (self.expires_at - self.minted_at).total_seconds()
        at = self.minted_at + timedelta(seconds=lifetime * self.fraction)
        spare = max(2 * GRACE, min(SPARE, lifetime * (1 - self.fraction)))  # the old one is revoked in time
        latest = self.expires_at - timedelta(seconds=spare)
        return min(at, latest)


class Rotator:
    """Renews a running session's proxied credentials before they end (see the module docstring)."""

    def __init__(
        self,
        broker: Broker,
        manifest: Manifest,
        session_id: str,
        expires_at: datetime,
        interceptor: Interceptor,
        standing: Standing,
        timers: Timers | None = None,
    ) -> None:
        self.broker = broker
        self.manifest = manifest
        self.standing = standing  # each renewal decides the session again, with the policy as it is now
        self.session_id = session_id
        self.expires_at = expires_at
        self.interceptor = interceptor
        self.renewals = 0
        self._held: dict[str, _Held] = {}
        self._stop = threading.Event()  # set when the session ends: cuts a renewal's waits short
        self._turn = threading.Lock()  # one renewal at a time: the timer's, or one asked for by rotate_now
        self._timers = timers or OwnThreads()
        self._timer: Timer | None = None

    def start(self) -> Rotator:
        """Find what ends before the session; start renewing it (nothing to do: no timer)."""
        requests = {request.name: request for request in self.manifest.credentials}
        now = self.broker.clock()
        for record in self.broker.store.credentials(self.session_id):
            name = record.name
            if name not in self.manifest.proxied or record.state != CredentialState.ACTIVE or "~" in name:
                continue
            if record.expires_at is None or record.expires_at >= self.expires_at:
                continue
            if not self.interceptor.can_rotate(name):
                continue  # its injector cannot take a new secret
            fraction = FRACTION.get(record.type, DEFAULT_FRACTION)
            self._held[name] = _Held(requests[name], now, record.expires_at, name, fraction)
        if self._held:
            self._timer = self._timers.start("rotate", self._step, 0.0)
        return self

    def stop(self) -> None:
        """No renewal after this returns (one under way is finished first)."""
        self._stop.set()
        if self._timer is not None:
            self._timer.stop()
        with self._turn:  # one asked for by rotate_now is finished too
            pass

    def __enter__(self) -> Rotator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _step(self) -> float | None:
        """Renew what is due; the seconds until the next one is (None: nothing left to renew)."""
        if not self._held or self._stop.is_set():
            return None
        name, held = min(self._held.items(), key=lambda item: item[1].due())
        wait = (held.due() - self.broker.clock()).total_seconds()
        if wait > 0:
            return wait
        with self._turn:
            if self._held.get(name) is held and not self._stop.is_set():  # else renewed meanwhile: look again
                self._attempt(name, held)
        return 0.0

    def _attempt(self, name: str, held: _Held) -> tuple[str, str] | None:
        """One renewal; None when done, else ``denied`` or ``failed`` and why."""
        try:
            self.rotate(name, held)
        except PolicyDenied as exc:
            self._log("credential.renewal_denied", name, reason=exc.message)
            self._held.pop(name, None)
            return "denied", exc.message
        except BrokerError as exc:
            self._failed(name, held, exc.message)
            return "failed", exc.message
        except Exception as exc:  # a bug: the old secret stays until it ends; the session goes on
            self._failed(name, held, f"unexpected {type(exc).__name__}")
            return "failed", f"unexpected {type(exc).__name__}"
        return None

    def _failed(self, name: str, held: _Held, why: str) -> None:
        now = self.broker.clock()
        left = (held.expires_at - now).total_seconds()
        if left <= 0 or now >= self.expires_at:
            self._held.pop(name, None)  # (not held at all when rotate_now renews one that lasts the session)
            return
        held.retry_at = now + timedelta(seconds=max(1.0, min(RETRY, left / 4)))
        with contextlib.suppress(BrokerError):
            self._log("credential.renewal_failed", name, reason=why, retry_at=iso(held.retry_at))

    def rotate(self, name: str, held: _Held) -> None:
        broker, store, session_id = self.broker, self.broker.store, self.session_id
        now = broker.clock()
        remaining = int((self.expires_at - now).total_seconds())
        if remaining <= 0:
            del self._held[name]
            return
        decision = self.standing.require("renewal denied by policy")  # the policy as it is now
        minting = Minting(broker, self.manifest, decision, session_id, self.expires_at)
        credentials = store.credentials(session_id)
        generation = 1 + sum(1 for c in credentials if "~" in c.name)
        retired = f"{name}~{generation}"
        store.retire_credential(session_id, name, retired)
        broker.keepsafe.rename(session_id, name, retired)
        if held.record == name:
            held.record = retired  # the proxy's secret is that record's, under its new name
        context = minting.context(held.request, ttl_cap=remaining, generation=generation)
        credential = minting.mint(held.request, context)
        minting.record(held.request, credential, renewal_of=held.record)
        # what the proxy puts in, from its provider (AWS: the key id, secret and token the proxy re-signs with)
        if not self.interceptor.rotate(name, proxy_secret(broker.config, held.request, credential)):
            return  # revoked meanwhile: the session's revocation revokes the new one with the rest
        self._stop.wait(GRACE)  # cut short when the session ends: its revocation takes both then
        while self.interceptor.draining(name) and broker.clock() < held.expires_at and not self._stop.is_set():
            self._stop.wait(DRAIN_POLL)  # an upload re-signed with the old keys is not cut off by their revocation
        old = next((c for c in store.credentials(session_id) if c.name == held.record), None)
        if old is not None and old.state == CredentialState.ACTIVE:
            revoke_credential(broker, session_id, self.manifest.task, old, broker.clock(), reason="renewed")
        self.renewals += 1
        self._log(
            "credential.renewed",
            name,
            renewal_of=held.record,
            generation=generation,
            expires_at=iso(credential.expires_at),
            fingerprint=broker.keys.fingerprint(credential.secret),
        )
        self._held[name] = replace(held, minted_at=now, expires_at=credential.expires_at, record=name, retry_at=None)
        if credential.expires_at >= self.expires_at:
            del self._held[name]  # it lasts as long as the session now
        session = store.get_session(session_id)
        if session is not None:
            try:
                refresh_document(broker, session, {name: iso(credential.expires_at)})
            except BrokerError as exc:  # the renewal stands: the proxy has the new secret, the log says so
                self._log("credential.document_stale", name, reason=exc.message)

    def rotate_now(self, name: str) -> dict[str, str] | None:
        """Renew ``name`` at once, also one that lasts as long as the session; what was done (``outcome``
        ``renewed``, ``failed`` or ``denied``), None when it is not a proxied credential this can renew."""
        with self._turn:
            if self._stop.is_set() or self.broker.clock() >= self.expires_at:
                return None
            held = self._held.get(name) or self._holdable(name)
            if held is None:
                return None
            old = held.expires_at
            failed = self._attempt(name, held)
            if failed is not None:
                return {"name": name, "outcome": failed[0], "reason": failed[1]}
            if self._held and self._timer is None:  # a credential renewed for less than the session: renewed again
                self._timer = self._timers.start("rotate", self._step, 0.0)
            elif self._timer is not None:
                self._timer.wake()  # what is due next changed
            records = {c.name: c for c in self.broker.store.credentials(self.session_id)}
            new, retired = records.get(name), records.get(held.record)
            return {
                "name": name,
                "outcome": "renewed",
                "old_expires_at": iso(old),
                "new_expires_at": iso(new.expires_at if new is not None and new.expires_at is not None else old),
                "old_outcome": str(retired.state) if retired is not None else "unknown",
            }

    def _holdable(self, name: str) -> _Held | None:
        """A proxied credential the thread does not renew (it lasts as long as the session), held to renew now."""
        requests = {request.name: request for request in self.manifest.credentials}
        if name not in self.manifest.proxied or not self.interceptor.can_rotate(name):
            return None
        record = next((c for c in self.broker.store.credentials(self.session_id) if c.name == name), None)
        if record is None or record.state != CredentialState.ACTIVE or record.expires_at is None:
            return None
        fraction = FRACTION.get(record.type, DEFAULT_FRACTION)
        return _Held(requests[name], self.broker.clock(), record.expires_at, name, fraction)

    def _log(self, event: str, name: str, **fields: object) -> None:
        broker = self.broker
        broker.log.append(
            event,
            session=self.session_id,
            task=self.manifest.task,
            requester=str(broker.requester),
            credential=name,
            **fields,
        )
