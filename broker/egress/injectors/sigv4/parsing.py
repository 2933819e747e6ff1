"""Reading what a request claims about its signature, strictly: the Authorization header or the presigned query.

Nothing here checks a signature; it only takes the request apart and refuses
what cannot be verified at all: SigV2 (``AWS AKID:SIG`` or ``AWSAccessKeyId``
and ``Signature`` in the query), SigV4A (``AWS4-ECDSA-P256-SHA256``), any
other algorithm, a header and a query signature together, duplicated or
unknown fields, and values outside their grammar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from broker.egress.injectors.sigv4.values import ALGORITHM, ALGORITHM_V4A, Head, Reason, Scope, Signed, refuse

KEY_ID = re.compile(r"[A-Z0-9]{16,128}")
DATE = re.compile(r"[0-9]{8}")
TIMESTAMP = re.compile(r"[0-9]{8}T[0-9]{6}Z")
NAME = re.compile(r"[a-z0-9-]{1,64}")  # a region or a service in a credential scope
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")
SIGNATURE = re.compile(r"[0-9a-f]{64}")
ORIGIN_FORM = re.compile(rb"/[\x21-\x22\x24-\x7e]*")  # printable ASCII, no space, no "#"
MAX_EXPIRES = 7 * 24 * 3600  # AWS's longest presigned URL

#: The query parameters of a presigned SigV4 URL; only the token is optional.
QUERY_AUTH = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders")
QUERY_SIGNATURE = "X-Amz-Signature"
QUERY_TOKEN = "X-Amz-Security-Token"  # noqa: S105 (a parameter name)
V4A_HINT = "SigV4A (AWS4-ECDSA-P256-SHA256) is not supported by the broker's proxy; sign with SigV4"
V2_HINT = (
    "SigV2 is not supported by the broker's proxy; sign with SigV4 "
    "(for S3 presigned URLs: signature_version = s3v4 in the AWS config)"
)


@dataclass(frozen=True)
class Target:
    """An origin-form request target: the raw path and the raw ``key=value`` items of its query, in order."""

    path: str
    items: tuple[str, ...]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(key, value) for key, _, value in (item.partition("=") for item in self.items)]

    def decoded(self) -> list[tuple[str, str]]:
        """The query's pairs percent-decoded (UTF-8, strict): what the canonical query string encodes again."""
        try:
            return [(unquote(k, errors="strict"), unquote(v, errors="strict")) for k, v in self.pairs]
        except UnicodeDecodeError:
            refuse(Reason.MALFORMED, "the query string is not UTF-8 once percent-decoded")

    def names(self) -> list[str]:
        return [name for name, _ in self.decoded()]


def split_target(target: bytes) -> Target:
    """The path and query of an origin-form target; anything else (absolute form, a fragment, bytes outside
    printable ASCII) is refused, since the canonical request must describe exactly what is forwarded."""
    if not ORIGIN_FORM.fullmatch(target):
        refuse(Reason.MALFORMED, "the request target must be an origin-form path of printable ASCII, no fragment")
    text = target.decode("ascii")
    path, _, query = text.partition("?")
    return Target(path, tuple(query.split("&")) if query else ())


def header_values(head: Head, name: bytes) -> list[bytes]:
    return [value for key, value in head.headers if key.lower() == name]


def one_header(head: Head, name: bytes) -> str | None:
    """The one value of header ``name`` as ASCII text; None when absent; refused when repeated or not ASCII."""
    values = header_values(head, name)
    if not values:
        return None
    if len(values) > 1:
        refuse(Reason.MALFORMED, f"the request carries {name.decode()} more than once")
    try:
        return values[0].decode("ascii").strip()
    except UnicodeDecodeError:
        refuse(Reason.MALFORMED, f"the {name.decode()} header is not ASCII")


def read_signature(head: Head, target: Target) -> Signed:
    """What the request's signature claims, from its Authorization header or its presigned query."""
    authorization = one_header(head, b"authorization")
    names = set(target.names())
    in_query = bool(names & {QUERY_SIGNATURE, "X-Amz-Algorithm", "X-Amz-Credential"})
    if "Signature" in names and ("AWSAccessKeyId" in names or "Expires" in names) and not in_query:
        refuse(Reason.UNSUPPORTED, V2_HINT)
    if authorization is not None and in_query:
        refuse(Reason.MALFORMED, "the request is signed both in its Authorization header and in its query")
    if authorization is not None:
        if QUERY_TOKEN in names:
            refuse(Reason.MALFORMED, "a header-signed request carries X-Amz-Security-Token in its query")
        return _from_header(authorization, one_header(head, b"x-amz-date"))
    if in_query:
        return _from_query(target)
    refuse(Reason.UNSIGNED, "the request carries no AWS signature; the broker's proxy forwards only signed requests")


def _from_header(value: str, amz_date: str | None) -> Signed:
    algorithm, _, rest = value.partition(" ")
    _check_algorithm(algorithm)
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, equals, field = part.strip().partition("=")
        if not equals or key not in ("Credential", "SignedHeaders", "Signature") or key in fields:
            refuse(Reason.MALFORMED, "the Authorization header must hold Credential, SignedHeaders and Signature once")
        fields[key] = field
    if len(fields) != 3:
        refuse(Reason.MALFORMED, "the Authorization header must hold Credential, SignedHeaders and Signature once")
    if amz_date is None:
        refuse(Reason.MALFORMED, "a header-signed request needs an X-Amz-Date header")
    key_id, scope = _credential(fields["Credential"])
    return Signed(
        key_id=key_id,
        scope=scope,
        timestamp=_timestamp(amz_date, scope),
        signed_headers=_signed_headers(fields["SignedHeaders"]),
        signature=_signature(fields["Signature"]),
        presigned=False,
    )


def _from_query(target: Target) -> Signed:
    found: dict[str, str] = {}
    for name, value in target.decoded():
        if name in (*QUERY_AUTH, QUERY_SIGNATURE, QUERY_TOKEN):
            if name in found:
                refuse(Reason.MALFORMED, f"the presigned query carries {name} more than once")
            found[name] = value
    _check_algorithm(found.get("X-Amz-Algorithm", ""))
    missing = [name for name in (*QUERY_AUTH, QUERY_SIGNATURE) if name not in found]
    if missing:
        refuse(Reason.MALFORMED, f"the presigned query lacks {', '.join(missing)}")
    expires = found["X-Amz-Expires"]
    if not expires.isdigit() or not 1 <= int(expires) <= MAX_EXPIRES:
        refuse(Reason.MALFORMED, f"X-Amz-Expires must be 1 to {MAX_EXPIRES} seconds")
    key_id, scope = _credential(found["X-Amz-Credential"])
    return Signed(
        key_id=key_id,
        scope=scope,
        timestamp=_timestamp(found["X-Amz-Date"], scope),
        signed_headers=_signed_headers(found["X-Amz-SignedHeaders"]),
        signature=_signature(found[QUERY_SIGNATURE]),
        presigned=True,
        expires=int(expires),
    )


def _check_algorithm(algorithm: str) -> None:
    if algorithm == ALGORITHM:
        return
    if algorithm == ALGORITHM_V4A:
        refuse(Reason.UNSUPPORTED, V4A_HINT)
    if algorithm == "AWS":
        refuse(Reason.UNSUPPORTED, V2_HINT)
    refuse(Reason.UNSUPPORTED, f"the signing algorithm is not {ALGORITHM}, the only one the broker's proxy verifies")


def _credential(text: str) -> tuple[str, Scope]:
    parts = text.split("/")
    if (
        len(parts) != 5
        or not KEY_ID.fullmatch(parts[0])
        or not DATE.fullmatch(parts[1])
        or not NAME.fullmatch(parts[2])
        or not NAME.fullmatch(parts[3])
        or parts[4] != "aws4_request"
    ):
        refuse(Reason.MALFORMED, "the credential must be KEYID/YYYYMMDD/REGION/SERVICE/aws4_request")
    return parts[0], Scope(parts[1], parts[2], parts[3])


def _timestamp(text: str, scope: Scope) -> str:
    if not TIMESTAMP.fullmatch(text):
        refuse(Reason.MALFORMED, "the signing date must be YYYYMMDDTHHMMSSZ", scope.service)
    if text[:8] != scope.date:
        refuse(Reason.MALFORMED, "the credential scope's date is not the signing date", scope.service)
    return text


def _signed_headers(text: str) -> tuple[str, ...]:
    names = tuple(text.split(";"))
    if not all(HEADER_NAME.fullmatch(name) for name in names) or list(names) != sorted(set(names)):
        refuse(Reason.MALFORMED, "SignedHeaders must be lower-case header names, sorted, each once")
    if "authorization" in names:
        refuse(Reason.MALFORMED, "the Authorization header cannot sign itself")
    return names


def _signature(text: str) -> str:
    if not SIGNATURE.fullmatch(text):
        refuse(Reason.MALFORMED, "the signature must be 64 lower-case hexadecimal digits")
    return text
