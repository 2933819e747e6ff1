"""The roles the AWS provider assumes, as IAM describes them (``GetRole``).

A reservation reads each role it holds room on; the mint it guards uses that
answer rather than asking again (``remembered``), until the reservation is
released (``forget``). Every read checks that the role in the broker's
account is the one the request named (its ARN).
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from broker.vocab.errors import ProviderError
from providers.aws.clients import AwsClients


class Roles:
    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients
        self._lock = threading.Lock()
        #: GetRole answers read by a reservation still held, by role name.
        self._reserved: dict[str, dict[str, Any]] = {}

    def read(self, role_name: str, role_arn: str) -> dict[str, Any]:
        """``GetRole``; a ``ProviderError`` when the role of that name is not ``role_arn``."""
        with self.clients.errors("GetRole"):
            role: dict[str, Any] = self.clients.client("iam").get_role(RoleName=role_name)["Role"]
        if role.get("Arn") != role_arn:
            raise ProviderError(
                f"aws {self.clients.name}: role {role_name} in the broker's account is {role.get('Arn')},"
                f" not {role_arn}",
                retryable=False,
            )
        return role

    def remembered(self, role_name: str, role_arn: str) -> dict[str, Any]:
        """The answer a held reservation read, or a fresh ``read``."""
        with self._lock:
            role = self._reserved.get(role_name)
        if role is None or role.get("Arn") != role_arn:
            role = self.read(role_name, role_arn)
        return role

    def remember(self, role_name: str, role: dict[str, Any]) -> None:
        """Keep a reservation's GetRole answer for the mint it guards (held under the role's lock)."""
        with self._lock:
            self._reserved[role_name] = role

    def forget(self, role_names: Collection[str]) -> None:
        """The reservation is released: the next mint of these roles reads them again."""
        with self._lock:
            for role_name in role_names:
                self._reserved.pop(role_name, None)
