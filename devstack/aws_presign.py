"""Presigned S3 URLs for the moto that checks signatures: checked as S3 checks them, then handed to moto signed.

With its IAM authentication on, moto reads a request's key only from the
``Authorization`` header, so a presigned (query-string) SigV4 URL fails
inside moto (500). ``PresignedAsHeaders`` wraps moto's WSGI application in
its own process (``python -m devstack.aws PORT --presigned``): a request
with ``X-Amz-Signature`` in its query and no ``Authorization`` is checked
the way S3 checks it, with botocore's query signer (``S3SigV4QueryAuth``)
under the key moto issued (an IAM user's, or an AssumeRole session's with
its token): the same canonical request, the signing date the URL carries,
``X-Amz-Expires`` from it. A URL that checks is handed to moto as the same
request signed in headers with that key (``S3SigV4Auth``), so moto's own
checks (the key, the token, the caller's IAM policies) still apply; one
that does not is refused with S3's XML error, as AWS refuses it.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

from devstack.aws import ACCOUNT, REGION

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
