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


class _Exact:
    """Narrows botocore's signer to the request as signed: its named headers, its settled payload hash."""

    def __init__(self, keys: _Keys, signing: SigningInput) -> None:
        super().__init__(keys, signing.scope.service, signing.scope.region)  # type: ignore[call-arg]
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


class _ExactV4(_Exact, SigV4Auth):  # type: ignore[misc]  # botocore has no type hints
    pass


class _ExactS3(_Exact, S3SigV4Auth):  # type: ignore[misc]
    pass


def _signer(signing: SigningInput, keys: AwsKeys) -> tuple[Any, Any]:
    kind = _ExactS3 if signing.scope.service in S3_SERVICES else _ExactV4
    auth = kind(_Keys(keys), signing)
    # The request carries no headers of its own: the signer reads the signed ones from headers_to_sign and the
    # payload line from payload() (botocore would take an X-Amz-Content-SHA256 header first: the same value).
    request = AWSRequest(method=signing.method, url="https://host.invalid" + signing.path, params=list(signing.query))
    request.context["timestamp"] = signing.timestamp
    return auth, request


def sign(signing: SigningInput, keys: AwsKeys) -> str:
    """The hex signature of the request described by ``signing`` under ``keys``."""
    auth, request = _signer(signing, keys)
    string_to_sign = auth.string_to_sign(request, auth.canonical_request(request))
    return str(auth.signature(string_to_sign, request))


class StringSigner:
    """Signs any string to sign under the key botocore derives for one scope and date (chunks, trailers)."""

    def __init__(self, keys: AwsKeys, scope: Scope, timestamp: str) -> None:
        self._auth, self._request = _signer(SigningInput("GET", "/", (), (), (), "", scope, timestamp), keys)

    def sign(self, string_to_sign: str) -> str:
        return str(self._auth.signature(string_to_sign, self._request))


def authorization(keys: AwsKeys, signing: SigningInput, signature: str) -> str:
    """The Authorization header value of a signature by ``keys``, in botocore's layout."""
    return (
        f"{ALGORITHM} Credential={keys.access_key_id}/{signing.scope.text()}, "
        f"SignedHeaders={';'.join(signing.signed_headers)}, Signature={signature}"
    )
