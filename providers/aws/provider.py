"""AWS STS: one ``AssumeRole`` session per credential, narrowed by session policies, cut off by a Deny.

Mint checks the role with ``iam:GetRole`` (its ``RoleId`` keys revocation, its
``MaxSessionDuration`` caps the lifetime: moto does not enforce it, AWS does;
with ``revoke = "deny-policy"`` the reservation's answer, read alongside the
deny policy), assumes it with a session name unique per credential, the
broker session id as ``SourceIdentity`` and ``broker:*`` session tags, and
checks the answer itself: ``AssumedRoleId`` must be ``<RoleId>:<session
name>`` and ``Arn`` that session of that role. An answer that fails is raised
as ``MintRejected`` so the core denies it like any other. (A ``GetCallerIdentity`` with the new credentials
asked the same endpoint the same question again, on a connection of its own: it bought no guarantee.) The
session name is known before AssumeRole and stored with the ``minting`` state, so a broker killed before the
answer leaves ``sweep`` enough to deny the session. Revocation with ``revoke = "deny-policy"`` adds the session
to the role's ``BrokerRevokedSessions`` inline policy (layout in ``providers.aws.deny``, IAM writes in
``providers.aws.revoke``); before any AssumeRole the core has the provider reserve room there
(``providers.aws.budget``). botocore is imported on first use; manifest and grant parsing: ``providers.aws.request``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from broker.vocab.errors import ProviderError
from broker.vocab.fields import Fields
from broker.vocab.secret import Secret
from providers.aws import budget as aws_budget
from providers.aws.clients import aware as _aware
from providers.aws.clients import client_config, host_lock, warm_clients
from providers.aws.deny import DenyEntry, entries_for
from providers.aws.errors import AwsErrors
from providers.aws.files import config_file, credentials_file
from providers.aws.health import health_checks
from providers.aws.names import generation_names, generation_of
from providers.aws.narrowing import aws_narrower
from providers.aws.request import (
    AWS_MAX_TTL,
    AWS_MIN_TTL,
    ROLE_ARN,
    AwsStsGrant,
    AwsStsRequest,
    compile_aws_grant,
    parse_aws_request,
)
from providers.aws.revoke import DenyPolicyWriter
from providers.base import (
    DenyBudget,
    HealthCheck,
    MintContext,
    MintedCredential,
    MintRejected,
    Provider,
    RevokeOutcome,
    RevokeTarget,
)

REGION = re.compile(r"[a-z]{2}(-[a-z0-9]+){1,3}", re.ASCII)
ENDPOINT = re.compile(r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?", re.ASCII)
PROFILE = re.compile(r"[\w+=,.@-]{1,64}", re.ASCII)
SESSION_NAME = re.compile(r"[\w+=,.@-]{2,64}", re.ASCII)
SECRET_TEXT = re.compile(r"[\x21-\x7e]{1,65536}", re.ASCII)  # no whitespace: nothing can break the INI file
TAG_VALUE = re.compile(r"[\w.:/=+@ -]{0,256}", re.ASCII)
REVOKE_MODES = ("deny-policy", "expire")


class AwsStsProvider(Provider[AwsStsRequest]):
    type_name = "aws_sts"
    narrower = staticmethod(aws_narrower)  # providers.narrowing: what a delegated session may ask of a parent's
    sdk_modules = ("botocore.session", "botocore.config", "botocore.exceptions", "filelock")
    warm_first = True  # the reservation gates every mint; a revocation's reads precede its write
    min_ttl = AWS_MIN_TTL
    max_ttl = AWS_MAX_TTL
    #: Read-modify-write rounds of the deny policy before revocation gives up (stays pending).
    revoke_attempts = 5

    def __init__(
        self,
        name: str,
        *,
        region: str,
        endpoint_url: str | None = None,
        profile: str | None = None,
        revoke: str = "deny-policy",
        timeout: int = 10,
        settle_seconds: float = 1.0,
        shared_role_writers: bool = False,
    ) -> None:
        super().__init__(name)
        self.region = region
        self.endpoint_url = endpoint_url
        self.profile = profile
        self.revoke_mode = revoke
        self.timeout = timeout
        #: Wait after writing the deny policy before reading it back, so a concurrent writer is seen.
        self.settle_seconds = settle_seconds
        self.shared_role_writers = shared_role_writers
        self._clients: dict[str, Any] = {}
        self._session: Any = None
        self._lock = threading.RLock()
        self._role_locks: dict[str, threading.Lock] = {}
        #: GetRole answers read by a reservation still held, by role name (see ``remember_role``).
        self._reserved_roles: dict[str, dict[str, Any]] = {}

    # -- configuration -------------------------------------------------------------------

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> AwsStsProvider:
        revoke = fields.string("revoke", required=False, max_len=32) or "deny-policy"
        if revoke not in REVOKE_MODES:
            raise fields.fail("revoke", f"must be one of {', '.join(REVOKE_MODES)}")
        return cls(
            name,
            region=fields.req_string("region", pattern=REGION, max_len=32, hint="e.g. us-east-1"),
            endpoint_url=fields.string(
                "endpoint_url", required=False, pattern=ENDPOINT, max_len=512, hint="http(s)://host[:port]"
            ),
            profile=fields.string("profile", required=False, pattern=PROFILE, max_len=64),
            revoke=revoke,
            timeout=fields.integer("timeout", minimum=1, maximum=300) or 10,
            shared_role_writers=fields.boolean("shared_role_writers", False),
        )

    @classmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> AwsStsRequest:
        return parse_aws_request(fields, name=name, provider=provider, ttl=ttl)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> AwsStsGrant:
        return compile_aws_grant(fields, provider=provider, max_ttl=max_ttl)

    # -- clients -------------------------------------------------------------------------

    def client(self, service: str) -> Any:
        """A client of the broker's own identity (created once per service, under the lock; found without it)."""
        found = self._clients.get(service)
        if found is not None:
            return found
        with self._lock:
            if service not in self._clients:
                self._clients[service] = self._make_client(service)
            return self._clients[service]

    def _make_client(self, service: str) -> Any:
        """A botocore client from the provider's one botocore session (a session per client cost 70-130 ms and
        ~8 MiB); sessions are not thread-safe, hence the lock. Clients keep connections alive (``warm_up``)."""
        config = client_config(self.timeout)
        with self._lock, AwsErrors(self, "client setup"):
            if self._session is None:
                import botocore.session

                self._session = botocore.session.Session(profile=self.profile)
            return self._session.create_client(
                service, region_name=self.region, endpoint_url=self.endpoint_url, config=config
            )

    def warm_up(self, minting: bool) -> None:
        warm_clients(self, minting)  # providers.aws.clients

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()

    def health(self) -> list[HealthCheck]:
        """``GetCallerIdentity`` with the broker's own identity, and the clock; mints nothing."""
        return health_checks(self)

    # -- mint ----------------------------------------------------------------------------

    def mint(self, request: AwsStsRequest, context: MintContext) -> MintedCredential:
        session_name, source_identity = generation_names(context.session_id, request.name, context.generation)
        if not SESSION_NAME.fullmatch(session_name) or not SESSION_NAME.fullmatch(source_identity):
            raise ProviderError(f"aws {self.name}: session id {context.session_id!r} is unusable", retryable=False)
        with self._lock:
            role = self._reserved_roles.get(request.role_name)
        if role is None or role.get("Arn") != request.role_arn:
            role = self._role(request.role_name, request.role_arn)
        if context.ttl > role["MaxSessionDuration"]:
            raise ProviderError(
                f"aws {self.name}: ttl {context.ttl}s exceeds the MaxSessionDuration"
                f" {role['MaxSessionDuration']}s of role {request.role_name}",
                retryable=False,
            )
        params: dict[str, Any] = {
            "RoleArn": request.role_arn,
            "RoleSessionName": session_name,
            "DurationSeconds": context.ttl,
            "SourceIdentity": source_identity,
            "Tags": [
                {"Key": "broker:session", "Value": context.session_id},
                {"Key": "broker:task", "Value": context.task},
                {"Key": "broker:credential", "Value": request.name},
            ],
        }
        if not all(TAG_VALUE.fullmatch(tag["Value"]) for tag in params["Tags"]):
            raise ProviderError(f"aws {self.name}: task or credential name unusable as a tag", retryable=False)
        if request.policy_json:
            params["Policy"] = request.policy_json
        if request.policy_arns:
            params["PolicyArns"] = [{"arn": arn} for arn in request.policy_arns]
        with AwsErrors(self, "AssumeRole"):
            response = self.client("sts").assume_role(**params)
        credentials = response.get("Credentials") or {}
        assumed = response.get("AssumedRoleUser") or {}
        assumed_role_id = str(assumed.get("AssumedRoleId", ""))
        expected_id = f"{role['RoleId']}:{session_name}"
        account = request.role_arn.split(":")[4]
        partition = request.role_arn.split(":")[1]
        expected_arn = f"arn:{partition}:sts::{account}:assumed-role/{request.role_name}/{session_name}"
        expiration = credentials.get("Expiration")
        secret = Secret(str(credentials.get("SecretAccessKey", "")))
        token = Secret(str(credentials.get("SessionToken", "")))
        access_key_id = str(credentials.get("AccessKeyId", ""))
        problem = ""
        if assumed_role_id != expected_id or assumed.get("Arn") != expected_arn or not isinstance(expiration, datetime):
            problem = "AssumeRole answered with an unexpected session"
        elif not all(SECRET_TEXT.fullmatch(v) for v in (access_key_id, secret.reveal(), token.reveal())):
            problem = "AssumeRole returned malformed credentials"
        digest = hashlib.sha256(request.policy_json.encode()).hexdigest() if request.policy_json else ""
        reference = {
            "access_key_id": access_key_id,
            "assumed_role_id": assumed_role_id,
            "role_arn": request.role_arn,
            "role_id": str(role["RoleId"]),
            "role_session_name": session_name,
            "source_identity": source_identity,
            "policy_digest": f"sha256:{digest}" if digest else "",
        }
        if problem:  # the session exists at AWS: the core denies it by the name the broker chose
            ends = _aware(expiration) if isinstance(expiration, datetime) else None
            rejected = MintedCredential(
                reference={**reference, "assumed_role_id": expected_id},
                secret=secret,
                files={},
                expires_at=ends or datetime.now(UTC) + timedelta(seconds=context.ttl),
                scope=request.scope(),
            )
            raise MintRejected(f"aws {self.name}: {problem}; the session was not handed out", rejected)
        assert isinstance(expiration, datetime)
        return MintedCredential(
            reference=reference,
            secret=secret,
            files={
                "credentials": credentials_file(access_key_id, secret, token),
                "config": config_file(self.region, self.endpoint_url),
            },
            expires_at=min(_aware(expiration), _aware(context.session_expires_at)),
            scope=request.scope(),
            env={
                "AWS_SHARED_CREDENTIALS_FILE": str(context.mount_dir / "credentials"),
                "AWS_CONFIG_FILE": str(context.mount_dir / "config"),
                "AWS_REGION": self.region,
            },
        )

    def planned_reference(self, request: AwsStsRequest, context: MintContext) -> dict[str, str]:
        """The role and the session name: enough to deny a session whose AssumeRole answer never arrived."""
        session_name, source_identity = generation_names(context.session_id, request.name, context.generation)
        return {"role_arn": request.role_arn, "role_session_name": session_name, "source_identity": source_identity}

    def find_minted(self, session_id: str, credential: str, planned: Mapping[str, str]) -> list[dict[str, str]]:
        """The session a crashed broker may have assumed, named from ``planned`` (AWS cannot list sessions).

        It is returned whether or not AssumeRole ever ran: denying a session
        name that was never used costs one deny entry until it would have expired.
        """
        role_arn, session_name = planned.get("role_arn", ""), planned.get("role_session_name", "")
        source_identity = planned.get("source_identity", session_id)
        generation = generation_of(session_id, source_identity)
        names = generation_names(session_id, credential, generation) if generation is not None else None
        if not ROLE_ARN.fullmatch(role_arn) or names != (session_name, source_identity):
            return []
        role_name = role_arn.rsplit("/", 1)[-1]
        with AwsErrors(self, "GetRole", missing_ok=True) as errors:
            role_id = str(self.client("iam").get_role(RoleName=role_name)["Role"]["RoleId"])
        if errors.missing:  # the role is gone, and its sessions with it
            return []
        return [
            {
                "role_arn": role_arn,
                "role_id": role_id,
                "assumed_role_id": f"{role_id}:{session_name}",
                "role_session_name": session_name,
                "source_identity": source_identity,
            }
        ]

    def remember_role(self, role_name: str, role: dict[str, Any]) -> None:
        """Keep a reservation's GetRole answer for the mint it guards (held under the role's lock)."""
        with self._lock:
            self._reserved_roles[role_name] = role

    def forget_roles(self, role_names: Collection[str]) -> None:
        """The reservation is released: the next mint of these roles reads them again."""
        with self._lock:
            for role_name in role_names:
                self._reserved_roles.pop(role_name, None)

    def _role(self, role_name: str, role_arn: str) -> dict[str, Any]:
        with AwsErrors(self, "GetRole"):
            role: dict[str, Any] = self.client("iam").get_role(RoleName=role_name)["Role"]
        if role.get("Arn") != role_arn:
            raise ProviderError(
                f"aws {self.name}: role {role_name} in the broker's account is {role.get('Arn')}, not {role_arn}",
                retryable=False,
            )
        return role

    # -- room for revocations (providers.aws.budget) --------------------------------------

    def reserve(
        self,
        wanted: Sequence[tuple[AwsStsRequest, MintContext]],
        live: Callable[[], Sequence[RevokeTarget]],
        now: datetime,
    ) -> contextlib.AbstractContextManager[None]:
        if self.revoke_mode != "deny-policy" or not wanted:
            return contextlib.nullcontext()
        return aws_budget.reserve(self, wanted, live, _aware(now))

    def budget_role(self, reference: Mapping[str, str]) -> str | None:
        role_arn = reference.get("role_arn", "")
        return role_arn if self.revoke_mode == "deny-policy" and ROLE_ARN.fullmatch(role_arn) else None

    def deny_budgets(self, roles: Collection[str], live: Sequence[RevokeTarget], now: datetime) -> list[DenyBudget]:
        return aws_budget.budgets(self, roles, live, _aware(now))

    # -- revoke --------------------------------------------------------------------------

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        ref, now = target.reference, _aware(now)
        role_arn, role_id = ref.get("role_arn", ""), ref.get("role_id", "")
        role_name = role_arn.rsplit("/", 1)[-1]
        if target.expires_at is not None and _aware(target.expires_at) <= now:
            if self.revoke_mode == "deny-policy" and ROLE_ARN.fullmatch(role_arn):
                with contextlib.suppress(ProviderError):
                    self._update_deny(role_name, (), now)  # nothing to deny; prune what has ended
            return RevokeOutcome.EXPIRED
        if self.revoke_mode == "expire":
            return RevokeOutcome.VALID_UNTIL_EXPIRY
        user_id, session_name = ref.get("assumed_role_id", ""), ref.get("role_session_name", "")
        if not ROLE_ARN.fullmatch(role_arn) or not user_id or user_id != f"{role_id}:{session_name}":
            raise ProviderError(f"aws {self.name}: no usable session reference for {target.name}", retryable=False)
        expires_at = _aware(target.expires_at) if target.expires_at else now + timedelta(seconds=AWS_MAX_TTL)

        def same_role() -> None:
            """GetRole buys: the role was not recreated (a deny on a new role cannot name the old session)."""
            with AwsErrors(self, "GetRole"):
                actual_id = self.client("iam").get_role(RoleName=role_name)["Role"]["RoleId"]
            if actual_id != role_id:
                raise ProviderError(
                    f"aws {self.name}: role {role_name} now has id {actual_id}, not {role_id}: it was recreated;"
                    " a deny on the new role cannot name the old session",
                    retryable=False,
                )

        wanted = entries_for(user_id, ref.get("source_identity", ""), expires_at)
        self._update_deny(role_name, wanted, now, check=same_role)
        return RevokeOutcome.REVOKED

    def _update_deny(
        self,
        role_name: str,
        wanted: tuple[DenyEntry, ...],
        now: datetime | None = None,
        check: Callable[[], object] | None = None,
    ) -> None:
        """Serialise writers of one role: threads by a lock, this host's brokers by a file lock.

        With the host lock no other writer can interleave, so the write needs
        no pause and no read back; ``shared_role_writers = true`` (brokers on
        several hosts revoking on the same roles) keeps the pause that lets IAM
        settle and the read back. ``check`` runs alongside the first reads
        (GetRolePolicy buys the entries to keep, ListRolePolicies the room the
        other inline policies leave), so the critical path is one round of
        reads and the PutRolePolicy.
        """
        with self._lock:
            lock = self._role_locks.setdefault(role_name, threading.Lock())
        if self.fleet is not None:
            with lock:
                moment = _aware(now or datetime.now(UTC))
                aws_budget.update_fleet_deny(self, self.fleet, role_name, wanted, moment, check)
            return
        host_lock = self._host_lock(role_name)
        exclusive = host_lock is not None and not self.shared_role_writers
        settle = 0.0 if exclusive else self.settle_seconds
        writer = DenyPolicyWriter(self, self.client("iam"), settle, self.revoke_attempts, read_back=not exclusive)
        with lock, host_lock or contextlib.nullcontext():
            writer.update(role_name, wanted, now, check)

    def _host_lock(self, role_name: str) -> Any:
        return host_lock(self.lock_dir, self.endpoint_url, role_name) if self.lock_dir is not None else None
