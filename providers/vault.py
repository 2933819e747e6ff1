"""Vault / OpenBao tokens: one token per credential with exactly the requested policies.

The broker authenticates with a token file or AppRole, mints orphans through
``token_role`` (an ``orphan=true`` role) or ``auth/token/create-orphan``, sets
``ttl`` and ``explicit_max_ttl`` to the capped TTL, ``num_uses``, metadata
naming the task and session, and revokes by accessor. A child token would
inherit the broker's entity, and with it every identity-group policy of the
broker's login, so after each mint the broker looks the token up and revokes
it unless it is an orphan with no entity, no identity policies and exactly
the requested policies. ``hvac`` is imported on first use. The dynamic-secret
kinds (``database``, ``pki``, ``ssh``) are parsed and granted in
``providers.vault_dynamic`` and minted in ``providers.vault_leases`` (``kind: secret``, a KV field for the
proxy alone: ``providers.vault_secret``); manifest entries, grants and engine keys: ``providers.vault_request``.
"""

from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from broker.vocab.errors import BrokerError, ConfigError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.files import read_secret_file
from providers.base import (
    FIX_MARK,
    CredentialRequest,
    Grant,
    HealthCheck,
    MintContext,
    MintedCredential,
    MintRejected,
    Provider,
    RevokeOutcome,
    RevokeTarget,
    clock_check,
)
from providers.urls import is_loopback_host
from providers.vault_dynamic import DynamicRequest
from providers.vault_identity import entity_check, minted_problems
from providers.vault_leases import DYNAMIC_KINDS, mint_dynamic, revoke_dynamic
from providers.vault_request import (
    POLICY_NAME,
    AnyVaultRequest,
    VaultGrant,
    VaultRequest,
    compile_vault_grant,
    dynamic_config,
    parse_vault_request,
)
from providers.warm import with_connection

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import hvac

ADDR = re.compile(r"https?://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?/?")
_UNSEEN = "it cannot be looked up (the broker needs update on auth/token/lookup-accessor)"


class VaultProvider(Provider[AnyVaultRequest]):
    type_name = "vault"
    can_find_minted = True
    sdk_modules = ("requests", "hvac", "hvac.exceptions", "hvac.adapters")

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
        mounts: Mapping[str, str] | None = None,
        dynamic_policies: tuple[str, ...] = (),
        database_hints: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(name)
        self.addr = addr.rstrip("/")
        self.token_file = token_file
        self.approle = approle
        self.approle_mount = approle_mount
        self.namespace = namespace
        self.token_role = token_role
        self.timeout = timeout
        self.mounts = {kind: kind for kind in DYNAMIC_KINDS} | dict(mounts or {})
        self.dynamic_policies = dynamic_policies
        self.database_hints = dict(database_hints or {})
        self._client: hvac.Client | None = None
        self._lock = threading.Lock()

    # -- configuration -------------------------------------------------------------------

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> VaultProvider:
        addr = fields.req_string("addr", pattern=ADDR, hint="https://host[:port]")
        if not addr.startswith("https://") and not is_loopback_host(urlsplit(addr).hostname or ""):
            raise fields.fail("addr", "must use https:// (plain http only for 127.0.0.0/8, ::1 or localhost)")
        token_file = fields.string("token_file", required=False, max_len=4096)
        role_id = fields.string("approle_role_id_file", required=False, max_len=4096)
        secret_id = fields.string("approle_secret_id_file", required=False, max_len=4096)
        if (token_file is None) == (role_id is None and secret_id is None):
            raise ConfigError(f"providers.{name}: set token_file, or approle_role_id_file and approle_secret_id_file")
        if (role_id is None) != (secret_id is None):
            raise ConfigError(f"providers.{name}: approle_role_id_file and approle_secret_id_file go together")
        approle = None
        if role_id is not None and secret_id is not None:
            approle = (config_dir / role_id, config_dir / secret_id)
        return cls(
            name,
            addr=addr,
            token_file=config_dir / token_file if token_file else None,
            approle=approle,
            approle_mount=fields.string("approle_mount", required=False, pattern=POLICY_NAME) or "approle",
            namespace=fields.string("namespace", required=False, pattern=POLICY_NAME),
            token_role=fields.string("token_role", required=False, pattern=POLICY_NAME),
            timeout=fields.integer("timeout", minimum=1, maximum=300) or 10,
            **dynamic_config(fields),
        )

    @classmethod
    def parse_request(
        cls, fields: Fields, *, name: str, provider: str, ttl: int | None
    ) -> VaultRequest | DynamicRequest:
        return parse_vault_request(fields, name=name, provider=provider, ttl=ttl)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> VaultGrant:
        return compile_vault_grant(fields, provider=provider, max_ttl=max_ttl)

    # -- provider calls ------------------------------------------------------------------

    def client(self) -> hvac.Client:
        """The authenticated client of the broker's own identity (created once)."""
        with self._lock:
            if self._client is None:
                self._client = self._login()
            return self._client

    def warm_up(self, minting: bool) -> None:
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
        assert self.approle is not None
        role_id = read_secret_file(self.approle[0], f"providers.{self.name}.approle_role_id_file")
        secret_id = read_secret_file(self.approle[1], f"providers.{self.name}.approle_secret_id_file")
        with self._errors("AppRole login"):
            client.auth.approle.login(
                role_id=role_id.reveal(), secret_id=secret_id.reveal(), mount_point=self.approle_mount
            )
        return client

    def refresh(self, within: int) -> None:
        """Renew the AppRole login while Vault lets it live long enough; otherwise log in again on next use."""
        with self._lock:
            client = self._client
        if client is None or self.approle is None:  # a token_file token is the operator's to keep alive
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

    def mint(self, request: AnyVaultRequest, context: MintContext) -> MintedCredential:
        from broker.vocab.secret import Secret

        if isinstance(request, DynamicRequest):
            return mint_dynamic(self, request, context)
        client = self.client()
        ttl = f"{context.ttl}s"
        # A child token inherits the broker's entity; an orphan does not (the role must be orphan=true).
        create = client.auth.token.create if self.token_role else client.auth.token.create_orphan
        with self._errors("token create"):
            response = create(
                role_name=self.token_role,
                policies=list(request.policies),
                meta={
                    "broker_session": context.session_id,
                    "broker_task": context.task,
                    "broker_credential": request.name,
                },
                no_default_policy=True,
                renewable=False,
                ttl=ttl,
                explicit_max_ttl=ttl,
                display_name=f"broker-{context.task}-{request.name}"[:100],
                num_uses=request.num_uses,
                type="service",
            )
        auth = response.get("auth") or {}
        token = Secret(str(auth.get("client_token", "")))
        accessor = str(auth.get("accessor", ""))
        if not accessor or not len(token):
            raise ProviderError(f"vault {self.name}: token create returned no token or accessor")
        lease = int(auth.get("lease_duration") or context.ttl)
        issued = datetime.now().astimezone()
        expires_at = min(issued + timedelta(seconds=min(lease, context.ttl)), context.session_expires_at)
        minted = MintedCredential(
            reference={"accessor": accessor},
            secret=token,
            files={"token": token},
            expires_at=expires_at,
            scope=request.scope(),
            env={"VAULT_ADDR": self.addr},
        )
        problems = self.minted_problems(accessor, request.policies)
        if problems:
            # The core logs its fingerprint and revokes it (or keeps it pending for sweep).
            raise MintRejected(
                f"vault {self.name}: refused the new session token (accessor {accessor}): {'; '.join(problems)}",
                minted,
            )
        return minted

    def minted_problems(self, accessor: str, policies: tuple[str, ...]) -> list[str]:
        """What is wrong with a new token, looked up by accessor: anything but exactly ``policies``, no entity."""
        try:
            facts = self.lookup_accessor(accessor)
        except ProviderError as exc:
            return [exc.message]
        return minted_problems(facts, policies) if facts is not None else [_UNSEEN]

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        if target.reference.get("kind") in DYNAMIC_KINDS:
            return revoke_dynamic(self, target, now)
        accessor = target.reference.get("accessor", "")
        if not accessor:
            raise ProviderError(f"vault {self.name}: no accessor recorded for {target.name}", retryable=False)
        self._revoke_accessor(accessor)
        if target.expires_at is not None and target.expires_at <= now:
            return RevokeOutcome.EXPIRED
        return RevokeOutcome.REVOKED

    def _revoke_accessor(self, accessor: str) -> None:
        import hvac.exceptions

        client = self.client()
        try:
            with self._errors("revoke-accessor"):
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
            with self._errors("lookup-accessor"):
                data = client.auth.token.lookup_accessor(accessor)
        except ProviderError as exc:
            if isinstance(exc.__cause__, hvac.exceptions.InvalidRequest | hvac.exceptions.Forbidden):
                return None
            raise
        result: dict[str, Any] = data.get("data") or {}
        return result

    def planned_reference(self, request: CredentialRequest, context: MintContext) -> dict[str, str]:
        """A dynamic secret's kind, so that a crash while minting is settled the way that kind needs."""
        return {"kind": request.kind} if isinstance(request, DynamicRequest) else {}

    def find_minted(self, session_id: str, credential: str, planned: Mapping[str, str]) -> list[dict[str, str]]:
        """Tokens carrying this session's metadata (needs ``list`` on ``auth/token/accessors``).

        Database and pki leases are found through their holder token. An SSH certificate leaves no
        trace in Vault; one may have been signed for a key that died with the broker: it is reported
        as such (valid until it expires, and useless without its key).
        """
        if planned.get("kind") in ("ssh", "secret"):  # a KV read leaves nothing at Vault to find
            return [{"kind": "ssh"}] if planned["kind"] == "ssh" else []
        client = self.client()
        with self._errors("list accessors"):
            response = client.adapter.list("/v1/auth/token/accessors")
        found = []
        for accessor in (response or {}).get("data", {}).get("keys", []):
            facts = self.lookup_accessor(accessor)
            meta = (facts or {}).get("meta") or {}
            if meta.get("broker_session") == session_id and meta.get("broker_credential") == credential:
                found.append({"accessor": accessor})
        return found

    def health(self) -> list[HealthCheck]:
        """Login and lookup-self, the capabilities issue and revoke need, entity inheritance, the clock; no mint."""
        import time

        from hvac.adapters import RawAdapter

        fix = f"{FIX_MARK}check addr and the broker's token or AppRole files in [providers.{self.name}]"
        try:
            client = self.client()
            with self._errors("token lookup-self"):
                raw = RawAdapter.request(client.adapter, "GET", "/v1/auth/token/lookup-self")
                received = time.time()
                data = raw.json().get("data") or {}
        except BrokerError as exc:
            return [("login", False, exc.message + fix)]
        ttl = int(data.get("ttl") or 0)
        policies = ", ".join(sorted(str(p) for p in data.get("policies") or [])) or "none"
        lifetime = f"expires in {ttl} s" if ttl else "no expiry"
        results: list[HealthCheck] = [("login", True, f"token valid at {self.addr} (policies {policies}; {lifetime})")]
        results.append(self._capabilities_check(client))
        results.append(self._entity_check(client, data))
        clock = clock_check(raw.headers.get("Date"), received, f"vault {self.addr}")
        return results + ([clock] if clock else [])

    def grant_health(self, grants: Sequence[Grant[AnyVaultRequest]]) -> list[HealthCheck]:
        """The capabilities the granted dynamic kinds need (``providers.vault_health``)."""
        from providers.vault_health import dynamic_checks

        return dynamic_checks(self, [grant.dynamic for grant in grants if isinstance(grant, VaultGrant)])

    def _capabilities_check(self, client: hvac.Client) -> HealthCheck:
        """Whether the broker's token may create session tokens, and look them up and revoke them by accessor."""
        create = f"auth/token/create/{self.token_role}" if self.token_role else "auth/token/create-orphan"
        needed = (create, "auth/token/lookup-accessor", "auth/token/revoke-accessor")
        try:
            with self._errors("capabilities-self"):
                answer = client.sys.get_capabilities(paths=[*needed, "auth/token/accessors"])
        except BrokerError as exc:
            return ("capabilities", False, exc.message)
        table = answer.get("data") if isinstance(answer.get("data"), dict) else answer
        caps = {path: set(table.get(path) or []) for path in (*needed, "auth/token/accessors")}
        missing = [path for path in needed if not caps[path] & {"update", "root"} or "deny" in caps[path]]
        if missing:
            return (
                "capabilities",
                False,
                f"the broker's token lacks update on {', '.join(missing)}{FIX_MARK}"
                "grant it in the broker's Vault policy (create and update on those paths)",
            )
        shown = "; ".join(f"{path}: {', '.join(sorted(caps[path]))}" for path in needed)
        if not caps["auth/token/accessors"] & {"list", "root"}:
            shown += " (no list on auth/token/accessors: sweep cannot find tokens a crash left unrecorded)"
        return ("capabilities", True, shown)

    def _entity_check(self, client: hvac.Client, self_facts: dict[str, Any]) -> HealthCheck:
        def read_role(role: str) -> dict[str, Any]:
            with self._errors("token role read"):
                answer: dict[str, Any] = client.auth.token.read_role(role).get("data") or {}
            return answer

        return entity_check(self_facts, self.token_role, read_role)

    def _errors(self, action: str) -> _VaultErrors:
        return _VaultErrors(self, action)

    def close(self) -> None:
        if self._client is not None:
            self._client.adapter.close()
            self._client = None


class _VaultErrors:
    """Turns hvac and requests errors into ``ProviderError`` without secrets."""

    def __init__(self, provider: VaultProvider, action: str) -> None:
        self.provider = provider
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, ProviderError | ConfigError):
            return
        import hvac.exceptions
        import requests

        prefix = f"vault {self.provider.name}: {self.action} failed"
        if isinstance(exc, hvac.exceptions.VaultError):
            errors = "; ".join(str(e) for e in (exc.errors or []))[:300] or type(exc).__name__
            raise ProviderError(f"{prefix}: {errors}") from exc
        if isinstance(exc, requests.exceptions.RequestException):
            raise ProviderError(f"{prefix}: cannot reach {self.provider.addr} ({type(exc).__name__})") from exc
