"""Vault / OpenBao tokens: one token per credential with exactly the requested policies.

The broker authenticates with a token file or AppRole, mints orphans through
``token_role`` (an ``orphan=true`` role) or ``auth/token/create-orphan``, sets
``ttl`` and ``explicit_max_ttl`` to the capped TTL, ``num_uses``, metadata
naming the task and session, and revokes by accessor. A child token would
inherit the broker's entity, and with it every identity-group policy of the
broker's login, so after each mint the broker looks the token up and revokes
it unless it is an orphan with no entity, no identity policies and exactly
the requested policies. The provider holds two collaborators: ``vault``, the
broker's own session (``providers.vault.client``: login, token calls,
errors), and ``engines``, the dynamic-secret kinds (``database``, ``pki``,
``ssh``; minted in ``providers.vault.leases``, parsed and granted in
``providers.vault.dynamic``) and ``secret``, a KV v2 field that only the
egress proxy holds (``providers.vault.secret``). Manifest entries, grants and the engine keys
are parsed in ``providers.vault.request``; ``hvac`` is imported on first use.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError, ConfigError, ProviderError
from broker.vocab.fields import Fields
from broker.vocab.secret import Secret
from providers.base import (
    CredentialRequest,
    Grant,
    MintContext,
    MintedCredential,
    MintRejected,
    Provider,
    ProxyFacts,
    RevokeOutcome,
    RevokeTarget,
)
from providers.capabilities import KeptSecret, TokenIssuer, TransitKey
from providers.clock import clock_check
from providers.placeholders import token_placeholders, token_secret
from providers.urls import is_loopback_host
from providers.vault import transit
from providers.vault.client import VaultSession
from providers.vault.dynamic import DYNAMIC_KINDS, DynamicRequest
from providers.vault.health import dynamic_checks
from providers.vault.identity import entity_check, minted_problems
from providers.vault.jwt import JwtLogin, jwt_checks
from providers.vault.kept import read_kept, write_kept
from providers.vault.leases import Engines
from providers.vault.narrowing import vault_narrower
from providers.vault.request import (
    POLICY_NAME,
    AnyVaultRequest,
    VaultGrant,
    compile_vault_grant,
    dynamic_config,
    parse_vault_request,
)
from providers.vault.secret import SecretRequest, current_version
from providers.warm import Sdk

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import hvac


AUTH_METHODS = ("token", "approle", "jwt")
ADDR = re.compile(r"https?://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?/?")
_UNSEEN = "it cannot be looked up (the broker needs update on auth/token/lookup-accessor)"


class VaultProvider(Provider[AnyVaultRequest]):
    """Capabilities: ``Warming``, ``FindsMinted`` (a search of token metadata), ``ChecksGrants``, ``Refreshing``,
    ``Narrowing`` (what a delegated session may ask of a parent's credential), ``VersionedSecrets`` (``kind:
    secret``), ``Placeholding`` (a token's or a ``kind: secret``'s placeholder in its files), ``KeepsSecrets``
    (a KV field another instance reads and writes back: an OAuth refresh token)."""

    type_name = "vault"
    narrower = staticmethod(vault_narrower)
    placeholders = staticmethod(token_placeholders)
    proxy_secret = staticmethod(token_secret)
    proxy = ProxyFacts(
        "Vault",
        "vault token",
        token_headers=("x-vault-token",),
        address_env="VAULT_ADDR",
        # Response wrapping: a wrapping token unwraps anywhere, outside the sandbox too, to what it wraps.
        stripped_headers=("x-vault-wrap-ttl", "x-vault-wrap-format"),
        refused_answer_key="wrap_info",
        refused_answer_name="wrapping token",
    )
    # libpq reads its password from the PG ones: a manifest must not point it elsewhere (the broker sets PGPASSFILE).
    reserved_env = frozenset({"VAULT_ADDR", "PGPASSFILE", "PGPASSWORD", "PGSERVICEFILE", "GIT_SSH_COMMAND"})
    ca_env = ("VAULT_CACERT",)
    search_is_exhaustive = True
    warm_first = False
    sdk = Sdk(("requests", "hvac", "hvac.exceptions", "hvac.adapters"))

    def __init__(self, vault: VaultSession, engines: Engines | None = None) -> None:
        """The instance named by its session (``vault.name``), with the dynamic-secret engines at their
        default mounts unless ``engines`` says otherwise."""
        super().__init__(vault.name)
        self.vault = vault
        self.engines = engines or Engines.configured(vault)

    # -- configuration -------------------------------------------------------------------

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> VaultProvider:
        addr = fields.req_string("addr", pattern=ADDR, hint="https://host[:port]")
        if not addr.startswith("https://") and not is_loopback_host(urlsplit(addr).hostname or ""):
            raise fields.fail("addr", "must use https:// (plain http only for 127.0.0.0/8, ::1 or localhost)")
        token_file = fields.string("token_file", required=False, max_len=4096)
        role_id = fields.string("approle_role_id_file", required=False, max_len=4096)
        secret_id = fields.string("approle_secret_id_file", required=False, max_len=4096)
        jwt = _jwt_login(fields, name, given=(token_file, role_id, secret_id))
        if jwt is None and (token_file is None) == (role_id is None and secret_id is None):
            raise ConfigError(
                f"providers.{name}: set token_file, or approle_role_id_file and approle_secret_id_file,"
                ' or auth = "jwt" with jwt_role'
            )
        if (role_id is None) != (secret_id is None):
            raise ConfigError(f"providers.{name}: approle_role_id_file and approle_secret_id_file go together")
        approle = None
        if role_id is not None and secret_id is not None:
            approle = (config_dir / role_id, config_dir / secret_id)
        vault = VaultSession(
            name,
            addr=addr,
            token_file=config_dir / token_file if token_file else None,
            approle=approle,
            approle_mount=fields.string("approle_mount", required=False, pattern=POLICY_NAME) or "approle",
            namespace=fields.string("namespace", required=False, pattern=POLICY_NAME),
            token_role=fields.string("token_role", required=False, pattern=POLICY_NAME),
            timeout=fields.integer("timeout", minimum=1, maximum=300) or 10,
            jwt=jwt,
        )
        return cls(vault, Engines.configured(vault, **dynamic_config(fields)))

    @classmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> AnyVaultRequest:
        return parse_vault_request(fields, name=name, provider=provider, ttl=ttl)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> VaultGrant:
        return compile_vault_grant(fields, provider=provider, max_ttl=max_ttl)

    # -- the broker's issuer: a jwt login, the issuer's key in transit ----------------------

    @property
    def issuer_needed(self) -> str | None:
        """``auth = "jwt"`` logs in with a token of the broker's issuer (``UsesIssuer``)."""
        return "auth" if self.vault.jwt is not None else None

    def use_issuer(self, issuer: TokenIssuer) -> None:
        self.vault.issuer = issuer

    def transit_key(self, mount: str, name: str) -> TransitKey:
        return transit.read_key(self.vault, mount, name)

    def transit_sign(self, mount: str, name: str, version: int, data: bytes, *, rsa: bool) -> bytes:
        return transit.sign(self.vault, mount, name, version, data, rsa=rsa)

    def transit_rotate(self, mount: str, name: str) -> None:
        transit.rotate(self.vault, mount, name)

    # -- provider calls ------------------------------------------------------------------

    def preload(self, minting: bool) -> None:
        self.sdk.load(minting)

    def warm_up(self, minting: bool) -> None:
        self.vault.warm_up()

    def refresh(self, within: int) -> None:
        self.vault.refresh(within)

    def mint(self, request: AnyVaultRequest, context: MintContext) -> MintedCredential:
        if isinstance(request, DynamicRequest):
            return self.engines.mint(request, context)
        token, accessor, auth = self.vault.create_orphan(
            policies=request.policies,
            meta={"broker_session": context.session_id, "broker_task": context.task, "broker_credential": request.name},
            ttl_seconds=context.ttl,
            display_name=f"broker-{context.task}-{request.name}",
            num_uses=request.num_uses,
        )
        lease = int(auth.get("lease_duration") or context.ttl)
        issued = datetime.now().astimezone()
        expires_at = min(issued + timedelta(seconds=min(lease, context.ttl)), context.session_expires_at)
        minted = MintedCredential(
            reference={"accessor": accessor},
            secret=token,
            files={"token": token},
            expires_at=expires_at,
            scope=request.scope(),
            env={"VAULT_ADDR": self.vault.addr},
        )
        problems = self.minted_problems(accessor, request.policies)
        if problems:
            # The core logs its fingerprint and revokes it (or keeps it pending for sweep).
            raise MintRejected(
                f"vault {self.name}: refused the new session token (accessor {accessor}): {'; '.join(problems)}",
                minted,
            )
        return minted

    def read_kept(self, path: str, field: str) -> KeptSecret:
        return read_kept(self.engines, path, field)

    def write_kept(self, path: str, field: str, value: Secret, version: int) -> bool:
        return write_kept(self.engines, path, field, value, version)

    def version_of(self, reference: Mapping[str, str]) -> str | None:
        """The KV version a ``kind: secret`` was read at (``VersionedSecrets``); None for the kinds that expire."""
        return reference.get("version") or None if reference.get("kind") == "secret" else None

    def current_version(self, request: AnyVaultRequest) -> str:
        """A ``kind: secret``'s current KV version (its metadata: no value is read)."""
        if not isinstance(request, SecretRequest):
            raise ProviderError(f"vault {self.name}: only kind: secret has versions", retryable=False)
        return current_version(self.engines, request)

    def minted_problems(self, accessor: str, policies: tuple[str, ...]) -> list[str]:
        """What is wrong with a new token, looked up by accessor: anything but exactly ``policies``, no entity."""
        try:
            facts = self.vault.lookup_accessor(accessor)
        except ProviderError as exc:
            return [exc.message]
        return minted_problems(facts, policies) if facts is not None else [_UNSEEN]

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        if target.reference.get("kind") in DYNAMIC_KINDS:
            return self.engines.revoke(target, now)
        accessor = target.reference.get("accessor", "")
        if not accessor:
            raise ProviderError(f"vault {self.name}: no accessor recorded for {target.name}", retryable=False)
        self.vault.revoke_accessor(accessor)
        if target.expires_at is not None and target.expires_at <= now:
            return RevokeOutcome.EXPIRED
        return RevokeOutcome.REVOKED

    def planned_reference(self, request: CredentialRequest, context: MintContext) -> dict[str, str]:
        """A dynamic secret's kind, so that a crash while minting is settled the way that kind needs."""
        return {"kind": request.kind} if isinstance(request, DynamicRequest) else {}

    def find_minted(self, session_id: str, credential: str, planned: Mapping[str, str]) -> list[dict[str, str]]:
        """Tokens carrying this session's metadata (needs ``list`` on ``auth/token/accessors``).

        Database and pki leases are found through their holder token. An SSH certificate leaves no
        trace in Vault; one may have been signed for a key that died with the broker: it is reported
        as such (valid until it expires, and useless without its key).
        """
        if planned.get("kind") == "ssh":
            return [{"kind": "ssh"}]
        if planned.get("kind") == "secret":
            return []  # a KV read leaves nothing at Vault
        client = self.vault.client()
        with self.vault.errors("list accessors"):
            response = client.adapter.list("/v1/auth/token/accessors")
        found = []
        for accessor in (response or {}).get("data", {}).get("keys", []):
            facts = self.vault.lookup_accessor(accessor)
            meta = (facts or {}).get("meta") or {}
            if meta.get("broker_session") == session_id and meta.get("broker_credential") == credential:
                found.append({"accessor": accessor})
        return found

    def health(self) -> list[Check]:
        """Login and lookup-self, the capabilities issue and revoke need, entity inheritance, the clock; no mint."""
        from hvac.adapters import RawAdapter

        fix = f"check addr and the broker's token or AppRole files in [providers.{self.name}]"
        jwt = self.vault.jwt
        if jwt is not None:
            fix = (
                f"check jwt_role in [providers.{self.name}], and that auth/{jwt.mount} verifies with the broker's"
                " keys (broker identity jwks) and is bound to its issuer"
            )
        try:
            client = self.vault.client()
            with self.vault.errors("token lookup-self"):
                raw = RawAdapter.request(client.adapter, "GET", "/v1/auth/token/lookup-self")
                received = time.time()
                data = raw.json().get("data") or {}
        except BrokerError as exc:
            return [Check("login", False, exc.message, fix)]
        ttl = int(data.get("ttl") or 0)
        policies = ", ".join(sorted(str(p) for p in data.get("policies") or [])) or "none"
        lifetime = f"expires in {ttl} s" if ttl else "no expiry"
        results = [Check("login", True, f"token valid at {self.vault.addr} (policies {policies}; {lifetime})")]
        results.append(self._capabilities_check(client))
        results.append(self._entity_check(client, data))
        if jwt is not None and self.vault.issuer is not None:  # the login above was the test login
            results += jwt_checks(client, self.name, jwt, self.vault.issuer, self.vault.timeout)
        clock = clock_check(raw.headers.get("Date"), received, f"vault {self.vault.addr}")
        return results + ([clock] if clock else [])

    def grant_health(self, grants: Sequence[Grant[AnyVaultRequest]]) -> list[Check]:
        """The capabilities the granted dynamic kinds need (``providers.vault.health``)."""
        return dynamic_checks(self.engines, [grant.dynamic for grant in grants if isinstance(grant, VaultGrant)])

    def _capabilities_check(self, client: hvac.Client) -> Check:
        """Whether the broker's token may create session tokens, and look them up and revoke them by accessor."""
        token_role = self.vault.token_role
        create = f"auth/token/create/{token_role}" if token_role else "auth/token/create-orphan"
        needed = (create, "auth/token/lookup-accessor", "auth/token/revoke-accessor")
        try:
            with self.vault.errors("capabilities-self"):
                answer = client.sys.get_capabilities(paths=[*needed, "auth/token/accessors"])
        except BrokerError as exc:
            return Check("capabilities", False, exc.message)
        table = answer.get("data") if isinstance(answer.get("data"), dict) else answer
        caps = {path: set(table.get(path) or []) for path in (*needed, "auth/token/accessors")}
        missing = [path for path in needed if not caps[path] & {"update", "root"} or "deny" in caps[path]]
        if missing:
            return Check(
                "capabilities",
                False,
                f"the broker's token lacks update on {', '.join(missing)}",
                "grant it in the broker's Vault policy (create and update on those paths)",
            )
        shown = "; ".join(f"{path}: {', '.join(sorted(caps[path]))}" for path in needed)
        if not caps["auth/token/accessors"] & {"list", "root"}:
            shown += " (no list on auth/token/accessors: sweep cannot find tokens a crash left unrecorded)"
        return Check("capabilities", True, shown)

    def _entity_check(self, client: hvac.Client, self_facts: dict[str, Any]) -> Check:
        def read_role(role: str) -> dict[str, Any]:
            with self.vault.errors("token role read"):
                answer: dict[str, Any] = client.auth.token.read_role(role).get("data") or {}
            return answer

        return entity_check(self_facts, self.vault.token_role, read_role)

    def close(self) -> None:
        self.vault.close()


def _jwt_login(fields: Fields, name: str, *, given: tuple[str | None, ...]) -> JwtLogin | None:
    """``auth = "jwt"`` with ``jwt_role`` (``jwt_mount``, ``jwt_audience``); None for a token file or AppRole."""
    auth = fields.string("auth", required=False, max_len=16)
    if auth is not None and auth not in AUTH_METHODS:
        raise fields.fail("auth", f"must be one of {', '.join(AUTH_METHODS)}")
    role = fields.string("jwt_role", required=False, pattern=POLICY_NAME)
    mount = fields.string("jwt_mount", required=False, pattern=POLICY_NAME)
    audience = fields.string("jwt_audience", required=False, max_len=256)
    if auth != "jwt":
        for key, value in (("jwt_role", role), ("jwt_mount", mount), ("jwt_audience", audience)):
            if value is not None:
                raise fields.fail(key, 'only with auth = "jwt"')
        if (auth == "token" and given[0] is None) or (auth == "approle" and given[1:] == (None, None)):
            files = "token_file" if auth == "token" else "approle_role_id_file and approle_secret_id_file"
            raise fields.fail("auth", f"{auth} needs {files}")
        return None
    if any(value is not None for value in given):
        message = 'auth = "jwt" logs in with the broker\'s own token: no token or AppRole file'
        raise ConfigError(f"providers.{name}: {message}")
    if role is None:
        raise fields.fail("jwt_role", 'required with auth = "jwt" (the role at auth/jwt bound to the broker\'s issuer)')
    return JwtLogin(role, mount or "jwt", audience or "vault")
