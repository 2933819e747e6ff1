"""The two files an AWS credential puts in the sandbox, the shared credentials file and the config file, and their
``inject: proxy`` form: the one module that knows their format.

Minted, they hold the real STS keys (``credentials_file``) and the region and
endpoint (``config_file``). For an ``inject: proxy`` credential
(``Placeholding``: ``aws_placeholders``, ``aws_proxy_secret``) the provider
reads the keys back (``keys_in``) for the proxy's re-signer
(``broker.egress.injectors.sigv4``), which keeps them in memory only, and
writes the files again with placeholders of the real shapes (an access key
id ``ASIA`` + 16 upper-case letters and digits, a 40-character secret, a
session token of the real one's length), so every SDK and the AWS CLI load
and sign with them unchanged: the proxy verifies each request to the
credential's hosts with the placeholder secret and re-signs it with the
real keys.

The proxied ``config`` file says what makes the clients sign the way the
proxy can verify and send where the proxy re-signs: ``signature_version =
s3v4`` for S3 (presigned URLs are SigV2 otherwise), path-style addressing
and the regional endpoints, so S3 and STS requests go to the proxy hosts
(``s3.REGION.amazonaws.com``, ``sts.REGION.amazonaws.com``) and not to the
global endpoints. A client that asks for virtual-hosted addressing itself
sends to ``BUCKET.s3.REGION.amazonaws.com``: the proxy re-signs there too
for each bucket the session policy names whose host ``network`` allows
(``AwsStsRequest.more_proxy_hosts``). When the provider has its own
``endpoint_url`` (an AWS-compatible service), the sandbox's endpoint becomes
the address the core names (the first proxy host over https), as a Vault
address does.
"""

from __future__ import annotations

import re
import secrets
import string
from typing import Any

from broker.vocab.errors import ProviderError
from broker.vocab.secret import AwsKeys, Secret
from providers.base import MintedCredential, ProxiedCredential

KEY_ALPHABET = string.ascii_uppercase + string.digits
SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"
TOKEN_ALPHABET = string.ascii_letters + string.digits
CREDENTIALS, CONFIG = "credentials", "config"
ENDPOINT_LINE = re.compile(r"(?m)^endpoint_url = .*$")
#: What the sandbox's config adds: SigV4 for S3 (presigned URLs too), requests to the proxy hosts only.
CONFIG_LINES = (
    "sts_regional_endpoints = regional",
    "s3 =",
    "    signature_version = s3v4",
    "    addressing_style = path",
    "    us_east_1_regional_endpoint = regional",
)


def credentials_file(access_key_id: str, secret: Secret, token: Secret) -> Secret:
    """``credentials``: the whole file is secret (it holds the secret key and the session token)."""
    return Secret(
        "[default]\n"
        f"aws_access_key_id = {access_key_id}\n"
        f"aws_secret_access_key = {secret.reveal()}\n"
        f"aws_session_token = {token.reveal()}\n"
    )


def keys_in(credentials: Secret) -> AwsKeys | None:
    """The keys a ``credentials`` file holds; None when one of the three is missing."""
    values: dict[str, str] = {}
    for line in credentials.reveal().splitlines():
        name, equals, value = line.partition(" = ")
        if equals:
            values[name.strip()] = value.strip()
    key_id, secret, token = (
        values.get("aws_access_key_id", ""),
        values.get("aws_secret_access_key", ""),
        values.get("aws_session_token", ""),
    )
    if not key_id or not secret or not token:
        return None
    return AwsKeys(key_id, Secret(secret), Secret(token))


def config_file(region: str, endpoint_url: str | None) -> str:
    """``config``: region and endpoint, nothing secret."""
    lines = ["[default]", f"region = {region}"]
    if endpoint_url:
        lines.append(f"endpoint_url = {endpoint_url}")
    return "\n".join(lines) + "\n"


def placeholder_keys(real: AwsKeys) -> AwsKeys:
    """Random keys of ``real``'s shapes (each differs from the real value)."""
    while True:
        key_id = "ASIA" + "".join(secrets.choice(KEY_ALPHABET) for _ in range(16))
        secret = "".join(secrets.choice(SECRET_ALPHABET) for _ in range(len(real.secret_access_key.reveal())))
        token = None
        if real.session_token is not None:
            token = Secret("".join(secrets.choice(TOKEN_ALPHABET) for _ in range(len(real.session_token.reveal()))))
        if key_id != real.access_key_id and secret != real.secret_access_key.reveal():
            return AwsKeys(key_id, Secret(secret), token)


def aws_proxy_secret(credential: MintedCredential) -> AwsKeys:
    """``Placeholding.proxy_secret``: the STS keys the provider minted, as its credentials file holds them."""
    content = credential.files.get(CREDENTIALS)
    keys = keys_in(content) if isinstance(content, Secret) else None
    if keys is None or keys.secret_access_key != credential.secret:
        raise ProviderError("an AWS credential without the keys the proxy stands in for")
    return keys


def aws_placeholders(request: Any, credential: MintedCredential, address: str) -> ProxiedCredential:
    """``Placeholding.placeholders``: ``credential``'s files with placeholder keys and the config the proxy needs;
    the real keys for the proxy's re-signer. A config naming the provider's ``endpoint_url`` names ``address``."""
    real = aws_proxy_secret(credential)
    placeholder = placeholder_keys(real)
    assert placeholder.session_token is not None
    config = str(credential.files.get(CONFIG, "[default]\n"))
    if ENDPOINT_LINE.search(config):
        config = ENDPOINT_LINE.sub(f"endpoint_url = {address}", config)
    config = config.rstrip("\n") + "\n" + "\n".join(CONFIG_LINES) + "\n"
    held = credentials_file(placeholder.access_key_id, placeholder.secret_access_key, placeholder.session_token)
    return ProxiedCredential({**credential.files, CREDENTIALS: held, CONFIG: config}, real, placeholder)
