"""Room to revoke what an issue is about to mint, held from before the first mint until the store knows it.

A credential whose revocation could not be carried out later must not be
minted: AWS deny-policy revocations share the role's 10,240 inline-policy
characters, so an issue that would not fit is denied now (exit 3, a
``session.denied`` record), before anything exists at a provider. Each
provider with a budget decides (``providers.capabilities.Reserving``) from the live credentials the store
knows; ``issue`` keeps the reservation until the store has the credentials
of the providers that reserved (``Reservation.release``), and no longer: the
rest of the issue (other providers, files, log records, delivering the
document) must not keep every other issue on the same role waiting. The
providers are told what they will be told at the mint: the issue's
``MintContext`` of each credential, made once. ``log_denial`` writes the
``session.denied`` record, for a policy's denial and a provider's alike.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from broker.core.broker import Broker
from broker.core.credential.mint import Minting
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import Decision
from broker.core.warming import sdk_ready
from broker.telemetry.labels import OTHER
from broker.vocab.errors import PolicyDenied
from providers.base import CredentialRequest, MintContext, RevokeTarget
from providers.capabilities import Reserving


class Reservation:
    """The providers holding room for this issue; ``release`` ends every hold (once, from the issuing thread)."""

    def __init__(self, stack: contextlib.ExitStack, providers: frozenset[str]) -> None:
        self._stack = stack
        self.providers = providers

    def release(self) -> None:
        self._stack.close()


@contextlib.contextmanager
def reserved(minting: Minting, contexts: Mapping[str, MintContext], now: datetime) -> Iterator[Reservation]:
    """Every provider's room for this session's revocations; PolicyDenied (logged) when one has none."""
    broker = minting.broker
    wanted: dict[str, list[tuple[CredentialRequest, MintContext]]] = {}
    for request in minting.manifest.credentials:
        wanted.setdefault(request.provider, []).append((request, contexts[request.name]))
    holding: set[str] = set()
    with contextlib.ExitStack() as stack:
        for name in sorted(wanted):
            provider = broker.config.providers[name]
            if not isinstance(provider, Reserving):
                continue
            sdk_ready(provider)  # a warm-up importing its SDK finishes first: no two threads import it at once
            try:
                hold = provider.reserve(wanted[name], functools.partial(_live, broker, name, now), now)
                if hold is not None:  # None: no room needed
                    holding.add(name)
                    stack.enter_context(hold)
            except PolicyDenied as exc:
                log_denial(broker, minting.manifest, minting.decision, exc.reasons or (exc.message,))
                raise
        yield Reservation(stack, frozenset(holding))


def log_denial(broker: Broker, manifest: Manifest, decision: Decision, reasons: Sequence[str]) -> None:
    """The ``session.denied`` record: the policy said no, or a provider has no room to revoke."""
    broker.log.append(
        "session.denied",
        session=None,
        task=manifest.task,
        requester=str(broker.requester),
        credentials=[c.to_json() for c in decision.credentials],
        reasons=list(reasons),
    )
    metrics = broker.metrics
    if metrics is not None:  # each credential of a denied issue, under its provider (a name not configured: other)
        for credential in decision.credentials:
            metrics.denied(credential.provider if credential.provider in broker.config.providers else OTHER)


def _live(broker: Broker, provider: str, now: datetime) -> list[RevokeTarget]:
    """The provider's unexpired credentials as the store knows them right now."""
    return [RevokeTarget(c.name, c.reference, c.expires_at) for c in broker.store.live_credentials(provider, now)]
