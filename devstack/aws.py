"""The AWS side of the local stack: a moto server on loopback and the role the stack's task assumes.

moto emulates the STS and IAM APIs but enforces no IAM (no trust policies,
no session policies, no MaxSessionDuration, no 10,240 budget), so what runs
against it shows what the broker sends and stores, not what AWS would deny.
``start_moto`` runs the server in this process (tests may then read moto's
backends); ``python -m devstack.aws PORT`` runs it in a process of its own
until SIGTERM (the bench: moto's request handling stays off the driver's GIL),
with ``--presigned`` checking and serving presigned S3 URLs under IAM
authentication (the presigned-URL section below), and ``--sts-lifetime N``
making AssumeRole sessions end after N seconds, enforced
(``devstack.aws_iam``, its last section).
"""

from __future__ import annotations

import hmac
import json
import logging
import signal
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

ACCOUNT = "123456789012"
REGION = "us-east-1"
ROLE_NAME = "agent-ci"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{ROLE_NAME}"
TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
            "Action": ["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"],
        }
    ],
}


@dataclass(frozen=True)
class MotoServer:
    url: str
    server: Any  # moto.server.ThreadedMotoServer

    def stop(self) -> None:
        self.server.stop()


def start_moto(port: int = 0) -> MotoServer:
    """A ThreadedMotoServer on 127.0.0.1 (a free port unless given), in this process."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    return MotoServer(f"http://{host}:{bound}", server)


def reset_moto(endpoint_url: str) -> None:
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def iam_client(endpoint_url: str, **identity: str) -> Any:
    import boto3

    return boto3.client("iam", region_name=REGION, endpoint_url=endpoint_url, **identity)


def create_role(endpoint_url: str, name: str = ROLE_NAME, **identity: str) -> dict[str, Any]:
    """A role trusting the account (MaxSessionDuration 3600), as the stack's task assumes it."""
    role: dict[str, Any] = iam_client(endpoint_url, **identity).create_role(
        RoleName=name,
        AssumeRolePolicyDocument=json.dumps(TRUST_POLICY),
        MaxSessionDuration=3600,
    )["Role"]
    return role


def start_moto_presigned(port: int, sts_lifetime: int | None = None) -> MotoServer:
    """``start_moto`` with presigned S3 URLs checked and served under IAM authentication (``PresignedAsHeaders``) and
    web identity tokens checked as AWS checks them (``devstack.identity.aws_front``);
    with ``sts_lifetime``, AssumeRole sessions that end after that many seconds (``devstack.aws_iam.ShortSessions``)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    from devstack.aws_iam import ShortSessions, cap_sts_lifetime, evaluate_source_identity
    from devstack.identity.aws_front import WebIdentityFront

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app: Callable[[Environ, StartResponse], Iterable[bytes]]
    app = WebIdentityFront(PresignedAsHeaders(DomainDispatcherApplication(create_backend_app)), ACCOUNT)
    if sts_lifetime is not None:
        cap_sts_lifetime(sts_lifetime)
        evaluate_source_identity()
        app = ShortSessions(app, ACCOUNT)
    server = make_server("127.0.0.1", port, app, True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return MotoServer(f"http://127.0.0.1:{server.server_address[1]}", _Served(server))


@dataclass(frozen=True)
class _Served:
    server: Any

    def stop(self) -> None:
        self.server.shutdown()


# -- presigned S3 URLs under IAM authentication ----------------------------------------
#
# Presigned S3 URLs for the moto that checks signatures: checked as S3 checks them, then handed to moto signed.
#
# With its IAM authentication on, moto reads a request's key only from the
# ``Authorization`` header, so a presigned (query-string) SigV4 URL fails
# inside moto (500). ``PresignedAsHeaders`` wraps moto's WSGI application in
# its own process (``python -m devstack.aws PORT --presigned``): a request
# with ``X-Amz-Signature`` in its query and no ``Authorization`` is checked
# the way S3 checks it, with botocore's query signer (``S3SigV4QueryAuth``)
# under the key moto issued (an IAM user's, or an AssumeRole session's with
# its token): the same canonical request, the signing date the URL carries,
# ``X-Amz-Expires`` from it. A URL that checks is handed to moto as the same
# request signed in headers with that key (``S3SigV4Auth``), so moto's own
# checks (the key, the token, the caller's IAM policies) still apply; one
# that does not is refused with S3's XML error, as AWS refuses it.

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
AUTH_PARAMS = frozenset(
    {
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Security-Token",
        "X-Amz-Signature",
    }
)


class Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class PresignedAsHeaders:
    """The WSGI middleware (see the module docstring)."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        query = environ.get("QUERY_STRING", "")
        if "X-Amz-Signature=" not in query or environ.get("HTTP_AUTHORIZATION"):
            return self.app(environ, start_response)
        try:
            self._to_headers(environ)
        except Refused as refused:
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{refused.code}</Code>'
                f"<Message>{refused}</Message></Error>"
            ).encode()
            start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]
        return self.app(environ, start_response)

    def _to_headers(self, environ: Environ) -> None:
        from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
        from botocore.awsrequest import AWSRequest

        raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or "")
        path, _, query = raw.partition("?")
        items = query.split("&")
        params = dict(parse_qsl(query, keep_blank_values=True))
        if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            raise Refused("AuthorizationQueryParametersError", "only AWS4-HMAC-SHA256 is served here")
        key_id, _, scope = params.get("X-Amz-Credential", "").partition("/")
        credentials = _credentials(key_id, params.get("X-Amz-Security-Token"))
        stamp = params.get("X-Amz-Date", "")
        try:
            signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            expires = int(params.get("X-Amz-Expires", ""))
        except ValueError:
            raise Refused("AuthorizationQueryParametersError", "X-Amz-Date or X-Amz-Expires malformed") from None
        if datetime.now(UTC) > signed_at + timedelta(seconds=expires):
            raise Refused("AccessDenied", "Request has expired")
        host = str(environ.get("HTTP_HOST", ""))
        signed = [name for name in params.get("X-Amz-SignedHeaders", "").split(";") if name and name != "host"]
        headers = {name: str(environ.get("HTTP_" + name.upper().replace("-", "_"), "")) for name in signed}
        unsigned_query = "&".join(item for item in items if not item.startswith("X-Amz-Signature="))
        checking = AWSRequest(environ["REQUEST_METHOD"], f"https://{host}{path}?{unsigned_query}", headers=headers)
        checking.context["timestamp"] = stamp
        signer = S3SigV4QueryAuth(credentials, "s3", scope.split("/")[1] if "/" in scope else REGION, expires=expires)
        canonical = signer.canonical_request(checking)
        expected = signer.signature(signer.string_to_sign(checking, canonical), checking)
        if not hmac.compare_digest(expected, params.get("X-Amz-Signature", "")):
            raise Refused("SignatureDoesNotMatch", "The request signature we calculated does not match")
        rest = "&".join(item for item in items if item and item.partition("=")[0] not in AUTH_PARAMS)
        onward = AWSRequest(
            method=environ["REQUEST_METHOD"], url=f"https://{host}{path}" + (f"?{rest}" if rest else "")
        )
        S3SigV4Auth(credentials, "s3", REGION).add_auth(onward)
        for name, value in onward.headers.items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        environ["QUERY_STRING"] = rest
        environ["RAW_URI"] = environ["REQUEST_URI"] = path + (f"?{rest}" if rest else "")


def _credentials(key_id: str, token: str | None) -> Any:
    from moto.iam.access_control import CreateAccessKeyFailure, create_access_key

    headers = {"X-Amz-Security-Token": token} if token else {}
    try:
        return create_access_key(ACCOUNT, "aws", key_id, headers).create_credentials()
    except CreateAccessKeyFailure:
        raise Refused(
            "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
        ) from None


def main(argv: list[str]) -> int:
    lifetime = argv[3] if argv[2:3] == ["--sts-lifetime"] and len(argv) == 4 else None
    shapes = ([], ["--presigned"]) if lifetime is None else (["--presigned", "--sts-lifetime", lifetime],)
    if not argv or not argv[0].isdigit() or argv[1:] not in shapes or not (lifetime or "1").isdigit():
        sys.stderr.write("usage: python -m devstack.aws PORT [--presigned [--sts-lifetime SECONDS]]\n")
        return 2
    port = int(argv[0])
    moto = start_moto_presigned(port, int(lifetime) if lifetime else None) if argv[1:] else start_moto(port)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print("moto listening", flush=True)
    done.wait()
    moto.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
