"""An ``AssumeRole`` (or ``AssumeRoleWithWebIdentity``) answer checked, and the credential made from it.

The answer must be the session asked for: ``AssumedRoleId`` is
``<RoleId>:<session name>`` (the role's id as ``GetRole`` read it; without a
role read, web identity and no broker role, an ``ARO`` id of the answer's own
with that session name) and ``Arn`` that session of that role, with an
expiry and well-formed keys. An answer that fails is ``MintRejected``: the
session exists at AWS, so the core denies it by the name the broker chose.
A good one is the credentials and config files, their hints, and the
reference revocation needs (with the web identity token's ``jti``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from broker.vocab.secret import Secret
from providers.aws.clients import AwsClients
from providers.aws.files import config_file, credentials_file
from providers.aws.request import AwsStsRequest
from providers.base import MintContext, MintedCredential, MintRejected
from providers.clock import aware as _aware

SECRET_TEXT = re.compile(r"[\x21-\x7e]{1,65536}", re.ASCII)  # no whitespace: nothing can break the INI file


@dataclass(frozen=True)
class Asked:
    """What the broker asked for: the request, the session's names, the session policy sent, the action, and the
    web identity token's ``jti`` (empty for ``AssumeRole``)."""

    request: AwsStsRequest
    session_name: str
    source_identity: str
    policy: str
    action: str
    jti: str


def assumed_credential(
    name: str, clients: AwsClients, asked: Asked, known_role_id: str | None, response: Any, context: MintContext
) -> MintedCredential:
    """The credential of ``response``, or ``MintRejected`` when it is not the session ``asked`` for."""
    request, session_name, policy, action, jti = (
        asked.request,
        asked.session_name,
        asked.policy,
        asked.action,
        asked.jti,
    )
    source_identity = asked.source_identity
    credentials = response.get("Credentials") or {}
    assumed = response.get("AssumedRoleUser") or {}
    assumed_role_id = str(assumed.get("AssumedRoleId", ""))
    role_id = known_role_id or assumed_role_id.partition(":")[0]
    expected_id = f"{role_id}:{session_name}" if role_id.startswith("ARO") else None
    account = request.role_arn.split(":")[4]
    partition = request.role_arn.split(":")[1]
    expected_arn = f"arn:{partition}:sts::{account}:assumed-role/{request.role_name}/{session_name}"
    expiration = credentials.get("Expiration")
    secret = Secret(str(credentials.get("SecretAccessKey", "")))
    token = Secret(str(credentials.get("SessionToken", "")))
    access_key_id = str(credentials.get("AccessKeyId", ""))
    problem = ""
    if assumed_role_id != expected_id or assumed.get("Arn") != expected_arn or not isinstance(expiration, datetime):
        problem = f"{action} answered with an unexpected session"
    elif not all(SECRET_TEXT.fullmatch(v) for v in (access_key_id, secret.reveal(), token.reveal())):
        problem = "AssumeRole returned malformed credentials"
    digest = hashlib.sha256(policy.encode()).hexdigest() if policy else ""
    reference = {
        "access_key_id": access_key_id,
        "assumed_role_id": assumed_role_id,
        "role_arn": request.role_arn,
        "role_id": role_id,
        "role_session_name": session_name,
        "source_identity": source_identity,
        "policy_digest": f"sha256:{digest}" if digest else "",
        **({"web_identity_jti": jti} if jti else {}),
    }
    if problem:  # the session exists at AWS: the core denies it by the name the broker chose
        ends = _aware(expiration) if isinstance(expiration, datetime) else None
        rejected = MintedCredential(
            reference={**reference, "assumed_role_id": expected_id or f"{role_id}:{session_name}"},
            secret=secret,
            files={},
            expires_at=ends or datetime.now(UTC) + timedelta(seconds=context.ttl),
            scope=request.scope(),
        )
        raise MintRejected(f"aws {name}: {problem}; the session was not handed out", rejected)
    assert isinstance(expiration, datetime)
    return MintedCredential(
        reference=reference,
        secret=secret,
        files={
            "credentials": credentials_file(access_key_id, secret, token),
            "config": config_file(clients.region, clients.endpoint_url),
        },
        expires_at=min(_aware(expiration), _aware(context.session_expires_at)),
        scope=request.scope(),
        env={
            "AWS_SHARED_CREDENTIALS_FILE": str(context.mount_dir / "credentials"),
            "AWS_CONFIG_FILE": str(context.mount_dir / "config"),
            "AWS_REGION": clients.region,
        },
    )
