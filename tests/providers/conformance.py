"""The contract every provider keeps at the seam, run against each provider's real server.

A provider's tests subclass ``ProviderConformance`` and supply one fixture,
``subject``: the provider pointed at its server, a request it may mint, and
two questions asked at the provider itself, never of the provider object:
``works`` (the credential is honoured: OpenBao looks the token up, moto
answers GetCallerIdentity, the emulator knows the token as valid) and
``gone`` (the provider no longer honours it: the token is absent, the role's
deny policy hits the session, the emulator says revoked). Each test mints
through ``Provider.mint`` exactly as the core does, so the guarded seam is
what is under test, and mints only through the ``mint`` fixture, whose
finalizer revokes everything the test minted, whatever the test did: no
credential outlives its test at the server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any

import pytest

from broker.vocab.errors import BrokerError
from providers.base import CredentialRequest, MintContext, MintedCredential, Provider, RevokeOutcome, RevokeTarget
from providers.capabilities import FindsMinted

#: Outcomes a second revocation of the same credential may answer: it is already settled.
SETTLED = (RevokeOutcome.REVOKED, RevokeOutcome.EXPIRED)


@dataclass(frozen=True)
class Subject:
    provider: Provider[Any]
    request: CredentialRequest
    works: Callable[[MintedCredential], bool]
    gone: Callable[[MintedCredential], bool]


def context(session_id: str, ttl: int = 900) -> MintContext:
    return MintContext(
        session_id=session_id,
        task="fix-build-123",
        requester="ci",
        ttl=ttl,
        session_expires_at=datetime.now(UTC) + timedelta(seconds=1800),
        mount_dir=PurePosixPath("/run/secrets/conformance"),
    )


def target(request: CredentialRequest, credential: MintedCredential) -> RevokeTarget:
    return RevokeTarget(
        name=request.name,
        reference=dict(credential.reference),
        expires_at=credential.expires_at,
        revoke_secret=credential.revoke_secret,
    )


Mint = Callable[[MintContext], MintedCredential]


class ProviderConformance:
    """Mint, read back, revoke, confirm gone at the provider, revoke again, and recover from a crash."""

    @pytest.fixture
    def subject(self) -> Iterator[Subject]:
        raise NotImplementedError("a provider's conformance class supplies the subject fixture")

    @pytest.fixture
    def mint(self, subject: Subject, request: pytest.FixtureRequest) -> Mint:
        """Mints ``subject.request`` for a context; a finalizer revokes every credential minted so, at the end."""
        minted: list[MintedCredential] = []

        def revoke_all() -> None:
            failures = []
            for credential in minted:  # revoked already by the test or not: a revocation again settles it
                try:
                    subject.provider.revoke(target(subject.request, credential), datetime.now(UTC))
                except BrokerError as exc:
                    failures.append(exc.message)
            assert not failures, f"left minted at the provider: {failures}"

        request.addfinalizer(revoke_all)

        def mint(minting: MintContext) -> MintedCredential:
            credential = subject.provider.mint(subject.request, minting)
            minted.append(credential)
            return credential

        return mint

    @pytest.mark.server
    def test_mint_reads_back_at_the_provider(self, subject: Subject, mint: Mint) -> None:
        minted = mint(context("s-conform00001"))
        assert minted.reference and minted.files
        assert minted.expires_at > datetime.now(UTC)
        assert subject.works(minted)
        assert not subject.gone(minted)

    @pytest.mark.server
    def test_revoke_is_confirmed_at_the_provider(self, subject: Subject, mint: Mint) -> None:
        minted = mint(context("s-conform00002"))
        outcome = subject.provider.revoke(target(subject.request, minted), datetime.now(UTC))
        assert outcome is RevokeOutcome.REVOKED
        assert subject.gone(minted)

    @pytest.mark.server
    def test_revoking_again_is_idempotent(self, subject: Subject, mint: Mint) -> None:
        minted = mint(context("s-conform00003"))
        revoke = target(subject.request, minted)
        assert subject.provider.revoke(revoke, datetime.now(UTC)) is RevokeOutcome.REVOKED
        assert subject.provider.revoke(revoke, datetime.now(UTC)) in SETTLED
        assert subject.gone(minted)

    @pytest.mark.server
    def test_a_crash_between_mint_and_record_is_found_or_settled(self, subject: Subject, mint: Mint) -> None:
        """The broker stored only the planned reference, then died: the credential must not outlive the session.

        A provider either finds it (``FindsMinted``; revoking what it found
        ends it), or says how long it can live at most, so the core waits that out.
        """
        provider, request = subject.provider, subject.request
        finds = provider if isinstance(provider, FindsMinted) else None
        minting = context("s-conform00004")
        planned = finds.planned_reference(request, minting) if finds is not None else {}
        minted = mint(minting)  # ... and the broker never recorded the answer
        found = finds.find_minted(minting.session_id, request.name, planned) if finds is not None else []
        if (finds is not None and finds.search_is_exhaustive) or found:
            assert found, "a provider that can search must find what it minted"
            for reference in found:
                revoke = RevokeTarget(name=request.name, reference=reference, expires_at=None)
                assert provider.revoke(revoke, datetime.now(UTC)) is RevokeOutcome.REVOKED
            assert subject.gone(minted)
        else:
            assert provider.fixed_lifetime is not None, "a provider that cannot search must bound the lifetime"
            assert minted.expires_at <= datetime.now(UTC) + timedelta(seconds=provider.fixed_lifetime)
        if finds is not None:  # another session's plan finds nothing of this one
            assert finds.find_minted("s-conform09999", request.name, planned) == []


def parse_request(provider: type[Provider[Any]], body: dict[str, Any], name: str = "conformance") -> CredentialRequest:
    """One manifest credential parsed the way ``broker.core.inputs.manifest`` does (generic keys read first)."""
    from broker.vocab.errors import ManifestError
    from broker.vocab.fields import Fields

    fields = Fields({"name": name, "provider": provider.type_name, **body}, "credentials[0]", ManifestError)
    for key in ("name", "provider"):
        fields.raw(key)
    request: CredentialRequest = provider.parse_request(fields, name=name, provider=provider.type_name, ttl=None)
    fields.done()
    return request
