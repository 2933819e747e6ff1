"""Mint one credential and record it: the steps ``issue`` and ``renew`` share, on one ``Minting``.

A ``Minting`` is one session's credentials being minted: the broker, the
manifest, the policy's decision, the session and its end, given once and
used by every step. ``mint`` records the credential ``minting`` (with the
part of its reference known in advance) before the provider call, so a crash
in between leaves ``sweep`` enough to find it; ``record`` keeps its
revocation secret, stores its reference and logs ``credential.issued``. A
credential the provider returned that fails a check or cannot be recorded is
withheld (``withhold``, see ``broker.core.credential.withholding``).
``context`` is what a provider is told, also when it reserves room before
the mint (``broker.core.credential.reserving``).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from broker.core.broker import Broker
from broker.core.credential.withholding import cause_text, fate, withhold
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import Decision
from broker.core.store.states import CredentialState
from broker.vocab.errors import BrokerError, ProviderError
from broker.vocab.logs import event
from broker.vocab.time import iso
from broker.vocab.tracing import span
from providers.base import CredentialRequest, MintContext, MintedCredential, MintRejected
from providers.capabilities import FindsMinted

LOG = logging.getLogger("broker.issue")


class Minting:
    """One session's credentials being minted (by ``issue``, or again by ``renew``)."""

    def __init__(
        self,
        broker: Broker,
        manifest: Manifest,
        decision: Decision,
        session_id: str,
        expires_at: datetime,
        *,
        parent: str | None = None,
    ) -> None:
        self.broker = broker
        self.manifest = manifest
        self.decision = decision
        self.session_id = session_id
        self.expires_at = expires_at
        self.parent = parent  # a child session's parent: the sandbox of that one asked for it

    def context(self, request: CredentialRequest, *, ttl_cap: int | None = None, generation: int = 0) -> MintContext:
        """What the provider is told about the session it mints ``request`` for; ``ttl_cap`` shortens its TTL."""
        decided = self.decision.credential(request.name)
        ttl = decided.ttl
        assert ttl is not None
        if ttl_cap is not None:
            ttl = min(ttl, ttl_cap)
        return MintContext(
            session_id=self.session_id,
            task=self.manifest.task,
            requester=str(self.broker.requester),
            ttl=ttl,
            session_expires_at=self.expires_at,
            mount_dir=self.manifest.sandbox.mount_path / request.name,
            generation=generation,
            delegated=self.parent is not None,
            proxied=request.name in self.manifest.proxied,
            rule=decided.rule or "",
            sandbox_uid=self.manifest.sandbox.uid,
            parent=self.parent,
        )

    def mint(self, request: CredentialRequest, context: MintContext) -> MintedCredential:
        """Record it ``minting`` with its planned reference, mint it; withhold what fails a check after minting."""
        broker = self.broker
        provider = broker.config.providers[request.provider]
        planned = provider.planned_reference(request, context) if isinstance(provider, FindsMinted) else {}
        broker.store.add_credential(self.session_id, request.name, provider.name, provider.type_name, planned)
        started = time.monotonic()
        event(LOG, "mint", credential=request.name, provider=provider.name, type=provider.type_name, ttl=context.ttl)
        try:
            with span(
                "provider.mint",
                provider=provider.name,
                provider_type=provider.type_name,
                credential=request.name,
                session=self.session_id,
            ) as traced:
                minted = provider.mint(request, context)
                traced.set(outcome="minted")
        except MintRejected as exc:
            self.counted(provider.name, started, failed=True)
            outcome = self.withhold(request, exc.credential, why=exc.message)
            raise ProviderError(f"{exc.message}; {fate(outcome)}", retryable=False) from None
        except BrokerError as exc:
            self.counted(provider.name, started, failed=True)
            broker.store.set_credential_state(self.session_id, request.name, CredentialState.FAILED)
            event(
                LOG,
                "mint failed",
                credential=request.name,
                provider=provider.name,
                error=exc.message,
                ms=round((time.monotonic() - started) * 1000),
            )
            raise
        self.counted(provider.name, started)
        event(
            LOG,
            "minted",
            credential=request.name,
            provider=provider.name,
            reference=dict(minted.reference),
            expires_at=iso(minted.expires_at),
            ms=round((time.monotonic() - started) * 1000),
        )
        return minted

    def record(self, request: CredentialRequest, credential: MintedCredential, **extra: Any) -> None:
        """Keep its revocation secret, store its reference, log it; if any of that fails, withhold it."""
        broker = self.broker
        fingerprint = broker.keys.fingerprint(credential.secret)
        try:
            if credential.revoke_secret is not None:
                broker.keepsafe.put(broker.runtime, self.session_id, request.name, credential.revoke_secret)
            broker.store.credential_minted(
                self.session_id,
                request.name,
                reference=credential.reference,
                scope=credential.scope,
                expires_at=credential.expires_at,
                fingerprint=fingerprint,
            )
            broker.log.append("credential.issued", **self.issued_fields(request, credential), **extra)
        except BaseException as exc:
            self.withhold(request, credential, why=f"not recorded: {cause_text(exc)}")
            raise
        if broker.metrics is not None:
            broker.metrics.issued(request.provider)

    def counted(self, provider: str, started: float, *, failed: bool = False) -> None:
        """One provider mint call in the daemon's metrics: its time, whether it failed (a command counts nothing)."""
        metrics = self.broker.metrics
        if metrics is not None:
            metrics.mint_seconds(provider, time.monotonic() - started)
            if failed:
                metrics.failed(provider, "mint")

    def withhold(self, request: CredentialRequest, credential: MintedCredential, *, why: str) -> CredentialState:
        """A credential the provider returned that is not handed out: logged with its fingerprint, then revoked."""
        return withhold(self.broker, self.issued_fields(request, credential), credential, why=why)

    def issued_fields(self, request: CredentialRequest, credential: MintedCredential) -> dict[str, Any]:
        """The fields of a ``credential.issued`` record."""
        broker = self.broker
        provider = broker.config.providers[request.provider]
        return {
            "session": self.session_id,
            "task": self.manifest.task,
            "requester": str(broker.requester),
            "credential": request.name,
            "provider": provider.name,
            "type": provider.type_name,
            "rule": self.decision.credential(request.name).rule,
            "scope": dict(credential.scope),
            "expires_at": iso(credential.expires_at),
            "reference": dict(credential.reference),
            "fingerprint": broker.keys.fingerprint(credential.secret),
            "fingerprint_key_id": broker.keys.fingerprints.key_id,
        }
