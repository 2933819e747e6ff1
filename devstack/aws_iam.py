"""A moto server that checks SigV4 signatures: IAM authentication on, the broker an IAM user with an access key.

moto verifies each request's signature (and evaluates the caller's IAM
policies by action) once its IAM authentication is on: the count
``INITIAL_NO_AUTH_ACTION_COUNT`` of requests it lets through unchecked is
reached. The server runs in a process of its own (``python -m devstack.aws``,
so this setting stays out of the in-process moto other tests share); the
identities are made while nothing is checked, then moto's own
``/moto-api/reset-auth`` sets the count to 0 and every request from then on
must be signed by a known key. What exists then:

- the broker: IAM user ``broker`` with an access key (``AKIA...``), allowed only what minting needs
  (``BROKER_ACTIONS``; revoke with ``revoke = "expire"``: no deny policy written);
- the role ``agent-s3``, trusting that user, allowed S3 and ``sts:GetCallerIdentity``;
- the bucket ``agent-bucket``.

``start_iam_moto(sts_lifetime=N, deny_policy=True)`` gives a server of its own
whose sessions end after N seconds, enforced (``ShortSessions``, the last
section), and lets the broker's user write and read the role's inline deny
policy too (``revoke = "deny-policy"``). With ``chained=True`` the role
``agent-s3`` may also ``sts:AssumeRole`` the role ``deploy`` (``CHAINED``,
allowed S3 and IAM), which trusts it: ordinary role chaining, what a session
must not be able to do through the proxy. ``sessions(moto)`` lists the
assumed-role sessions moto holds, each with the session policy its
AssumeRole passed (moto keeps it but enforces none: it is read back to
check what AWS would be holding).

``assume`` returns a session's keys (``ASIA...``, secret, token) from moto's
AssumeRole, signed with the broker's key. moto still enforces no session
policy (devstack/aws.py says more); presigned S3 URLs are checked and served by
``devstack.aws`` (its presigned-URL section) in front of it.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from devstack.aws import ACCOUNT, REGION, Environ, StartResponse
from devstack.identity.aws_trust import trust_issuer
from devstack.net import free_port, wait_http

ROOT = Path(__file__).resolve().parents[1]
USER = "broker"
ROLE = "agent-s3"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{ROLE}"
CHAINED = "deploy"
CHAINED_ARN = f"arn:aws:iam::{ACCOUNT}:role/{CHAINED}"
BUCKET = "agent-bucket"
#: What the broker itself does with its identity: mint (the role read, AssumeRole with tags) and its health check.
BROKER_ACTIONS = ["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity", "sts:GetCallerIdentity", "iam:GetRole"]
#: What ``revoke = "deny-policy"`` adds: the role's inline policies read, the deny policy written.
DENY_ACTIONS = ["iam:GetRolePolicy", "iam:PutRolePolicy", "iam:ListRolePolicies", "iam:DeleteRolePolicy"]
SETUP_IDENTITY = {"aws_access_key_id": "setup-before-auth", "aws_secret_access_key": "unchecked-until-reset-auth"}


@dataclass(frozen=True)
class IamMoto:
    """The server (plain HTTP on loopback) and the broker's own keys for it."""

    url: str
    port: int
    broker_key_id: str
    broker_secret: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _client(service: str, url: str, **identity: str) -> Any:
    import boto3

    return boto3.client(service, region_name=REGION, endpoint_url=url, **identity)


def _statement(actions: list[str], **extra: Any) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, **extra}]})


def start_iam_moto(
    sts_lifetime: int | None = None,
    *,
    deny_policy: bool = False,
    chained: bool = False,
    issuer: str | None = None,
    broker_subject: str | None = None,
) -> IamMoto:
    """A moto process on a free loopback port, the identities above made, then IAM authentication on; with
    ``issuer``, that issuer an IAM OIDC provider and the roles trusting it (``devstack.identity.aws_trust``)."""
    port = free_port()
    argv = [sys.executable, "-m", "devstack.aws", str(port), "--presigned"]
    if sts_lifetime is not None:
        argv += ["--sts-lifetime", str(sts_lifetime)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/moto-api/")
        iam = _client("iam", url, **SETUP_IDENTITY)
        actions = BROKER_ACTIONS + (DENY_ACTIONS if deny_policy else [])
        iam.create_user(UserName=USER)
        key = iam.create_access_key(UserName=USER)["AccessKey"]
        iam.put_user_policy(UserName=USER, PolicyName="assume", PolicyDocument=_statement(actions, Resource="*"))
        trust = {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/{USER}"},
            "Action": "sts:AssumeRole",
        }
        iam.create_role(
            RoleName=ROLE, AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [trust]})
        )
        allowed = ["s3:*", "sts:GetCallerIdentity"]
        iam.put_role_policy(RoleName=ROLE, PolicyName="work", PolicyDocument=_statement(allowed, Resource="*"))
        if chained:
            _chain(iam)
        if issuer is not None:
            trust_issuer(iam, issuer, broker_subject, DENY_ACTIONS)
        _client("s3", url, **SETUP_IDENTITY).create_bucket(Bucket=BUCKET)
        _post(f"{url}/moto-api/reset-auth", b"0")  # INITIAL_NO_AUTH_ACTION_COUNT = 0: every request is checked now
    except BaseException:
        process.terminate()
        process.wait()
        raise
    return IamMoto(url, port, key["AccessKeyId"], key["SecretAccessKey"], process)


def _chain(iam: Any) -> None:
    """``deploy``, which ``agent-s3``'s sessions may assume: role chaining."""
    # At AWS the trust names the role ``agent-s3`` (its sessions match it); moto compares the caller's session ARN
    # literally with a principal, so here it is "*" (moto still checks the caller's own policy, which allows
    # sts:AssumeRole on ``deploy`` alone).
    trust = {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
    iam.create_role(
        RoleName=CHAINED, AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [trust]})
    )
    iam.put_role_policy(
        RoleName=CHAINED, PolicyName="deploy", PolicyDocument=_statement(["s3:*", "iam:*"], Resource="*")
    )
    iam.put_role_policy(
        RoleName=ROLE, PolicyName="chain", PolicyDocument=_statement(["sts:AssumeRole"], Resource=CHAINED_ARN)
    )


def sessions(moto: IamMoto) -> list[dict[str, Any]]:
    """The assumed-role sessions moto holds: key id, ARN and the inline session policy passed (None: none);
    served by a moto started with ``sts_lifetime`` (``ShortSessions``)."""
    return _served(moto, SESSIONS)


def received(moto: IamMoto) -> list[dict[str, Any]]:
    """Every signed request moto received (``ShortSessions``): key id, session ARN, time, method, path."""
    return _served(moto, RECEIVED)


def _served(moto: IamMoto, path: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{moto.url}{path}", timeout=10) as response:
        found: list[dict[str, Any]] = json.loads(response.read())
    return found


def assume(moto: IamMoto, session_name: str = "agent", endpoint_url: str | None = None) -> dict[str, str]:
    """A session's keys for ``agent-s3`` from AssumeRole, signed with the broker's own key."""
    sts = _client(
        "sts",
        endpoint_url or moto.url,
        aws_access_key_id=moto.broker_key_id,
        aws_secret_access_key=moto.broker_secret,
    )
    credentials: dict[str, str] = sts.assume_role(RoleArn=ROLE_ARN, RoleSessionName=session_name)["Credentials"]
    return credentials


def _post(url: str, data: bytes) -> None:
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


# -- STS sessions that end --------------------------------------------------------------
#
# For the moto that checks signatures: a short lifetime, enforced; what moto received; source identities.
#
# moto's AssumeRole gives a session the ``DurationSeconds`` asked for (at least
# 900 at AWS, which the broker keeps to) and then accepts its keys for ever: it
# never checks an STS session's expiry. ``ShortSessions`` wraps moto's WSGI
# application in its own process (``python -m devstack.aws PORT --presigned
# --sts-lifetime N``) so a test can cross real expiries in seconds, as the
# GitHub emulator's ``token_ttl`` does for installation tokens:
#
# - every AssumeRole session lasts at most N seconds (its ``Expiration`` says
#   so, and the broker plans its renewal from it);
# - a request signed (in its header or a presigned query) with the key of an
#   assumed-role session that has ended is refused with 403 ``ExpiredToken``,
#   the error AWS answers with, and never reaches moto;
# - each request's signing key id, the session's ARN, the time, and whether it
#   was refused are kept, and ``GET /devstack-api/received`` returns them as
#   JSON (a path no S3 bucket or API of this stack uses);
# - a role policy's condition on ``aws:SourceIdentity`` is evaluated with the
#   session's own source identity (the one its AssumeRole asked for, read off
#   the request and its answer). moto evaluates a condition on a key it has no
#   value for as met, so without this the broker's deny policy (a Deny on the
#   source identities of revoked sessions) would cut off every session of the
#   role, the live one too, which AWS does not do.

RECEIVED = "/devstack-api/received"
SESSIONS = "/devstack-api/sessions"
CREDENTIAL = re.compile(r"Credential=([A-Z0-9]{16,128})/[0-9]{8}/[a-z0-9-]+/([a-z0-9-]+)/aws4_request")


def cap_sts_lifetime(seconds: int) -> None:
    """Every AssumeRole session from now on ends after at most ``seconds`` (moto's backend, this process)."""
    from moto.sts.models import STSBackend

    assume = STSBackend.assume_role

    def assume_role(self: Any, region_name: str, role_session_name: str, role_arn: str, policy: str,
                    duration: int, external_id: str) -> Any:  # fmt: skip
        return assume(self, region_name, role_session_name, role_arn, policy, min(duration, seconds), external_id)

    STSBackend.assume_role = assume_role  # type: ignore[method-assign]


#: An assumed-role session's key id and the ``SourceIdentity`` its AssumeRole named (this process's moto).
SOURCE_IDENTITIES: dict[str, str] = {}
ASSUMED_KEY = re.compile(rb"<AccessKeyId>(ASIA[A-Z0-9]{12,124})</AccessKeyId>")


def evaluate_source_identity() -> None:
    """moto's check of a caller's policies, with conditions as AWS reads them (see the module docstring).

    moto turns a statement whose condition is not met into a denial (right for
    a trust policy's Allow, wrong for a Deny, which then simply does not
    apply) and has no value for ``aws:SourceIdentity``. Here a statement with
    a ``StringEquals`` condition applies when the caller's values meet it and
    is skipped otherwise; the rest is moto's own evaluation.
    """
    from moto.iam.access_control import IAMPolicy, IAMPolicyStatement, IAMRequestBase, PermissionResult

    def check_action_permitted(self: Any, resource: str) -> None:
        if self._action == "sts:GetCallerIdentity":  # as moto (and AWS): always allowed
            return
        key_id = str(getattr(self._access_key, "_access_key_id", ""))
        values = {"aws:SourceIdentity": SOURCE_IDENTITIES[key_id]} if key_id in SOURCE_IDENTITIES else {}
        permitted = False
        for policy in self._access_key.collect_policies():
            statements = IAMPolicy(policy)._policy_json["Statement"]
            for statement in statements if isinstance(statements, list) else [statements]:
                condition = statement.get("Condition")
                if condition is not None:
                    if not _met(condition, values):
                        continue
                    statement = {k: v for k, v in statement.items() if k != "Condition"}
                result = IAMPolicyStatement(statement).is_action_permitted(self._action, resource)
                if result == PermissionResult.DENIED:
                    self._raise_access_denied()
                permitted = permitted or result == PermissionResult.PERMITTED
        if self._is_assuming_role_operation(resource):
            permitted = permitted and self._check_role_trust_relationship(resource)
        if not permitted:
            self._raise_access_denied()

    IAMRequestBase.check_action_permitted = check_action_permitted  # type: ignore[method-assign]


def _met(condition: dict[str, dict[str, Any]], values: dict[str, str]) -> bool:
    """Whether ``values`` meet a condition of ``StringEquals`` tests (a key with no value never does)."""
    for operator, tests in condition.items():
        if operator != "StringEquals":
            return False  # nothing of this stack writes another: never assumed met
        for key, wanted in tests.items():
            if values.get(key) not in ([wanted] if isinstance(wanted, str) else wanted):
                return False
    return True


class ShortSessions:
    """The WSGI middleware (see the module docstring)."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]], account: str) -> None:
        self.app = app
        self.account = account
        self.received: list[dict[str, object]] = []
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") in (RECEIVED, SESSIONS) and environ.get("REQUEST_METHOD") == "GET":
            if environ.get("PATH_INFO") == SESSIONS:
                body = json.dumps(self._sessions()).encode()
            else:
                with self._lock:
                    body = json.dumps(self.received).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        key_id, service = self._signer(environ)
        if not key_id:
            return self.app(environ, start_response)
        if service == "sts" and environ.get("REQUEST_METHOD") == "POST":
            return self._assume(environ, start_response, key_id)
        return self._expiring(environ, start_response, key_id, service)

    def _sessions(self) -> list[dict[str, object]]:
        from moto.sts.models import sts_backends

        held = sts_backends[self.account]["aws"].assumed_roles
        return [{"key_id": r.access_key_id, "arn": r.arn, "policy": r.policy} for r in held]

    def _expiring(self, environ: Environ, start_response: StartResponse, key_id: str, service: str) -> Iterable[bytes]:
        """Kept in ``received``; refused with ``ExpiredToken`` when its assumed-role session has ended."""
        from moto.core.utils import utcnow
        from moto.sts.models import sts_backends

        session = sts_backends[self.account]["aws"].get_assumed_role_from_access_key(key_id)
        now = utcnow()
        expired = session is not None and now >= session.expiration
        with self._lock:
            self.received.append(
                {
                    "key_id": key_id,
                    "arn": session.arn if session is not None else "",
                    "at": now.replace(tzinfo=UTC).isoformat(),
                    "method": str(environ.get("REQUEST_METHOD", "")),
                    "path": str(environ.get("PATH_INFO", "")),
                    "expired": expired,
                }
            )
        if not expired:
            return self.app(environ, start_response)
        message = "The security token included in the request is expired"
        if service == "sts":
            body = (
                f'<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
                f"<Code>ExpiredToken</Code><Message>{message}</Message></Error></ErrorResponse>"
            ).encode()
        else:
            error = f"<Error><Code>ExpiredToken</Code><Message>{message}</Message></Error>"
            body = ('<?xml version="1.0" encoding="UTF-8"?>\n' + error).encode()
        start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [body]

    def _assume(self, environ: Environ, start_response: StartResponse, key_id: str) -> Iterable[bytes]:
        """An STS call: an AssumeRole's ``SourceIdentity`` kept for the key id its answer carries."""
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        asked = parse_qs(body.decode("latin-1"))
        answer = b"".join(self._expiring(environ, start_response, key_id, "sts"))
        found = ASSUMED_KEY.search(answer)
        if asked.get("Action") == ["AssumeRole"] and found is not None and asked.get("SourceIdentity"):
            SOURCE_IDENTITIES[found.group(1).decode()] = asked["SourceIdentity"][0]
        return [answer]

    @staticmethod
    def _signer(environ: Environ) -> tuple[str, str]:
        """The key id a request is signed with and the service it names; ``("", "")`` when unsigned."""
        found = CREDENTIAL.search(str(environ.get("HTTP_AUTHORIZATION", "")))
        if found is not None:
            return found.group(1), found.group(2)
        credential = parse_qs(str(environ.get("QUERY_STRING", ""))).get("X-Amz-Credential", [""])[0]
        parts = credential.split("/")
        return (parts[0], parts[3]) if len(parts) == 5 else ("", "")
