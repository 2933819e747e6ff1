"""The per-chunk signature chain of ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``: the one piece botocore does not offer.

Each chunk of an aws-chunked body carries ``chunk-signature``: the HMAC,
under the request's signing key, of

    AWS4-HMAC-SHA256-PAYLOAD \\n TIMESTAMP \\n SCOPE \\n PREVIOUS-SIGNATURE \\n SHA256("") \\n SHA256(CHUNK-DATA)

where the first PREVIOUS-SIGNATURE is the request's own (the seed) and the
last chunk is empty. With ``...-PAYLOAD-TRAILER`` the trailing headers are
signed after the last chunk:

    AWS4-HMAC-SHA256-TRAILER \\n TIMESTAMP \\n SCOPE \\n PREVIOUS-SIGNATURE \\n SHA256(CANONICAL-TRAILERS)

with the trailers canonical like headers (``name:value\\n``, names lower-case
and sorted). The formulas are AWS's ("Signature Calculations for the
Authorization Header: Transferring Payload in Multiple Chunks" and "...
Including Trailing Headers", Amazon S3 API reference); the tests check them
against AWS's published example values. The HMAC itself is botocore's.
"""

from __future__ import annotations

import hashlib

from broker.egress.injectors.sigv4.canonical import StringSigner
from broker.egress.injectors.sigv4.values import EMPTY_SHA256, Scope
from broker.vocab.secret import AwsKeys

CHUNK_ALGORITHM = "AWS4-HMAC-SHA256-PAYLOAD"
TRAILER_ALGORITHM = "AWS4-HMAC-SHA256-TRAILER"


class ChunkChain:
    """One chain of chunk signatures under one key, seeded with the request's signature."""

    def __init__(self, keys: AwsKeys, scope: Scope, timestamp: str, seed: str) -> None:
        self._signer = StringSigner(keys, scope, timestamp)
        self._prefix = f"{timestamp}\n{scope.text()}\n"
        self.previous = seed

    def chunk(self, data_sha256: str) -> str:
        """The signature of the next chunk, whose data hashes to ``data_sha256`` (hex); the chain moves on."""
        string_to_sign = f"{CHUNK_ALGORITHM}\n{self._prefix}{self.previous}\n{EMPTY_SHA256}\n{data_sha256}"
        self.previous = self._signer.sign(string_to_sign)
        return self.previous

    def trailer(self, trailers: list[tuple[str, str]]) -> str:
        """The signature of the trailing headers (after the empty last chunk); the chain moves on."""
        digest = hashlib.sha256(canonical_trailers(trailers).encode("utf-8")).hexdigest()
        self.previous = self._signer.sign(f"{TRAILER_ALGORITHM}\n{self._prefix}{self.previous}\n{digest}")
        return self.previous


def canonical_trailers(trailers: list[tuple[str, str]]) -> str:
    """``name:value\\n`` per trailer, names lower-case and sorted, values trimmed (as canonical headers)."""
    lines = sorted((name.lower(), " ".join(value.split())) for name, value in trailers)
    return "".join(f"{name}:{value}\n" for name, value in lines)
