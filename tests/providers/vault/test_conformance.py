"""The Vault provider (token kind) keeps the provider contract against a real OpenBao dev server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields
from devstack.openbao import ROOT_TOKEN, TOKEN_ROLE, OpenBao
from providers.vault.provider import VaultProvider
from tests.providers.conformance import ProviderConformance, Subject, parse_request


class TestVaultConformance(ProviderConformance):
    @pytest.fixture
    def subject(self, openbao: OpenBao, tmp_path: Path) -> Iterator[Subject]:
        token = tmp_path / "vault-token"
        token.write_text(ROOT_TOKEN)
        token.chmod(0o600)
        table = {"type": "vault", "addr": openbao.addr, "token_file": str(token), "token_role": TOKEN_ROLE}
        fields = Fields(table, "providers.vault", ConfigError)
        fields.raw("type")
        provider = VaultProvider.from_config("vault", fields, tmp_path)
        fields.done()
        request = parse_request(VaultProvider, {"policies": ["ci-read"], "num_uses": 5})
        try:
            yield Subject(
                provider,
                request,
                works=lambda c: openbao.accessor_exists(c.reference["accessor"]),
                gone=lambda c: not openbao.accessor_exists(c.reference["accessor"]),
            )
        finally:
            provider.close()
