"""Where the operator's refresh token is kept, read before each refresh and written back when it rotates.

A 0600 file (``refresh_token_file``), read as every broker secret file is
(``read_secret_file``) and rewritten atomically by the one private-file
writer (a temporary beside it, fsynced, renamed over it: a reader sees the
old token or the new one, never a torn one), or a field of a KV v2 secret at
a ``vault`` instance of the config (``refresh_token_vault``), written back
with check-and-set on the version read, so an operator's new token written
meanwhile is never overwritten. Both are read and written under the
refresh's single flight (``providers.oauth.flight``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from broker.vocab.errors import ConfigError
from broker.vocab.files import shown_path, write_private_file
from broker.vocab.secret import Secret, read_secret_file
from providers.capabilities import KeepsSecrets, KeptSecret
from providers.oauth.settings import VaultPlace


class Keep(Protocol):
    #: Where the token is, as messages name it.
    where: str
    #: Whether brokers on other hosts read the same token (a file is one host's).
    shared: bool

    def read(self) -> KeptSecret: ...

    def write(self, value: Secret, version: int) -> bool: ...


class FileKeep:
    """``refresh_token_file``: the token alone (a trailing newline allowed), mode 0600."""

    shared = False

    def __init__(self, name: str, path: Path) -> None:
        self.path = path
        self.what = f"providers.{name}.refresh_token_file"
        self.where = shown_path(path)

    def read(self) -> KeptSecret:
        return KeptSecret(read_secret_file(self.path, self.what), 0)

    def write(self, value: Secret, version: int) -> bool:
        write_private_file(self.path.parent, self.path.name, value.reveal_bytes() + b"\n", mode=0o600, durable=True)
        return True


class VaultKeep:
    """``refresh_token_vault``, ``refresh_token_path``, ``refresh_token_field``: through the ``vault`` instance
    the config hands over (``UsesKeptSecrets``)."""

    shared = True

    def __init__(self, name: str, place: VaultPlace) -> None:
        self.name = name
        self.place = place
        self.where = str(place)
        self.keeper: KeepsSecrets | None = None

    def use(self, instances: Mapping[str, object]) -> None:
        keeper = instances.get(self.place.instance)
        if not isinstance(keeper, KeepsSecrets):
            raise ConfigError(
                f"providers.{self.name}.refresh_token_vault: {self.place.instance!r} is not a vault instance of"
                " this config"
            )
        self.keeper = keeper

    def _keeper(self) -> KeepsSecrets:
        if self.keeper is None:  # a provider built without its config (a test): nothing to read from
            raise ConfigError(f"providers.{self.name}.refresh_token_vault: no vault instance handed over")
        return self.keeper

    def read(self) -> KeptSecret:
        return self._keeper().read_kept(self.place.path, self.place.field)

    def write(self, value: Secret, version: int) -> bool:
        return self._keeper().write_kept(self.place.path, self.place.field, value, version)
