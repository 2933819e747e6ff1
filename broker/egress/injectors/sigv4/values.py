"""The words of SigV4 re-signing: one request head, what was signed, why a request is refused.

Frozen values only (the keys are ``broker.vocab.secret.AwsKeys``). A ``Refusal`` is what the proxy answers instead of
forwarding (``broker.egress.injectors.sigv4.errors`` renders it as the XML error the
SDKs print); ``RequestRefused`` carries one out of ``feed`` and ``end``, where
a bad chunk or payload hash is found after the head was accepted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NoReturn

Header = tuple[bytes, bytes]

#: The algorithm of every signature the verifier accepts (SigV4 with HMAC-SHA256).
ALGORITHM = "AWS4-HMAC-SHA256"
#: SigV4A, the asymmetric variant: named so a refusal can say what it saw.
ALGORITHM_V4A = "AWS4-ECDSA-P256-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@dataclass(frozen=True)
class Head:
    """A request head as the proxy sees it after TLS: method, origin-form target (path and query), headers."""

    method: bytes
    target: bytes
    headers: tuple[Header, ...]


@dataclass(frozen=True)
class Scope:
    """The credential scope of a signature: ``DATE/REGION/SERVICE/aws4_request``."""

    date: str
    region: str
    service: str

    def text(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


class PayloadMode(enum.Enum):
    """How the body is covered by the signature (``x-amz-content-sha256``, or its absence)."""

    HASHED = "hashed"  # a SHA-256 of the whole body, declared in the header or (non-S3) computed
    UNSIGNED = "unsigned"  # UNSIGNED-PAYLOAD (and S3 presigned URLs)
    UNSIGNED_TRAILER = "unsigned-trailer"  # aws-chunked, a trailing checksum
    SIGNED_CHUNKS = "signed-chunks"  # aws-chunked, every chunk signed in a chain
    SIGNED_CHUNKS_TRAILER = "signed-chunks-trailer"  # the same, and a signed trailer


@dataclass(frozen=True)
class Signed:
    """What a request's signature claims: parsed from the Authorization header or the presigned query."""

    key_id: str
    scope: Scope
    timestamp: str  # YYYYMMDDTHHMMSSZ
    signed_headers: tuple[str, ...]  # lower-case, sorted
    signature: str  # 64 lower-case hex digits
    presigned: bool
    expires: int | None = None  # seconds, presigned only


class Reason(enum.Enum):
    """Why a request is refused; the value is (S3 error code, query-API error code, one-line summary)."""

    UNSIGNED = ("AccessDenied", "MissingAuthenticationToken", "no AWS signature")
    UNSUPPORTED = ("InvalidRequest", "InvalidRequest", "an authentication mechanism the proxy cannot verify")
    MALFORMED = ("AuthorizationHeaderMalformed", "IncompleteSignature", "a malformed signature")
    FOREIGN_KEY = ("InvalidAccessKeyId", "InvalidClientTokenId", "signed with another access key id")
    TOKEN = ("InvalidToken", "InvalidClientTokenId", "a missing or wrong session token")
    HEADERS = ("AccessDenied", "IncompleteSignature", "a header left out of the signature")
    CLOCK = ("RequestTimeTooSkewed", "RequestExpired", "a signing date too far from now")
    EXPIRED = ("AccessDenied", "RequestExpired", "an expired presigned URL")
    SIGNATURE = ("SignatureDoesNotMatch", "SignatureDoesNotMatch", "a signature that does not match")
    PAYLOAD_HASH = ("XAmzContentSHA256Mismatch", "SignatureDoesNotMatch", "a body that does not match its hash")
    CHUNK = ("SignatureDoesNotMatch", "SignatureDoesNotMatch", "an aws-chunked body that does not check")
    CHECKSUM = ("BadDigest", "BadDigest", "a trailing checksum that does not match the body")
    TOO_LARGE = ("EntityTooLarge", "RequestEntityTooLarge", "a body over the proxy's spool bound")
    REVOKED = ("AccessDenied", "AccessDenied", "a revoked session")
    ACTION = ("AccessDenied", "AccessDenied", "an action the proxy does not re-sign")
    CREDENTIALS = ("AccessDenied", "AccessDenied", "an answer holding credentials the session does not own")

    @property
    def s3_code(self) -> str:
        return self.value[0]

    @property
    def query_code(self) -> str:
        return self.value[1]

    @property
    def summary(self) -> str:
        return self.value[2]


@dataclass(frozen=True)
class Refusal:
    """A request the proxy answers itself (403) and never forwards; ``message`` is for the client, one line."""

    reason: Reason
    message: str
    service: str | None = None  # the signature's service when it was read ("s3", "sts", ...)


class RequestRefused(Exception):
    """A refusal on its way out: raised by ``feed`` and ``end`` when the body does not check (nothing more may
    go upstream), and inside the package wherever a check fails."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def refuse(reason: Reason, message: str, service: str | None = None) -> NoReturn:
    """Raise the ``RequestRefused`` for one failed check."""
    raise RequestRefused(Refusal(reason, message, service))
