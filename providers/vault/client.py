"""The broker's own session with one Vault: its login, its client, and the token calls every kind makes.

``VaultSession`` logs in once (a token file, AppRole, or a token of the
broker's own issuer: ``providers.vault.jwt``), keeps the client
and its kept-alive connections for as long as the provider lives, renews an
AppRole or jwt login for a long-lived broker, and makes the calls both the session
tokens and the dynamic secrets' lease holders need: create an orphan
(through ``token_role``, an ``orphan=true`` role, or ``create-orphan``: a
child would inherit the broker's entity), look up and revoke by accessor,
act as another token on the same connections. ``errors`` turns hvac's and
requests' exceptions into ``ProviderError`` without secrets. ``hvac`` is
imported on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.secret import Secret, read_secret_file
from providers.vault.jwt import JwtLogin, login
from providers.warm import with_connection

if TYPE_CHECKING:
    import hvac

    from providers.capabilities import TokenIssuer


class VaultSession:
    """One login at one Vault (``addr``, ``namespace``), shared by every call the provider makes."""

    def __init__(
        self,
        name: str,
        *,
        addr: str,
        token_file: Path | None,
        approle: tuple[Path, Path] | None,
        approle_mount: str,
        namespace: str | None,
        token_role: str | None,
        timeout: int,
        jwt: JwtLogin | None = None,
    ) -> None:
        self.name = name
        self.addr = addr.rstrip("/")
        self.token_file = token_file
        self.approle = approle
        self.approle_mount = approle_mount
        self.namespace = namespace
        self.token_role = token_role
        self.timeout = timeout
        self.jwt = jwt  # auth = "jwt": a login with a token of the broker's issuer (``issuer``, handed over)
        self.issuer: TokenIssuer | None = None
        self._client: hvac.Client | None = None
        self._lock = threading.Lock()

    def client(self) -> hvac.Client:
        """The authenticated client of the broker's own identity (created once)."""
        with self._lock:
            if self._client is None:
                self._client = self._login()
            return self._client

    def warm_up(self) -> None:
        """The client logged in, with a kept-alive connection to Vault (published once connected)."""
        with self._lock:
            if self._client is None:
                self._client = with_connection(self._login(), self.addr)

    def _login(self) -> hvac.Client:
        import hvac

        client = hvac.Client(url=self.addr, namespace=self.namespace, timeout=self.timeout)
        if self.token_file is not None:
            token = read_secret_file(self.token_file, f"providers.{self.name}.token_file")
            client.token = token.reveal()
            return client
        if self.jwt is not None:
            login(client, self.name, self.jwt, self.issuer)
            return client
        assert self.approle is not None
        role_id = read_secret_file(self.approle[0], f"providers.{self.name}.approle_role_id_file")
        secret_id = read_secret_file(self.approle[1], f"providers.{self.name}.approle_secret_id_file")
        with self.errors("AppRole login"):
            client.auth.approle.login(
                role_id=role_id.reveal(), secret_id=secret_id.reveal(), mount_point=self.approle_mount
            )
        return client

    def refresh(self, within: int) -> None:
        """Renew the AppRole or jwt login while Vault lets it live long enough; otherwise log in again on next use."""
        with self._lock:
            client = self._client
        if client is None or (self.approle is None and self.jwt is None):  # a token_file token is the operator's
            return
        try:
            left = int(client.auth.token.renew_self()["auth"]["lease_duration"])
        except Exception:  # expired, not renewable, Vault unreachable: the next call logs in again
            left = 0
        if left < within:
            with self._lock:
                if self._client is client:
                    self._client = None
            client.adapter.close()  # type: ignore[union-attr]  # checked above; the lock hides it from mypy

    def create_orphan(
        self,
        *,
        policies: tuple[str, ...],
        meta: Mapping[str, str],
        ttl_seconds: int,
        display_name: str,
        num_uses: int = 0,
        default_policy: bool = False,
        action: str = "token create",
    ) -> tuple[Secret, str, dict[str, Any]]:
        """A service token with exactly ``policies`` (and the default policy only if asked), not renewable,
        dead after ``ttl_seconds``: its secret, its accessor and Vault's whole ``auth`` answer."""
        client = self.client()
        ttl = f"{ttl_seconds}s"
        # A child token inherits the broker's entity; an orphan does not (the role must be orphan=true).
        create = client.auth.token.create if self.token_role else client.auth.token.create_orphan
        with self.errors(action):
            response = create(
                role_name=self.token_role,
                policies=list(policies),
                meta=dict(meta),
                no_default_policy=not default_policy,
                renewable=False,
                ttl=ttl,
                explicit_max_ttl=ttl,
                display_name=display_name[:100],
                num_uses=num_uses,
                type="service",
            )
        auth: dict[str, Any] = response.get("auth") or {}
        token, accessor = Secret(str(auth.get("client_token", ""))), str(auth.get("accessor", ""))
        if not accessor or not len(token):
            raise ProviderError(f"vault {self.name}: {action} returned no token or accessor")
        return token, accessor, auth

    def revoke_accessor(self, accessor: str) -> None:
        """Revoke the token with this accessor; one already gone counts as revoked."""
        import hvac.exceptions

        client = self.client()
        try:
            with self.errors("revoke-accessor"):
                # 204 when revoked, 200 with a warning when it was already gone: both mean gone.
                client.auth.token.revoke_accessor(accessor)
        except ProviderError as exc:
            if isinstance(exc.__cause__, hvac.exceptions.InvalidRequest) and "invalid accessor" in str(exc):
                return
            raise

    def lookup_accessor(self, accessor: str) -> dict[str, Any] | None:
        """The token's non-secret facts, or None when it no longer exists."""
        import hvac.exceptions

        client = self.client()
        try:
            with self.errors("lookup-accessor"):
                data = client.auth.token.lookup_accessor(accessor)
        except ProviderError as exc:
            if isinstance(exc.__cause__, hvac.exceptions.InvalidRequest | hvac.exceptions.Forbidden):
                return None
            raise
        result: dict[str, Any] = data.get("data") or {}
        return result

    def acting_as(self, token: Secret) -> hvac.Client:
        """A client acting as ``token`` (a lease holder), on the broker's own connection pool."""
        import hvac

        base = self.client()
        return hvac.Client(
            url=self.addr,
            token=token.reveal(),
            namespace=self.namespace,
            timeout=self.timeout,
            session=base.adapter.session,
        )

    def errors(self, action: str) -> VaultErrors:
        """Around one call: hvac's and requests' exceptions come out as ``ProviderError`` naming ``action``."""
        return VaultErrors(self.name, self.addr, action)

    def close(self) -> None:
        if self._client is not None:
            self._client.adapter.close()
            self._client = None


class VaultErrors:
    """Turns hvac and requests errors into ``ProviderError`` without secrets."""

    def __init__(self, name: str, addr: str, action: str) -> None:
        self.name = name
        self.addr = addr
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, ProviderError | ConfigError):
            return
        import hvac.exceptions
        import requests

        prefix = f"vault {self.name}: {self.action} failed"
        if isinstance(exc, hvac.exceptions.VaultError):
            errors = "; ".join(str(e) for e in (exc.errors or []))[:300] or type(exc).__name__
            raise ProviderError(f"{prefix}: {errors}") from exc
        if isinstance(exc, requests.exceptions.RequestException):
            raise ProviderError(f"{prefix}: cannot reach {self.addr} ({type(exc).__name__})") from exc
