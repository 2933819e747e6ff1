"""Minting and revoking Vault dynamic secrets (database users, X.509 and SSH certificates).

Vault ties a lease to the token that asked for it and revokes the lease with
that token, and a lease carries no metadata of its own. So for a database
user or a certificate the broker first mints a *lease holder*: an orphan
token through the configured token role, with ``dynamic_policies``, the
session's TTL as its hard limit and the session's metadata, and asks for the
secret with it. Three things follow: the lease cannot outlive the credential
(the holder's expiry revokes it, even if the broker never comes back); a
crash between mint and record is found by the holder's metadata like a
token's (``find_minted``), and revoking the holder revokes the lease; and
the database user's name shows the holder's display name. Revocation revokes
the lease (``sys/leases/revoke``), then the holder. SSH certificates have no
lease: they are signed for at most the session's remaining life, the key
pair is made here and never leaves the broker but for the sandbox's files,
and each names its session in its key id (``broker-<session>-<name>``, so
sshd's log does): a role that does not set ``allow_user_key_ids`` is named,
with that fix, instead of Vault's refusal. ``Engines``, which the provider
holds, is the way in: ``mint`` and ``revoke`` through the broker's own
``VaultSession``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from broker.vocab.errors import ProviderError
from broker.vocab.secret import Secret
from providers.base import MintContext, MintedCredential, MintRejected, RevokeOutcome, RevokeTarget
from providers.vault.dynamic import DYNAMIC_KINDS, DatabaseRequest, DynamicRequest, PkiRequest, SshRequest
from providers.vault.secret import SecretRequest, read_secret

if TYPE_CHECKING:
    import hvac

    from providers.vault.client import VaultSession


@dataclass(frozen=True)
class Engines:
    """The dynamic-secret engines of one Vault as configured: where each kind is mounted, the lease holder's
    policies, the libpq hints; it mints and revokes their secrets through the broker's ``vault`` session."""

    vault: VaultSession
    mounts: Mapping[str, str]
    dynamic_policies: tuple[str, ...] = ()
    database_hints: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def configured(
        cls,
        vault: VaultSession,
        mounts: Mapping[str, str] | None = None,
        dynamic_policies: tuple[str, ...] = (),
        database_hints: Mapping[str, str] | None = None,
    ) -> Engines:
        """Each kind at its default mount (its own name) unless ``mounts`` says otherwise."""
        every = {kind: kind for kind in DYNAMIC_KINDS} | dict(mounts or {})
        return cls(vault, every, dynamic_policies, dict(database_hints or {}))

    @property
    def name(self) -> str:
        return self.vault.name

    def mint(self, request: DynamicRequest, context: MintContext) -> MintedCredential:
        return mint_dynamic(self, request, context)

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        return revoke_dynamic(self, target, now)


KEY_ID_REFUSED = "key_id is not allowed by role"  # Vault's and OpenBao's answer when allow_user_key_ids is unset


def key_id_fix(engines: Engines, role: str) -> str:
    """What to set on an SSH role so the broker may name the session in a certificate's key id."""
    return (
        f"set allow_user_key_ids=true on {engines.mounts['ssh']}/roles/{role}: each certificate's key id names"
        " its session (broker-<session>-<credential>)"
    )


def remaining_ttl(context: MintContext) -> int:
    """The credential's TTL, never past the session's end."""
    left = int((context.session_expires_at - datetime.now(context.session_expires_at.tzinfo)).total_seconds())
    return max(1, min(context.ttl, left))


def mint_dynamic(engines: Engines, request: DynamicRequest, context: MintContext) -> MintedCredential:
    if isinstance(request, SecretRequest):
        return read_secret(engines, request, context)
    if isinstance(request, SshRequest):
        return _mint_ssh(engines, request, context)
    holder, accessor = _mint_holder(engines, request, context)
    try:
        if isinstance(request, DatabaseRequest):
            return _mint_database(engines, holder, accessor, request, context)
        assert isinstance(request, PkiRequest)
        return _mint_pki(engines, holder, accessor, request, context)
    except MintRejected:
        raise
    except ProviderError as exc:
        # No lease was made; the holder goes now, or the core revokes it (or keeps it pending).
        try:
            engines.vault.revoke_accessor(accessor)
        except ProviderError:
            held = MintedCredential(
                reference={"kind": request.kind, "accessor": accessor},
                secret=holder,
                files={},
                expires_at=context.session_expires_at,
                scope=request.scope(),
            )
            raise MintRejected(exc.message, held) from None
        raise


def _mint_holder(engines: Engines, request: DynamicRequest, context: MintContext) -> tuple[Secret, str]:
    if not engines.dynamic_policies:
        raise ProviderError(
            f"vault {engines.name}: set dynamic_policies in [providers.{engines.name}] to mint {request.kind}"
            " credentials (the Vault policies of the token that holds their lease)",
            retryable=False,
        )
    meta = {
        "broker_session": context.session_id,
        "broker_task": context.task,
        "broker_credential": request.name,
        "broker_kind": request.kind,
    }
    return create_holder(engines, meta, remaining_ttl(context), f"broker-{context.task}-{request.name}")


def create_holder(
    engines: Engines, meta: Mapping[str, str], ttl_seconds: int, display_name: str, *, probe: bool = False
) -> tuple[Secret, str]:
    """An orphan lease holder with ``dynamic_policies`` and nothing else, dead after ``ttl_seconds``.

    A ``probe`` (``broker doctor``) also gets the default policy, for ``sys/capabilities-self`` alone.
    """
    token, accessor, _ = engines.vault.create_orphan(
        policies=engines.dynamic_policies,
        meta=meta,
        ttl_seconds=ttl_seconds,
        display_name=display_name,
        default_policy=probe,
        action="lease holder create",
    )
    return token, accessor


def as_holder(engines: Engines, holder: Secret) -> hvac.Client:
    """A client acting as the lease holder, on the broker's own connection pool."""
    return engines.vault.acting_as(holder)


def _expiry(lease_seconds: int, ttl: int, context: MintContext) -> datetime:
    issued = datetime.now().astimezone()
    return min(issued + timedelta(seconds=min(lease_seconds or ttl, ttl)), context.session_expires_at)


def _mint_database(
    engines: Engines,
    holder: Secret,
    accessor: str,
    request: DatabaseRequest,
    context: MintContext,
) -> MintedCredential:
    path = f"{engines.mounts['database']}/creds/{request.role}"
    with engines.vault.errors(f"read {path}"):
        response = as_holder(engines, holder).read(path)
    data = (response or {}).get("data") or {}
    lease_id = str((response or {}).get("lease_id") or "")
    username, password = str(data.get("username") or ""), Secret(str(data.get("password") or ""))
    reference = {"kind": "database", "lease_id": lease_id, "accessor": accessor, "username": username}
    minted = MintedCredential(
        reference=reference,
        secret=password,
        files=database_files(engines, username, password, context.mount_dir),
        expires_at=_expiry(int((response or {}).get("lease_duration") or 0), remaining_ttl(context), context),
        scope=request.scope(),
        env=database_env(engines, username, context.mount_dir),
    )
    if not lease_id or not username or not len(password):
        raise MintRejected(f"vault {engines.name}: {path} returned no lease, user name or password", minted)
    return minted


def _libpq_quote(value: str) -> str:
    """A value for a libpq connection string: single-quoted, backslash-escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _pgpass_field(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def database_files(
    engines: Engines, username: str, password: Secret, mount_dir: PurePosixPath
) -> dict[str, Secret | str]:
    """``username``, ``password``, a one-line ``pgpass`` and a ``dsn`` that names it (no password in the dsn)."""
    hints = engines.database_hints
    host, port, dbname = hints.get("PGHOST", "*"), hints.get("PGPORT", "*"), hints.get("PGDATABASE", "*")
    line = ":".join(_pgpass_field(part) for part in (host, port, dbname, username))
    pgpass = Secret(f"{line}:{_pgpass_field(password.reveal())}\n")
    parts = [f"user={_libpq_quote(username)}", f"passfile={_libpq_quote(str(mount_dir / 'pgpass'))}"]
    for key, name in (("host", "PGHOST"), ("port", "PGPORT"), ("dbname", "PGDATABASE")):
        if name in hints:
            parts.insert(0, f"{key}={_libpq_quote(hints[name])}")
    return {"username": username + "\n", "password": password, "pgpass": pgpass, "dsn": " ".join(parts) + "\n"}


def database_env(engines: Engines, username: str, mount_dir: PurePosixPath) -> dict[str, str]:
    """What libpq clients read: the passfile and the configured host, port and database; never PGPASSWORD."""
    return {**engines.database_hints, "PGUSER": username, "PGPASSFILE": str(mount_dir / "pgpass")}


def _mint_pki(
    engines: Engines, holder: Secret, accessor: str, request: PkiRequest, context: MintContext
) -> MintedCredential:
    path = f"{engines.mounts['pki']}/issue/{request.role}"
    ttl = remaining_ttl(context)
    body: dict[str, Any] = {"common_name": request.common_name, "ttl": f"{ttl}s", "format": "pem"}
    if request.alt_names:
        body["alt_names"] = ",".join(request.alt_names)
    with engines.vault.errors(f"write {path}"):
        response = as_holder(engines, holder).write_data(path, data=body)
    data = (response or {}).get("data") or {}
    lease_id = str((response or {}).get("lease_id") or "")
    serial = str(data.get("serial_number") or "")
    key = Secret(str(data.get("private_key") or "").strip() + "\n")
    chain = data.get("ca_chain") or [data.get("issuing_ca") or ""]
    minted = MintedCredential(
        reference={"kind": "pki", "lease_id": lease_id, "serial": serial, "accessor": accessor},
        secret=key,
        files={
            "cert.pem": str(data.get("certificate") or "").strip() + "\n",
            "key.pem": key,
            "ca.pem": "\n".join(str(c).strip() for c in chain) + "\n",
        },
        expires_at=_expiry(int((response or {}).get("lease_duration") or 0), ttl, context),
        scope=request.scope(),
        env=pki_env(request.name, context.mount_dir),
    )
    if not lease_id or not serial or not data.get("certificate"):
        # Without a lease (role generate_lease=false) or a stored serial (no_store) it could not be revoked.
        raise MintRejected(
            f"vault {engines.name}: {path} returned a certificate without a lease or serial"
            " (the role needs generate_lease=true and no_store=false)",
            minted,
        )
    return minted


def pki_env(name: str, mount_dir: PurePosixPath) -> dict[str, str]:
    """``BROKER_<NAME>_CERT``, ``_KEY``, ``_CA``: the files' paths, named per credential (never SSL_CERT_FILE,
    which would replace the system CAs of every TLS client in the sandbox)."""
    prefix = "BROKER_" + name.upper().replace("-", "_")
    return {
        f"{prefix}_CERT": str(mount_dir / "cert.pem"),
        f"{prefix}_KEY": str(mount_dir / "key.pem"),
        f"{prefix}_CA": str(mount_dir / "ca.pem"),
    }


def _mint_ssh(engines: Engines, request: SshRequest, context: MintContext) -> MintedCredential:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = Secret(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        ).decode()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    path = f"{engines.mounts['ssh']}/sign/{request.role}"
    ttl = remaining_ttl(context)
    body = {
        "public_key": public,
        "valid_principals": ",".join(request.principals),
        "ttl": f"{ttl}s",
        "cert_type": "user",
        "key_id": f"broker-{context.session_id}-{request.name}",
    }
    client = engines.vault.client()
    import hvac.exceptions

    with engines.vault.errors(f"write {path}"):
        try:
            response = client.write_data(path, data=body)
        except hvac.exceptions.InvalidRequest as exc:
            if any(KEY_ID_REFUSED in str(error) for error in exc.errors or ()):
                raise ProviderError(
                    f"vault {engines.name}: ssh role {request.role!r} does not set allow_user_key_ids;"
                    f" {key_id_fix(engines, request.role)}",
                    retryable=False,
                ) from None
            raise
    data = (response or {}).get("data") or {}
    signed, serial = str(data.get("signed_key") or "").strip(), str(data.get("serial_number") or "")
    if not signed or not serial:
        raise ProviderError(f"vault {engines.name}: {path} returned no signed key", retryable=False)
    directory = context.mount_dir
    config = (
        "Host *\n"
        f"  IdentityFile {directory / 'id_ed25519'}\n"
        f"  CertificateFile {directory / 'id_ed25519-cert.pub'}\n"
        "  IdentitiesOnly yes\n"
    )
    return MintedCredential(
        reference={"kind": "ssh", "serial": serial, "key_id": body["key_id"]},
        secret=private,
        files={"id_ed25519": private, "id_ed25519-cert.pub": signed + "\n", "ssh_config": config},
        expires_at=_expiry(ttl, ttl, context),
        scope=request.scope(),
        env={"GIT_SSH_COMMAND": f"ssh -F {directory / 'ssh_config'}"},
    )


def revoke_dynamic(engines: Engines, target: RevokeTarget, now: datetime) -> RevokeOutcome:
    """Revoke the lease, then its holder; SSH certificates cannot be revoked and stay valid until they expire."""
    reference: Mapping[str, str] = target.reference
    expired = target.expires_at is not None and target.expires_at <= now
    if reference.get("kind") == "ssh":
        return RevokeOutcome.EXPIRED if expired else RevokeOutcome.VALID_UNTIL_EXPIRY
    if reference.get("kind") == "secret":  # nothing was made at Vault: the proxy has forgotten the value
        return RevokeOutcome.EXPIRED if expired else RevokeOutcome.REVOKED
    lease_id, accessor = reference.get("lease_id", ""), reference.get("accessor", "")
    if not lease_id and not accessor:
        raise ProviderError(f"vault {engines.name}: no lease recorded for {target.name}", retryable=False)
    client = engines.vault.client()
    if lease_id:
        with engines.vault.errors("lease revoke"):
            # 204 also for a lease already revoked or expired: both mean gone.
            client.adapter.put("/v1/sys/leases/revoke", json={"lease_id": lease_id, "sync": True})
    elif reference.get("kind") == "pki" and reference.get("serial"):
        with engines.vault.errors("certificate revoke"):
            client.write_data(f"{engines.mounts['pki']}/revoke", data={"serial_number": reference["serial"]})
    if accessor:
        engines.vault.revoke_accessor(accessor)
    return RevokeOutcome.EXPIRED if expired else RevokeOutcome.REVOKED
