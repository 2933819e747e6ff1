"""A verifier keeps each signing key it derives: one set of keys signs each date, region and service exactly as
botocore's own signer does, in any order, however often it signed for another scope before."""

from __future__ import annotations

import hashlib
import itertools

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from broker.egress.injectors.sigv4.canonical import S3_SERVICES, SigningInput, SigningKeys, sign
from broker.egress.injectors.sigv4.values import Scope
from broker.vocab.secret import AwsKeys
from tests.fixtures.sigv4 import make_keys

PAYLOAD = hashlib.sha256(b"Action=GetCallerIdentity&Version=2011-06-15").hexdigest()


def botocore_signature(keys: AwsKeys, scope: Scope, timestamp: str) -> str:
    """The signature botocore's own signer (not narrowed, deriving its key each time) gives the same request."""
    kind = S3SigV4Auth if scope.service in S3_SERVICES else SigV4Auth
    auth = kind(Credentials(keys.access_key_id, keys.secret_access_key.reveal()), scope.service, scope.region)
    headers = {"host": "example.test", "x-amz-date": timestamp, "X-Amz-Content-SHA256": PAYLOAD}
    request = AWSRequest(method="POST", url="https://example.test/", headers=headers)
    request.context["timestamp"] = timestamp
    return str(auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request))


def signing_input(scope: Scope, timestamp: str) -> SigningInput:
    headers = (("host", "example.test"), ("x-amz-date", timestamp), ("x-amz-content-sha256", PAYLOAD))
    signed = ("host", "x-amz-content-sha256", "x-amz-date")
    return SigningInput("POST", "/", (), headers, signed, PAYLOAD, scope, timestamp)


def test_one_set_of_signing_keys_signs_every_scope_as_botocore_does_in_any_order() -> None:
    keys = make_keys()
    kept = SigningKeys(keys)
    stamps = ("20250101T000000Z", "20250102T235959Z")
    scopes = [
        (Scope(stamp[:8], region, service), stamp)
        for stamp, region, service in itertools.product(stamps, ("us-east-1", "eu-west-3"), ("sts", "s3"))
    ]
    for scope, stamp in [*scopes, *reversed(scopes), *scopes]:  # each scope again after the others were kept
        assert sign(signing_input(scope, stamp), kept) == botocore_signature(keys, scope, stamp), scope


def test_signing_keys_are_the_keys_they_were_made_for() -> None:
    scope, stamp = Scope("20250101", "us-east-1", "sts"), "20250101T000000Z"
    first, second = make_keys(), make_keys()
    assert sign(signing_input(scope, stamp), SigningKeys(first)) == botocore_signature(first, scope, stamp)
    assert sign(signing_input(scope, stamp), SigningKeys(second)) == botocore_signature(second, scope, stamp)
    assert botocore_signature(first, scope, stamp) != botocore_signature(second, scope, stamp)
