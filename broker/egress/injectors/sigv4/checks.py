"""The checks a signed request passes before its signature is even computed: key, token, date, headers, payload.

Each refuses with the reason the client's SDK understands: another key id
(InvalidAccessKeyId), a missing or wrong session token (InvalidToken), a
date more than 15 minutes from now or an expired presigned URL (AWS's own
window), a header left out of the signature (``host`` and the date must be
signed, and so must every ``x-amz-*`` header present, as S3 requires), and
an ``x-amz-content-sha256`` the proxy cannot check (SigV4A streaming, or a
value it does not know).
"""

from __future__ import annotations

import hmac
import re
from datetime import UTC, datetime, timedelta

from broker.egress.injectors.sigv4.canonical import S3_SERVICES
from broker.egress.injectors.sigv4.parsing import QUERY_TOKEN, V4A_HINT, Target, header_values, one_header
from broker.egress.injectors.sigv4.values import (
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    UNSIGNED_PAYLOAD,
    Head,
    PayloadMode,
    Reason,
    Signed,
    refuse,
)
from broker.vocab.secret import AwsKeys

HEX_SHA256 = re.compile(r"[0-9a-f]{64}")
SKEW = timedelta(minutes=15)  # how far a signing date may be from now, at AWS too
STREAMING = {
    STREAMING_UNSIGNED_TRAILER: PayloadMode.UNSIGNED_TRAILER,
    STREAMING_SIGNED: PayloadMode.SIGNED_CHUNKS,
    STREAMING_SIGNED_TRAILER: PayloadMode.SIGNED_CHUNKS_TRAILER,
}


def check_key(signed: Signed, placeholder: AwsKeys) -> None:
    if not hmac.compare_digest(signed.key_id.encode(), placeholder.access_key_id.encode()):
        message = "the request is signed with an access key id that is not this session's"
        refuse(Reason.FOREIGN_KEY, message, signed.scope.service)


def check_token(head: Head, target: Target, signed: Signed, placeholder: AwsKeys) -> None:
    """The session token, where the signer put it (a header, or the presigned query), once, the placeholder's."""
    service = signed.scope.service
    in_headers = header_values(head, b"x-amz-security-token")
    if signed.presigned:
        if in_headers:
            refuse(Reason.MALFORMED, "a presigned request carries X-Amz-Security-Token as a header", service)
        given = [value.encode("utf-8") for name, value in target.decoded() if name == QUERY_TOKEN]
    else:
        given = [value.strip() for value in in_headers]
    if len(given) > 1:
        refuse(Reason.MALFORMED, "the request carries more than one session token", service)
    expected = placeholder.session_token
    if expected is None:
        if given:
            refuse(Reason.TOKEN, "the request carries a session token this session's key does not have", service)
        return
    if not given:
        refuse(Reason.TOKEN, "the request carries no session token; this session's key needs one", service)
    if not hmac.compare_digest(given[0], expected.reveal_bytes()):
        refuse(Reason.TOKEN, "the security token included in the request is not this session's", service)


def check_time(signed: Signed, now: datetime) -> None:
    service = signed.scope.service
    try:
        t = signed.timestamp  # YYYYMMDDTHHMMSSZ (the parser checked the digits); strptime is slow
        when = datetime(int(t[:4]), int(t[4:6]), int(t[6:8]), int(t[9:11]), int(t[11:13]), int(t[13:15]), tzinfo=UTC)
    except ValueError:
        refuse(Reason.MALFORMED, "the signing date is not a date", service)
    if signed.presigned:
        assert signed.expires is not None
        if when - now > SKEW:
            stamp, clock = _shown(when), _shown(now)
            refuse(Reason.CLOCK, f"the presigned URL is dated {stamp}, ahead of the proxy's clock ({clock})", service)
        if now > when + timedelta(seconds=signed.expires):
            stamp = _shown(when)
            refuse(Reason.EXPIRED, f"the presigned URL signed at {stamp} expired after {signed.expires} s", service)
    elif abs(now - when) > SKEW:
        stamp, clock = _shown(when), _shown(now)
        refuse(
            Reason.CLOCK,
            f"the request was signed at {stamp}, more than 15 minutes from the proxy's clock ({clock})",
            service,
        )


def _shown(when: datetime) -> str:
    """A time as a refusal prints it (written out only for a refusal: ``strftime`` is slow)."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def check_headers(head: Head, signed: Signed) -> None:
    service = signed.scope.service
    present = {name.lower().decode("latin-1") for name, _ in head.headers}
    if "host" not in signed.signed_headers:
        refuse(Reason.HEADERS, "the Host header must be signed", service)
    if not signed.presigned and "x-amz-date" not in signed.signed_headers:
        refuse(Reason.HEADERS, "the X-Amz-Date header must be signed", service)
    missing = [name for name in signed.signed_headers if name not in present]
    if missing:
        refuse(Reason.HEADERS, f"signed headers are missing from the request: {', '.join(missing)}", service)
    unsigned = sorted(name for name in present if name.startswith("x-amz-") and name not in signed.signed_headers)
    if unsigned:
        refuse(Reason.HEADERS, f"headers present in the request were not signed: {', '.join(unsigned)}", service)


def payload_mode(head: Head, signed: Signed) -> tuple[PayloadMode, str | None]:
    """The payload mode and the canonical request's hash line; None when it is the body's hash, still unknown."""
    service = signed.scope.service
    declared = one_header(head, b"x-amz-content-sha256")
    if declared is None:
        if service not in S3_SERVICES:
            return PayloadMode.HASHED, None
        if signed.presigned:
            return PayloadMode.UNSIGNED, UNSIGNED_PAYLOAD
        refuse(Reason.MALFORMED, "an S3 request signed in its header needs x-amz-content-sha256", service)
    if HEX_SHA256.fullmatch(declared):
        return PayloadMode.HASHED, declared
    if declared == UNSIGNED_PAYLOAD:
        return PayloadMode.UNSIGNED, declared
    mode = STREAMING.get(declared)
    if mode is not None:
        if signed.presigned:
            refuse(Reason.MALFORMED, "a presigned request cannot stream an aws-chunked body", service)
        return mode, declared
    if declared.startswith("STREAMING-AWS4-ECDSA-P256-SHA256"):
        refuse(Reason.UNSUPPORTED, V4A_HINT, service)
    refuse(Reason.UNSUPPORTED, "x-amz-content-sha256 names a payload mode the broker's proxy cannot check", service)


def decoded_length(head: Head, service: str) -> int | None:
    value = one_header(head, b"x-amz-decoded-content-length")
    if value is None:
        return None
    if not value.isdigit() or len(value) > 18:
        refuse(Reason.MALFORMED, "x-amz-decoded-content-length is not a length", service)
    return int(value)
