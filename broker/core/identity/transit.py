"""The issuer's key in Vault's transit engine (``[identity] transit_key``): it signs there and never leaves Vault.

The vault instance that holds it signs (``providers.capabilities.TransitSigning``);
pyjwt assembles the token around the signature, through an algorithm of its
own whose ``sign`` asks Vault (``TransitAlgorithm``): nothing of JOSE is
written here. The key's type sets the algorithm (``ecdsa-p256``: ES256;
``rsa-2048`` and larger: RS256); a key of another type, one that is not
there or that the broker may not use, is a one-line error naming the fix.
Each token is signed by the newest version, named by its ``kid``; a version
stays in the JWKS until the last token it signed has ended (its successor's
creation plus the longest a token lives), so ``rotate`` (a new version) needs
no state of the broker's own: every host reads the versions from Vault.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from broker.core.identity.keys import LEEWAY, key_id, public_jwk
from broker.vocab.errors import ConfigError
from providers.capabilities import MAX_TOKEN_LIFETIME, TransitKey, TransitSigning

#: How long the key's description is kept before Vault is asked again (a rotation elsewhere shows within it).
KEEP = 30.0
ALGORITHM_OF = {"ecdsa-p256": "ES256", "rsa-2048": "RS256", "rsa-3072": "RS256", "rsa-4096": "RS256"}


@dataclass(frozen=True)
class TransitHandle:
    """What ``TransitAlgorithm.sign`` is given for a key: where it is and which version signs."""

    provider: TransitSigning
    mount: str
    name: str
    version: int
    rsa: bool


def transit_algorithm(name: str) -> Any:
    """A pyjwt algorithm (``ES256`` or ``RS256``) whose signature is made by Vault's transit engine."""
    from jwt.algorithms import Algorithm

    class TransitAlgorithm(Algorithm):
        def prepare_key(self, key: Any) -> Any:
            if not isinstance(key, TransitHandle):
                raise TypeError("a transit key handle")
            return key

        def sign(self, msg: bytes, key: Any) -> bytes:
            handle: TransitHandle = key
            return handle.provider.transit_sign(handle.mount, handle.name, handle.version, msg, rsa=handle.rsa)

        def verify(self, msg: bytes, key: Any, sig: bytes) -> bool:
            raise NotImplementedError("the issuer only signs")

        @staticmethod
        def to_jwk(key_obj: Any, as_dict: bool = False) -> Any:
            raise NotImplementedError("the JWKS is made from Vault's public keys")

        @staticmethod
        def from_jwk(jwk: str | dict[str, Any]) -> Any:
            raise NotImplementedError("the issuer only signs")

    TransitAlgorithm.__name__ = f"Transit{name}"
    return TransitAlgorithm()


class TransitKeyRing:
    """The key ``name`` at ``mount`` of the vault instance ``instance`` (see the module docstring)."""

    def __init__(self, provider: TransitSigning, instance: str, mount: str, name: str) -> None:
        self.provider = provider
        self.instance = instance
        self.mount = mount
        self.name = name
        self._lock = threading.Lock()
        self._key: TransitKey | None = None
        self._read_at = 0.0

    def describe(self) -> TransitKey:
        """The key as Vault describes it (read again after ``KEEP`` seconds); refused when it cannot sign."""
        with self._lock:
            if self._key is None or time.monotonic() - self._read_at > KEEP:
                key = self.provider.transit_key(self.mount, self.name)
                if key.type not in ALGORITHM_OF:
                    raise ConfigError(
                        f"identity.transit_key: {self.mount}/keys/{self.name} is a {key.type} key, which cannot sign"
                        f" ES256 or RS256 tokens; make one that can (bao write -f {self.mount}/keys/NAME"
                        " type=ecdsa-p256) and name it in transit_key"
                    )
                if key.latest not in key.versions:
                    raise ConfigError(
                        f"identity.transit_key: Vault gave no public key for {self.name}'s newest version"
                    )
                self._key, self._read_at = key, time.monotonic()
            return self._key

    @property
    def algorithm(self) -> str:
        return ALGORITHM_OF[self.describe().type]

    def signing(self) -> tuple[str, str, TransitHandle]:
        """The newest version: its algorithm, its ``kid`` and the handle that signs with it."""
        key = self.describe()
        algorithm = ALGORITHM_OF[key.type]
        handle = TransitHandle(self.provider, self.mount, self.name, key.latest, algorithm == "RS256")
        return algorithm, _kid(key.versions[key.latest][0]), handle

    def jwks(self, now: datetime) -> list[dict[str, Any]]:
        """The newest version's public key, then each older one whose tokens may still be alive."""
        key = self.describe()
        algorithm = ALGORITHM_OF[key.type]
        keep = timedelta(seconds=MAX_TOKEN_LIFETIME + LEEWAY)
        published = []
        for version in sorted(key.versions, reverse=True):
            successor = key.versions.get(version + 1)
            if version == key.latest or (successor is not None and successor[1] + keep > now):
                published.append(public_jwk(_public(key.versions[version][0]), algorithm))
        return published

    def rotate(self, now: datetime) -> tuple[str, str]:
        """A new version signs from now on (Vault's ``rotate``); (old, new) ``kid``."""
        old = self.signing()[1]
        self.provider.transit_rotate(self.mount, self.name)
        with self._lock:
            self._key = None
        return old, self.signing()[1]


def _public(pem: str) -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        return load_pem_public_key(pem.encode())
    except ValueError:
        raise ConfigError("identity.transit_key: Vault gave a public key that is not PEM") from None


def _kid(pem: str) -> str:
    return key_id(_public(pem))
