"""The smallest provider there can be: the contract alone, no capability, its server a dict in this process.

It stands in for a newcomer's provider type: one module here, one entry in
the registry (the tests add it with ``monkeypatch``), nothing in ``broker/``.
A token is valid at ``SERVER`` from ``mint`` until ``revoke``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from broker.vocab.fields import Fields
from broker.vocab.manual import Key, ProviderManual
from broker.vocab.secret import Secret
from providers.base import (
    CredentialRequest,
    Grant,
    MintContext,
    MintedCredential,
    Provider,
    RevokeOutcome,
    RevokeTarget,
)

#: Token id -> "valid" or "revoked": what the provider's server knows.
SERVER: dict[str, str] = {}


@dataclass(frozen=True)
class MemoryRequest(CredentialRequest):
    label: str = ""

    def scope(self) -> dict[str, Any]:
        return {"label": self.label}


@dataclass(frozen=True)
class MemoryGrant(Grant[MemoryRequest]):
    labels: tuple[str, ...] = ()

    def check(self, request: MemoryRequest) -> list[str]:
        return [] if request.label in self.labels else [f"memory label {request.label!r} is not granted"]


class MemoryProvider(Provider[MemoryRequest]):
    type_name = "memory"

    @classmethod
    def manual(cls) -> ProviderManual:
        return ProviderManual(
            summary="Tokens held in the broker's own memory (tests).",
            config=(),
            manifest=(Key("label", "string", False, "memory: what the token is for."),),
            grant=(Key("labels", "list", False, "memory: the labels a token may carry."),),
            example='# [providers.memory]\n# type = "memory"',
        )

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> MemoryProvider:
        return cls(name)

    @classmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> MemoryRequest:
        label = fields.req_string("label", max_len=32)
        return MemoryRequest(name=name, provider=provider, ttl=ttl, label=label)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> MemoryGrant:
        labels = fields.string_list("labels", max_items=16, max_len=32) or ()
        return MemoryGrant(provider=provider, max_ttl=max_ttl, labels=tuple(labels))

    def mint(self, request: MemoryRequest, context: MintContext) -> MintedCredential:
        ident, token = secrets.token_hex(4), Secret("mem_" + secrets.token_hex(16))
        SERVER[ident] = "valid"
        return MintedCredential(
            reference={"id": ident},
            secret=token,
            files={"token": token},
            expires_at=min(datetime.now().astimezone() + timedelta(seconds=context.ttl), context.session_expires_at),
            scope=request.scope(),
        )

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        SERVER[target.reference["id"]] = "revoked"
        return RevokeOutcome.REVOKED
