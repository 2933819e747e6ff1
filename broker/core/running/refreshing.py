"""``kind: secret`` kept current behind its placeholder: a new KV version swapped into a running session's proxy.

A KV secret has no expiry, so ``broker.core.running.rotating`` (which
renews what ends before the session) never renews it: the operator rotates
it by writing a new version. While an ``exec`` runs (directly or held by the
daemon, or held by a gateway), a ``SecretRefresher`` asks (on a timer:
``broker.core.running.timers``), every ``[egress]
secret_refresh`` seconds (60 by default), for the current version of each
proxied credential whose provider keeps versions
(``providers.capabilities.VersionedSecrets``: Vault's KV v2 metadata; no
value is read for that). When it is not the version the proxy holds, under
the same steps as a renewal:

1. the policy is decided again for the stored manifest, as its files say
   now (``standing``: a rule tightened since applies; a denied refresh stops
   watching that credential, ``credential.renewal_denied``, the withdrawal
   is logged once, ``session.policy_withdrawn``, and the proxy keeps the
   value it has);
2. the current record is renamed ``<name>~<n>`` and the new value is read
   and recorded (``credential.issued`` with ``renewal_of``, its reference
   naming the new version);
3. the proxy takes the new value behind the same placeholder
   (``Interceptor.rotate``: a request under way keeps the value it began
   with, so none fails during the swap);
4. the old record is closed (state ``revoked``, reason ``renewed``):
   nothing is revoked anywhere, the old value is the operator's secret and
   its KV version stays as the operator left it; ``credential.renewed`` is
   logged with ``version``, ``previous_version`` and ``old_value:
   "not revoked (the operator's secret)"``.

The placeholder is fixed for the session: a new value of another length or
prefix is swapped in all the same (the proxy matches the placeholder the
sandbox holds, whatever stands behind it; an answer echoing the new value
shows the sandbox a stand-in of that value's length, so its framing holds).

A version that cannot be read (the metadata unreadable, the current version
deleted or destroyed, the new value refused by its provider) changes
nothing: the proxy keeps the old value, ``credential.renewal_failed`` is
logged (once per distinct reason, not at every check), and the next check
tries again. ``renew_now`` (``broker renew`` reaching a running exec) makes
the check at once. ``stop`` waits for a refresh under way.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from datetime import datetime

from broker.core.broker import Broker
from broker.core.credential.mint import Minting
from broker.core.credential.revoke import revoke_credential
from broker.core.inputs.manifest import Manifest
from broker.core.running.standing import Standing
from broker.core.running.timers import OwnThreads, Timer, Timers
from broker.core.store.states import CredentialState
from broker.egress.terminate.interceptor import Interceptor
from broker.vocab.errors import BrokerError, PolicyDenied
from providers.base import CredentialRequest
from providers.capabilities import VersionedSecrets

NOT_REVOKED = "not revoked (the operator's secret)"


@dataclass
class _Watched:
    """One proxied versioned secret: its request, the version the proxy holds and the record it came from."""

    request: CredentialRequest
    version: str
    record: str  # the store name of the credential whose value the proxy holds now
    failed: str | None = None  # the reason of the last failure logged (a repeat is not logged again)


@dataclass(frozen=True)
class Refreshed:
    """What one check of a credential did: ``renewed`` (a new version), ``unchanged``, ``failed`` or ``denied``."""

    name: str
    outcome: str
    version: str
    previous_version: str | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, str]:
        fields = {"name": self.name, "outcome": self.outcome, "version": self.version}
        if self.previous_version is not None:
            fields["previous_version"] = self.previous_version
        if self.reason is not None:
            fields["reason"] = self.reason
        return fields


class SecretRefresher:
    """Swaps a new version of each proxied versioned secret into the running proxy (see the module docstring)."""

    def __init__(
        self,
        broker: Broker,
        manifest: Manifest,
        session_id: str,
        expires_at: datetime,
        interceptor: Interceptor,
        standing: Standing,
        every: float | None = None,
        timers: Timers | None = None,
    ) -> None:
        self.broker = broker
        self.manifest = manifest
        self.standing = standing  # a new version is swapped in only while the policy allows the session now
        self.session_id = session_id
        self.expires_at = expires_at
        self.interceptor = interceptor
        self.every = float(every if every is not None else broker.config.secret_refresh)
        self._watched: dict[str, _Watched] = {}
        self._turn = threading.Lock()  # one check at a time: the timer's, or one asked for by renew_now
        self._stop = threading.Event()
        self._timers = timers or OwnThreads()
        self._timer: Timer | None = None

    @property
    def watched(self) -> list[str]:
        return sorted(self._watched)

    def start(self) -> SecretRefresher:
        """Find the proxied versioned secrets; start watching them (none: no timer)."""
        requests = {request.name: request for request in self.manifest.credentials}
        for record in self.broker.store.credentials(self.session_id):
            name = record.name
            if name not in self.manifest.proxied or record.state != CredentialState.ACTIVE or "~" in name:
                continue
            provider = self.broker.config.providers.get(record.provider)
            if not isinstance(provider, VersionedSecrets) or not self.interceptor.can_rotate(name):
                continue
            version = provider.version_of(record.reference)
            if version is not None:
                self._watched[name] = _Watched(requests[name], version, name)
        if self._watched:
            self._timer = self._timers.start("refresh-secrets", self._step, self.every)
        return self

    def stop(self) -> None:
        """No refresh after this returns (one under way is finished first)."""
        self._stop.set()
        if self._timer is not None:
            self._timer.stop()
        with self._turn:
            self._watched.clear()

    def __enter__(self) -> SecretRefresher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def renew_now(self, names: list[str] | None = None) -> list[Refreshed]:
        """Check ``names`` (all watched: None) now, as the thread does; what each check did."""
        results = []
        for name in sorted(self._watched) if names is None else names:
            result = self.check(name)
            if result is not None:
                results.append(result)
        return results

    def _step(self) -> float | None:
        for name in sorted(self._watched):
            if self._stop.is_set():
                return None
            self.check(name)
        return self.every if self._watched else None

    def check(self, name: str) -> Refreshed | None:
        """Look at ``name``'s current version; swap a new one in. None when it is not (or no longer) watched."""
        with self._turn:
            watched = self._watched.get(name)
            if watched is None or self._stop.is_set():
                return None
            if self.broker.clock() >= self.expires_at:
                del self._watched[name]
                return None
            try:
                return self._check(name, watched)
            except PolicyDenied as exc:
                self._log("credential.renewal_denied", name, reason=exc.message)
                del self._watched[name]
                return Refreshed(name, "denied", watched.version, reason=exc.message)
            except BrokerError as exc:
                return self._failed(name, watched, exc.message)
            except Exception as exc:  # a bug: the old value stays in the proxy; the session goes on
                return self._failed(name, watched, f"unexpected {type(exc).__name__}")

    def _failed(self, name: str, watched: _Watched, why: str) -> Refreshed:
        if watched.failed != why:
            watched.failed = why
            with contextlib.suppress(BrokerError):
                self._log("credential.renewal_failed", name, reason=why, version=watched.version, retry_in=self.every)
        return Refreshed(name, "failed", watched.version, reason=why)

    def _check(self, name: str, watched: _Watched) -> Refreshed:
        broker, store, session_id = self.broker, self.broker.store, self.session_id
        provider = broker.config.providers[watched.request.provider]
        assert isinstance(provider, VersionedSecrets)
        current = provider.current_version(watched.request)
        if current == watched.version:
            watched.failed = None
            return Refreshed(name, "unchanged", current)
        remaining = int((self.expires_at - broker.clock()).total_seconds())
        decision = self.standing.require("renewal denied by policy")  # the policy as it is now
        minting = Minting(broker, self.manifest, decision, session_id, self.expires_at)
        generation = 1 + sum(1 for c in store.credentials(session_id) if "~" in c.name)
        retired = f"{name}~{generation}"
        store.retire_credential(session_id, name, retired)
        broker.keepsafe.rename(session_id, name, retired)
        if watched.record == name:
            watched.record = retired  # the proxy's value is that record's, under its new name
        context = minting.context(watched.request, ttl_cap=max(1, remaining), generation=generation)
        credential = minting.mint(watched.request, context)
        version = provider.version_of(credential.reference) or current
        minting.record(watched.request, credential, renewal_of=watched.record)
        if not self.interceptor.rotate(name, credential.secret):
            del self._watched[name]  # revoked meanwhile: the session's revocation closes the new record too
            return Refreshed(name, "failed", watched.version, reason="the session's proxy is revoked")
        old = next((c for c in store.credentials(session_id) if c.name == watched.record), None)
        if old is not None and old.state == CredentialState.ACTIVE:
            revoke_credential(broker, session_id, self.manifest.task, old, broker.clock(), reason="renewed")
        self._log(
            "credential.renewed",
            name,
            renewal_of=watched.record,
            generation=generation,
            version=version,
            previous_version=watched.version,
            old_value=NOT_REVOKED,
            fingerprint=broker.keys.fingerprint(credential.secret),
        )
        previous = watched.version
        self._watched[name] = _Watched(watched.request, version, name)
        return Refreshed(name, "renewed", version, previous_version=previous)

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
