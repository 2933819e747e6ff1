"""Withholding: a credential a provider returned that is not handed out is logged, then revoked.

It may fail a check after minting (``MintRejected``), or the broker may fail
to keep its revocation secret, store its reference or log it. Either way it
exists at the provider: its ``credential.issued`` record says ``withheld``
and carries its fingerprint (so ``audit lookup`` finds it), and it is revoked
at once or kept ``pending`` for ``sweep``. Nothing here stops at a store or
log that cannot be written: the revocation happens regardless.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.core.broker import Broker
from broker.core.credential.revoke import revoke_credential
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import Decision
from broker.core.store.interface import CredentialRecord
from broker.core.store.states import CredentialState
from broker.vocab.errors import BrokerError
from broker.vocab.logs import event
from broker.vocab.time import iso
from providers.base import CredentialRequest, MintedCredential

LOG = logging.getLogger("broker.issue")


def cause_text(exc: BaseException) -> str:
    """One line naming a failure, for messages and the log (an OSError's text, never its arguments)."""
    if isinstance(exc, BrokerError):
        return exc.message
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else type(exc).__name__


def fate(outcome: CredentialState) -> str:
    """What became of a withheld credential, for the error message."""
    if outcome in (CredentialState.REVOKED, CredentialState.EXPIRED):
        return "revoked it"
    if outcome == CredentialState.VALID_UNTIL_EXPIRY:
        return "it stays valid until it expires (revoke = expire)"
    return "revoking it failed; it stays pending for broker sweep"


def issued_fields(
    broker: Broker,
    manifest: Manifest,
    decision: Decision,
    request: CredentialRequest,
    credential: MintedCredential,
    session_id: str,
) -> dict[str, Any]:
    """The fields of a ``credential.issued`` record."""
    provider = broker.config.providers[request.provider]
    return {
        "session": session_id,
        "task": manifest.task,
        "requester": str(broker.requester),
        "credential": request.name,
        "provider": provider.name,
        "type": provider.type_name,
        "rule": decision.credential(request.name).rule,
        "scope": dict(credential.scope),
        "expires_at": iso(credential.expires_at),
        "reference": dict(credential.reference),
        "fingerprint": broker.keys.fingerprint(credential.secret),
        "fingerprint_key_id": broker.keys.fingerprints.key_id,
    }


def withhold(
    broker: Broker,
    manifest: Manifest,
    decision: Decision,
    request: CredentialRequest,
    credential: MintedCredential,
    session_id: str,
    *,
    why: str,
) -> CredentialState:
    """A credential the provider returned that is not handed out: log it with its fingerprint, then revoke it.

    Every write here is best effort (the failure being handled may be the
    store's or the log's); the revocation itself happens whatever they do,
    and when it fails the credential stays ``pending`` for ``sweep``.
    """
    provider = broker.config.providers[request.provider]
    fields = issued_fields(broker, manifest, decision, request, credential, session_id)
    event(LOG, "withheld", credential=request.name, fingerprint=fields["fingerprint"], why=why)
    steps = (
        lambda: broker.store.credential_minted(
            session_id,
            request.name,
            reference=credential.reference,
            scope=credential.scope,
            expires_at=credential.expires_at,
            fingerprint=fields["fingerprint"],
        ),
        lambda: broker.log.append("credential.issued", **fields, withheld=why),
    )
    for step in steps:  # each on its own: a store that refuses must not keep the log from saying so
        try:
            step()
        except (BrokerError, OSError) as exc:
            LOG.warning(
                "withheld credential not recorded",
                extra={
                    "broker_fields": {
                        "session": session_id,
                        "credential": request.name,
                        "fingerprint": fields["fingerprint"],
                        "error": cause_text(exc),
                    }
                },
            )
    record = CredentialRecord(
        session_id=session_id,
        name=request.name,
        provider=provider.name,
        type=provider.type_name,
        state=CredentialState.ACTIVE,
        reference=credential.reference,
        scope=credential.scope,
        expires_at=credential.expires_at,
        fingerprint=fields["fingerprint"],
    )
    return revoke_credential(
        broker,
        session_id,
        manifest.task,
        record,
        broker.clock(),
        reason="withheld",
        revoke_secret=credential.revoke_secret,
        best_effort=True,
    )
