"""The gateway's proxy credential: its Basic header read strictly, its secret kept as a keyed hash, compared whole."""

from __future__ import annotations

import base64

import pytest

from broker.egress.gateway.passes import Address, GatewayPass, Keys, basic_credentials

pytestmark = pytest.mark.unit


def test_a_basic_credential_is_read_strictly() -> None:
    """The header's reading (``basic_credentials``) takes exactly one well-formed Basic credential."""
    token = base64.b64encode(b"s-aaaaaaaaaaaa:secret").decode()
    assert basic_credentials([(b"proxy-authorization", f"Basic {token}".encode())]) == ("s-aaaaaaaaaaaa", b"secret")
    assert basic_credentials([(b"proxy-authorization", f"basic {token}".encode())]) is not None  # the scheme's case
    for value in (f"Bearer {token}", "Basic !!!!", "Basic " + base64.b64encode(b"no-colon").decode(), "Basic"):
        assert basic_credentials([(b"proxy-authorization", value.encode())]) is None, value
    twice = [(b"proxy-authorization", f"Basic {token}".encode())] * 2
    assert basic_credentials(twice) is None


def test_the_gateway_keeps_a_keyed_hash_and_the_document_never_the_secret() -> None:
    keys = Keys()
    given = GatewayPass(Address("https", "10.89.0.1", 3128), keys)
    files = given.files("s-aaaaaaaaaaaa")
    secret = files["credential"].reveal()  # type: ignore[union-attr]
    assert (
        len(secret) == 43
        and secret.isascii()
        and not set(secret) - set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    )
    assert given.proxy_url("s-aaaaaaaaaaaa") == "https://s-aaaaaaaaaaaa@10.89.0.1:3128"
    env = files["env"].reveal()  # type: ignore[union-attr]
    assert f"HTTPS_PROXY=https://s-aaaaaaaaaaaa:{secret}@10.89.0.1:3128\n" in env
    digest = given.digest
    assert secret.encode() not in digest and keys.matches(secret.encode(), digest)
    assert not keys.matches(secret.encode()[:-1] + b"x", digest)
    assert not keys.matches(secret.encode(), None)  # a session the gateway does not hold: compared, never matched
    assert not Keys().matches(secret.encode(), digest)  # another gateway's key: another hash
    given.forget()
    with pytest.raises(AssertionError):
        given.files("s-aaaaaaaaaaaa")
