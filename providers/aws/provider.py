"""AWS STS: one ``AssumeRole`` session per credential, narrowed by session policies, cut off by a Deny.

Mint checks the role with ``iam:GetRole`` (its ``RoleId`` keys revocation, its
``MaxSessionDuration`` caps the lifetime: moto does not enforce it, AWS does;
with ``revoke = "deny-policy"`` the reservation's answer, read alongside the
deny policy), assumes it with a session name unique per credential, the
broker session id as ``SourceIdentity`` and ``broker:*`` session tags, and
checks the answer itself: ``AssumedRoleId`` must be ``<RoleId>:<session
name>`` and ``Arn`` that session of that role. An answer that fails is raised
as ``MintRejected`` so the core denies it like any other. (A
``GetCallerIdentity`` with the new credentials asked the same endpoint the
same question again, on a connection of its own: it bought no guarantee.) The session
name is known before AssumeRole and stored with the ``minting`` state, so a
broker killed before the answer leaves ``sweep`` enough to deny the session.
Revocation with ``revoke = "deny-policy"`` adds the session to the role's
``BrokerRevokedSessions`` inline policy (layout in ``providers.aws.deny_policy.layout``);
before any AssumeRole the core has the provider reserve room there. An
``inject: proxy`` credential (``MintContext.proxied``) is assumed with a
session policy that denies minting credentials
(``session_policy.sent_policy``), and its proxy re-signs only the STS
actions ``proxy_sts_actions`` lists (``proxy_actions``; never one that
answers with credentials, which the config may not list).

The provider holds its collaborators: ``clients`` (the botocore clients,
``providers.aws.clients``), ``roles`` (GetRole answers, ``providers.aws.roles``),
``locks`` (who waits for whom on a role, ``providers.aws.deny_policy.locks``),
``reservations`` (the deny budget, ``providers.aws.deny_policy.budget``) and ``denies``
(the deny-policy writes, ``providers.aws.deny_policy.writes``). botocore is imported on
first use; manifest and grant parsing live in ``providers.aws.request``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from broker.vocab.checks import Check
from broker.vocab.errors import ProviderError
from broker.vocab.fields import Fields
from providers.aws.assumed import Asked, assumed_credential
from providers.aws.clients import AwsClients
from providers.aws.deny_policy.budget import Reservations
from providers.aws.deny_policy.layout import entries_for
from providers.aws.deny_policy.locks import RoleLocks
from providers.aws.deny_policy.writes import DenyPolicies
from providers.aws.files import aws_placeholders, aws_proxy_secret
from providers.aws.health import health_checks
from providers.aws.names import generation_names, generation_of
from providers.aws.request import (
    AWS_MAX_TTL,
    AWS_MIN_TTL,
    ROLE_ARN,
    AwsStsGrant,
    AwsStsRequest,
    aws_narrower,
    compile_aws_grant,
    parse_aws_request,
)
from providers.aws.roles import Roles
from providers.aws.settings import DEFAULT_STS_ACTIONS, sts_actions, web_identity
from providers.aws.web_identity import assume, time_refusal, web_identity_checks
from providers.base import (
    MintContext,
    MintedCredential,
    Provider,
    ProxyFacts,
    RevokeOutcome,
    RevokeTarget,
)
from providers.capabilities import DenyBudget, FleetState, TokenIssuer
from providers.clock import aware as _aware
from providers.warm import Sdk

REGION = re.compile(r"[a-z]{2}(-[a-z0-9]+){1,3}", re.ASCII)
ENDPOINT = re.compile(r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?", re.ASCII)
PROFILE = re.compile(r"[\w+=,.@-]{1,64}", re.ASCII)
SESSION_NAME = re.compile(r"[\w+=,.@-]{2,64}", re.ASCII)
TAG_VALUE = re.compile(r"[\w.:/=+@ -]{0,256}", re.ASCII)
REVOKE_MODES = ("deny-policy", "expire")


class AwsStsProvider(Provider[AwsStsRequest]):
    """Capabilities: ``Warming``, ``FindsMinted`` (by name), ``Reserving``, ``SharesLocks``, ``Narrowing``,
    ``Placeholding`` (placeholder keys in its files, ``providers.aws.files``)."""

    type_name = "aws_sts"
    proxy = ProxyFacts(label="AWS", documented_as="aws_sts", resigns=True)
    narrower = staticmethod(aws_narrower)
    placeholders = staticmethod(aws_placeholders)
    proxy_secret = staticmethod(aws_proxy_secret)
    reserved_env = frozenset({"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_REGION"})
    ca_env = ("AWS_CA_BUNDLE",)
    sdk = Sdk(("botocore.session", "botocore.config", "botocore.exceptions", "filelock"))
    warm_first = True  # the reservation gates every mint; a revocation's reads precede its write
    search_is_exhaustive = False  # AWS cannot list sessions: find_minted names the planned one
    min_ttl = AWS_MIN_TTL
    max_ttl = AWS_MAX_TTL
    #: Read-modify-write rounds of the deny policy before revocation gives up (stays pending).
    revoke_attempts = 5

    def __init__(
        self,
        clients: AwsClients,
        *,
        revoke: str = "deny-policy",
        settle_seconds: float = 1.0,
        shared_role_writers: bool = False,
        proxy_sts_actions: frozenset[str] = frozenset(DEFAULT_STS_ACTIONS),
    ) -> None:
        """The instance named by its clients (``clients.name``), at their region and endpoint."""
        super().__init__(clients.name)
        self.revoke_mode = revoke
        self.proxy_sts_actions = proxy_sts_actions
        self.clients = clients
        self.roles = Roles(self.clients)
        self.locks = RoleLocks(clients.endpoint_url)
        self.reservations = Reservations(self.clients, self.roles, self.locks)
        self.denies = DenyPolicies(
            self.clients,
            self.locks,
            settle_seconds=settle_seconds,
            attempts=self.revoke_attempts,
            shared_writers=shared_role_writers,
        )

    # -- configuration -------------------------------------------------------------------

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> AwsStsProvider:
        revoke = fields.string("revoke", required=False, max_len=32) or "deny-policy"
        if revoke not in REVOKE_MODES:
            raise fields.fail("revoke", f"must be one of {', '.join(REVOKE_MODES)}")
        profile = fields.string("profile", required=False, pattern=PROFILE, max_len=64)
        clients = AwsClients(
            name,
            region=fields.req_string("region", pattern=REGION, max_len=32, hint="e.g. us-east-1"),
            endpoint_url=fields.string(
                "endpoint_url", required=False, pattern=ENDPOINT, max_len=512, hint="http(s)://host[:port]"
            ),
            profile=profile,
            timeout=fields.integer("timeout", minimum=1, maximum=300) or 10,
            web_identity=web_identity(fields, name, revoke, profile),
        )
        return cls(
            clients,
            revoke=revoke,
            shared_role_writers=fields.boolean("shared_role_writers", False),
            proxy_sts_actions=sts_actions(fields),
        )

    @classmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> AwsStsRequest:
        return parse_aws_request(fields, name=name, provider=provider, ttl=ttl)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> AwsStsGrant:
        return compile_aws_grant(fields, provider=provider, max_ttl=max_ttl)

    @property
    def reads_roles(self) -> bool:
        """Whether the broker has an AWS identity of its own to read roles with (not: web identity, no role)."""
        web = self.clients.web_identity
        return web is None or web.broker_role_arn is not None

    # -- capabilities ----------------------------------------------------------------------

    def preload(self, minting: bool) -> None:
        self.sdk.load(minting)

    def warm_up(self, minting: bool) -> None:
        """The IAM client with three connections (a reservation's or a revocation's three reads go at once) and,
        when minting, the STS client with one."""
        wanted = [("iam", 3)] if self.revoke_mode == "deny-policy" else []
        self.clients.warm(wanted + ([("sts", 1)] if minting else []))

    def use_lock_dir(self, path: Path) -> None:
        self.locks.lock_dir = path

    def use_fleet(self, fleet: FleetState) -> None:
        self.locks.fleet = fleet

    def reserve(
        self,
        wanted: Sequence[tuple[AwsStsRequest, MintContext]],
        live: Callable[[], Sequence[RevokeTarget]],
        now: datetime,
    ) -> contextlib.AbstractContextManager[None] | None:
        """Room in each role's deny policy (``providers.aws.deny_policy.budget``); none without ``deny-policy``."""
        if self.revoke_mode != "deny-policy" or not wanted:
            return None
        return self.reservations.reserve(wanted, live, _aware(now))

    def budget_role(self, reference: Mapping[str, str]) -> str | None:
        role_arn = reference.get("role_arn", "")
        return role_arn if self.revoke_mode == "deny-policy" and ROLE_ARN.fullmatch(role_arn) else None

    def deny_budgets(self, roles: Collection[str], live: Sequence[RevokeTarget], now: datetime) -> list[DenyBudget]:
        return self.reservations.budgets(roles, live, _aware(now))

    @property
    def issuer_needed(self) -> str | None:
        """``web_identity = true``: sessions (and the broker's role) assumed with the issuer's tokens."""
        return "web_identity" if self.clients.web_identity is not None else None

    def use_issuer(self, issuer: TokenIssuer) -> None:
        if self.clients.web_identity is not None:
            self.clients.web_identity.issuer = issuer

    def proxy_actions(self) -> dict[str, frozenset[str]]:
        """The STS actions the proxy re-signs for this instance's proxied credentials (``proxy_sts_actions``)."""
        return {"sts": self.proxy_sts_actions}

    def default_proxy_hosts(self) -> tuple[str, ...]:
        """The region's STS and S3 hosts: where the session's SDKs send (its config asks for path-style S3)."""
        return (f"sts.{self.clients.region}.amazonaws.com:443", f"s3.{self.clients.region}.amazonaws.com:443")

    def health(self) -> list[Check]:
        """``GetCallerIdentity`` with the broker's own identity, and the clock; with ``web_identity``, the issuer's
        keys as AWS fetches them, and no identity check without a broker role (it has none). Mints nothing."""
        web = self.clients.web_identity
        if web is None:
            return health_checks(self.clients)
        checks = web_identity_checks(self.name, web, self.clients.timeout)
        if web.broker_role_arn is None:
            detail = "none of the broker's own: each session's role is assumed with its web identity token"
            return [*checks, Check("identity", True, detail)]
        return checks + health_checks(self.clients)  # its GetCallerIdentity is the broker role's test login

    def close(self) -> None:
        self.clients.close()

    # -- mint ----------------------------------------------------------------------------

    def mint(self, request: AwsStsRequest, context: MintContext) -> MintedCredential:
        session_name, source_identity = generation_names(context.session_id, request.name, context.generation)
        if not SESSION_NAME.fullmatch(session_name) or not SESSION_NAME.fullmatch(source_identity):
            raise ProviderError(f"aws {self.name}: session id {context.session_id!r} is unusable", retryable=False)
        web = self.clients.web_identity
        # Without an identity of its own (web identity, no broker role) the broker reads no role: AWS enforces
        # MaxSessionDuration, and the answer is checked against the session name alone.
        role = self.roles.remembered(request.role_name, request.role_arn) if self.reads_roles else None
        if role is not None and context.ttl > role["MaxSessionDuration"]:
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
        policy = request.sent_policy_json(context.proxied)  # a proxied one's Deny of new credentials too
        if policy:
            params["Policy"] = policy
        if request.policy_arns:
            params["PolicyArns"] = [{"arn": arn} for arn in request.policy_arns]
        action, jti = ("AssumeRole", "") if web is None else ("AssumeRoleWithWebIdentity", "")
        try:
            with self.clients.errors(action):
                if web is None:
                    response = self.clients.client("sts").assume_role(**params)
                else:
                    response, jti = assume(self.clients.client("sts"), self.name, web, params, context)
        except ProviderError as exc:
            refused = time_refusal(self.name, exc) if web is not None else None
            if refused is not None:
                raise refused from None
            raise
        asked = Asked(request, session_name, source_identity, policy, action, jti)
        known = str(role["RoleId"]) if role is not None else None
        return assumed_credential(self.name, self.clients, asked, known, response, context)

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
        with self.clients.errors("GetRole", missing_ok=True) as errors:
            role_id = str(self.clients.client("iam").get_role(RoleName=role_name)["Role"]["RoleId"])
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

    # -- revoke --------------------------------------------------------------------------

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        ref, now = target.reference, _aware(now)
        role_arn, role_id = ref.get("role_arn", ""), ref.get("role_id", "")
        role_name = role_arn.rsplit("/", 1)[-1]
        if target.expires_at is not None and _aware(target.expires_at) <= now:
            if self.revoke_mode == "deny-policy" and ROLE_ARN.fullmatch(role_arn):
                with contextlib.suppress(ProviderError):
                    self.denies.update(role_name, (), now)  # nothing to deny; prune what has ended
            return RevokeOutcome.EXPIRED
        if self.revoke_mode == "expire":
            return RevokeOutcome.VALID_UNTIL_EXPIRY
        user_id, session_name = ref.get("assumed_role_id", ""), ref.get("role_session_name", "")
        if not ROLE_ARN.fullmatch(role_arn) or not user_id or user_id != f"{role_id}:{session_name}":
            raise ProviderError(f"aws {self.name}: no usable session reference for {target.name}", retryable=False)
        expires_at = _aware(target.expires_at) if target.expires_at else now + timedelta(seconds=AWS_MAX_TTL)

        def same_role() -> None:
            """GetRole buys: the role was not recreated (a deny on a new role cannot name the old session)."""
            with self.clients.errors("GetRole"):
                actual_id = self.clients.client("iam").get_role(RoleName=role_name)["Role"]["RoleId"]
            if actual_id != role_id:
                raise ProviderError(
                    f"aws {self.name}: role {role_name} now has id {actual_id}, not {role_id}: it was recreated;"
                    " a deny on the new role cannot name the old session",
                    retryable=False,
                )

        wanted = entries_for(user_id, ref.get("source_identity", ""), expires_at)
        self.denies.update(role_name, wanted, now, check=same_role)
        return RevokeOutcome.REVOKED
