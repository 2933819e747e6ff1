"""Mint one credential and record it: the steps ``issue`` and ``renew`` share.

``mint_one`` records the credential ``minting`` (with the part of its
reference known in advance) before the provider call, so a crash in between
leaves ``sweep`` enough to find it; ``record_minted`` keeps its revocation
secret, stores its reference and logs ``credential.issued``. A credential the
provider returned that fails a check or cannot be recorded is withheld
(``broker.core.withholding``). ``mint_context`` is what a provider is told,
also when it reserves room before the mint (``broker.core.reserving``).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from broker.core.broker import Broker
from broker.core.manifest import Manifest
from broker.core.policy import Decision
from broker.core.states import CredentialState
from broker.core.withholding import cause_text, fate, issued_fields, withhold
from broker.vocab.errors import BrokerError, ProviderError
from broker.vocab.logs import event
from broker.vocab.time import iso
from providers.base import CredentialRequest, MintContext, MintedCredential, MintRejected
from providers.capabilities import FindsMinted

LOG = logging.getLogger("broker.issue")


def mint_context(
    broker: Broker,
    manifest: Manifest,
    decision: Decision,
    request: CredentialRequest,
    session_id: str,
    expires_at: datetime,
    ttl_cap: int | None = None,
    generation: int = 0,
) -> MintContext:
    """What the provider is told about the session it mints ``request`` for; ``ttl_cap`` shortens its TTL."""
    ttl = decision.credential(request.name).ttl
    assert ttl is not None
    if ttl_cap is not None:
        ttl = min(ttl, ttl_cap)
    return MintContext(
        session_id=session_id,
        task=manifest.task,
        requester=str(broker.requester),
        ttl=ttl,
        session_expires_at=expires_at,
        mount_dir=manifest.sandbox.mount_path / request.name,
        generation=generation,
    )


def mint_one(
    broker: Broker,
    manifest: Manifest,
    decision: Decision,
    request: CredentialRequest,
    session_id: str,
    expires_at: datetime,
    ttl_cap: int | None = None,
    generation: int = 0,
) -> MintedCredential:
    """Record it ``minting`` with its planned reference, mint it; withhold what fails a check after minting."""
    provider = broker.config.providers[request.provider]
    context = mint_context(broker, manifest, decision, request, session_id, expires_at, ttl_cap, generation)
    planned = provider.planned_reference(request, context) if isinstance(provider, FindsMinted) else {}
    broker.store.add_credential(session_id, request.name, provider.name, provider.type_name, planned)
    started = time.monotonic()
    event(LOG, "mint", credential=request.name, provider=provider.name, type=provider.type_name, ttl=context.ttl)
    try:
        minted = provider.mint(request, context)
    except MintRejected as exc:
        outcome = withhold(broker, manifest, decision, request, exc.credential, session_id, why=exc.message)
        raise ProviderError(f"{exc.message}; {fate(outcome)}", retryable=False) from None
    except BrokerError as exc:
        broker.store.set_credential_state(session_id, request.name, CredentialState.FAILED)
        event(
            LOG,
            "mint failed",
            credential=request.name,
            provider=provider.name,
            error=exc.message,
            ms=round((time.monotonic() - started) * 1000),
        )
        raise
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


def record_minted(
    broker: Broker,
    manifest: Manifest,
    decision: Decision,
    request: CredentialRequest,
    credential: MintedCredential,
    session_id: str,
    **extra: Any,
) -> None:
    """Keep its revocation secret, store its reference, log it; if any of that fails, withhold it."""
    fingerprint = broker.keys.fingerprint(credential.secret)
    try:
        if credential.revoke_secret is not None:
            broker.keepsafe.put(broker.runtime, session_id, request.name, credential.revoke_secret)
        broker.store.credential_minted(
            session_id,
            request.name,
            reference=credential.reference,
            scope=credential.scope,
            expires_at=credential.expires_at,
            fingerprint=fingerprint,
        )
        broker.log.append(
            "credential.issued", **issued_fields(broker, manifest, decision, request, credential, session_id), **extra
        )
    except BaseException as exc:
        withhold(broker, manifest, decision, request, credential, session_id, why=f"not recorded: {cause_text(exc)}")
        raise
