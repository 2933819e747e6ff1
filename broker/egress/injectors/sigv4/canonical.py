"""The canonical request and its signature, computed by botocore's own SigV4 code.

botocore's ``SigV4Auth`` (and ``S3SigV4Auth`` for S3: the path as sent, not
encoded a second time nor normalised) builds the canonical request, the
string to sign and the signature exactly as the SDKs do, so a request a
client signed checks here byte for byte. Two of its methods are narrowed for
checking someone else's request: the headers to sign are exactly those the
signature names (botocore's own choice, every header but a blacklist, is a
client's choice), and the payload hash is the one the verifier settled on.
The query is given decoded and botocore encodes it again (RFC 3986, sorted),
as AWS does on its side.

``signature`` also signs any other string to sign with the same derived key:
the chunk and trailer signatures of ``broker.egress.injectors.sigv4.chain``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders

from broker.egress.injectors.sigv4.values import ALGORITHM, Scope
from broker.vocab.secret import AwsKeys

#: Services whose canonical URI is the path as sent (no double encoding, no dot-segment normalisation).
S3_SERVICES = frozenset({"s3", "s3-object-lambda", "s3-outposts"})


@dataclass(frozen=True)
class SigningInput:
    """Everything a signature covers apart from the key: one request as the canonical request reads it."""

    method: str
    path: str  # raw, as sent
    query: tuple[tuple[str, str], ...]  # percent-decoded pairs, X-Amz-Signature left out
    headers: tuple[tuple[str, str], ...]  # every header as latin-1 text; the signed ones are picked
    signed_headers: tuple[str, ...]
    payload: str  # the hash line: hex, UNSIGNED-PAYLOAD or a STREAMING-... value
    scope: Scope
    timestamp: str

    def with_header(self, name: str, value: str) -> SigningInput:
        """The same input with every header ``name`` given ``value`` (the session token on re-signing)."""
        headers = tuple((n, value if n.lower() == name else v) for n, v in self.headers)
        return replace(self, headers=headers)

    def with_query(self, values: dict[str, str]) -> SigningInput:
        """The same input with the named query parameters given new values (a presigned URL re-signed)."""
        return replace(self, query=tuple((k, values.get(k, v)) for k, v in self.query))


class _Keys:
    """The credentials object botocore's signer reads; built for one signature and never printed."""

    __slots__ = ("access_key", "secret_key", "token")

    def __init__(self, keys: AwsKeys) -> None:
        self.access_key = keys.access_key_id
        self.secret_key = keys.secret_access_key.reveal()
        self.token = None

    def __repr__(self) -> str:
        return "_Keys(***)"


class SigningKeys:
    """The SigV4 signing keys of one set of keys: for each date, region and service, "AWS4" + the secret HMAC'd
    with each in turn and then "aws4_request", by botocore's own ``_sign``, as its ``signature`` does for every
    signature; here once. Held by whoever signs with the keys (the verifier, a chunk chain), so the derived keys
    go when the keys go."""

    LIMIT = 64  # (date, region, service) kept; a long session's later dates replace the first ones

    def __init__(self, keys: AwsKeys) -> None:
        self.keys = keys
        self._derived: dict[tuple[str, str, str], bytes] = {}

    def key(self, auth: Any, date: str, region: str, service: str) -> bytes:
        found = self._derived.get((date, region, service))
        if found is None:
            if len(self._derived) >= self.LIMIT:
                self._derived.clear()
            found = auth._sign(f"AWS4{self.keys.secret_access_key.reveal()}".encode(), date)
            for part in (region, service, "aws4_request"):
                found = auth._sign(found, part)
            self._derived[date, region, service] = found
        return bytes(found)


class _Exact:
    """Narrows botocore's signer to the request as signed: its named headers, its settled payload hash; and signs
    with the signing key ``SigningKeys`` derived once, not for each signature."""

    def __init__(self, keys: SigningKeys, signing: SigningInput) -> None:
        super().__init__(_Keys(keys.keys), signing.scope.service, signing.scope.region)  # type: ignore[call-arg]
        self._keys = keys
        signed = frozenset(signing.signed_headers)
        self._selected = HTTPHeaders()
        for name, value in signing.headers:
            if name.lower() in signed:
                self._selected[name.lower()] = value
        self._payload = signing.payload

    def headers_to_sign(self, request: Any) -> Any:
        return self._selected

    def payload(self, request: Any) -> str:
        return self._payload

    def signature(self, string_to_sign: str, request: Any) -> str:
        botocore: Any = self  # its signer's own members, which it has no type hints for
        key = self._keys.key(botocore, request.context["timestamp"][0:8], botocore._region_name, botocore._service_name)
        return str(botocore._sign(key, string_to_sign, hex=True))


class _ExactV4(_Exact, SigV4Auth):  # type: ignore[misc]  # botocore has no type hints
    pass


class _ExactS3(_Exact, S3SigV4Auth):  # type: ignore[misc]
    pass


def _signer(signing: SigningInput, keys: AwsKeys | SigningKeys) -> tuple[Any, Any]:
    kind = _ExactS3 if signing.scope.service in S3_SERVICES else _ExactV4
    auth = kind(keys if isinstance(keys, SigningKeys) else SigningKeys(keys), signing)
    # The request carries no headers of its own: the signer reads the signed ones from headers_to_sign and the
    # payload line from payload() (botocore would take an X-Amz-Content-SHA256 header first: the same value).
    request = AWSRequest(method=signing.method, url="https://host.invalid" + signing.path, params=list(signing.query))
    request.context["timestamp"] = signing.timestamp
    return auth, request


def sign(signing: SigningInput, keys: AwsKeys | SigningKeys) -> str:
    """The hex signature of the request described by ``signing`` under ``keys`` (``SigningKeys``: their signing
    keys kept from one signature to the next)."""
    auth, request = _signer(signing, keys)
    string_to_sign = auth.string_to_sign(request, auth.canonical_request(request))
    return str(auth.signature(string_to_sign, request))


class StringSigner:
    """Signs any string to sign under the key botocore derives for one scope and date (chunks, trailers)."""

    def __init__(self, keys: AwsKeys, scope: Scope, timestamp: str) -> None:
        signing = SigningInput("GET", "/", (), (), (), "", scope, timestamp)
        self._auth, self._request = _signer(signing, SigningKeys(keys))  # one chunk chain: one derived key

    def sign(self, string_to_sign: str) -> str:
        return str(self._auth.signature(string_to_sign, self._request))


def authorization(keys: AwsKeys, signing: SigningInput, signature: str) -> str:
    """The Authorization header value of a signature by ``keys``, in botocore's layout."""
    return (
        f"{ALGORITHM} Credential={keys.access_key_id}/{signing.scope.text()}, "
        f"SignedHeaders={';'.join(signing.signed_headers)}, Signature={signature}"
    )
