"""``inject: proxy`` for an AWS credential: placeholder keys in the sandbox, the real STS keys in the proxy only.

The session's ``credentials`` file gets placeholders of the real shapes (an
access key id ``ASIA`` + 16 upper-case letters and digits, a 40-character
secret, a session token of the real one's length), so every SDK and the AWS
CLI load and sign with them unchanged. The real keys go to the proxy's
``Resigner`` (``broker.egress.injectors.sigv4.resigner``), in memory only: it verifies
each request to the credential's hosts with the placeholder secret and
re-signs it with the real keys.

The ``config`` file says what makes the clients sign the way the proxy can
verify and send where the proxy re-signs: ``signature_version = s3v4`` for S3
(presigned URLs are SigV2 otherwise), path-style addressing and the regional
endpoints, so S3 and STS requests go to the ``proxy_hosts``
(``s3.REGION.amazonaws.com``, ``sts.REGION.amazonaws.com``) and not to the
global endpoints. A client that asks for virtual-hosted addressing itself
sends to ``BUCKET.s3.REGION.amazonaws.com``: the proxy re-signs there too
for each bucket the session policy names whose host ``network`` allows (the
hosts ``target`` holds here, ``CredentialRequest.more_proxy_hosts``); any
other bucket's host is not terminated. When the provider has its own
``endpoint_url`` (an AWS-compatible service), the sandbox's endpoint becomes
the first proxy host over https, as a Vault address does.

A body that must be checked before it goes upstream is spooled in the
session's own tmpfs, in a file with no name (``broker.egress.injectors.sigv4.spool``).
The re-signer signs only the STS actions its provider lists
(``Provider.proxy_actions``: ``proxy_sts_actions``), never one that answers
with new credentials (``broker.egress.injectors.sigv4.actions``).
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from broker.core.inputs.config import ProxyTarget
from broker.egress.injectors.sigv4 import AwsKeys
from broker.egress.injectors.sigv4.actions import DEFAULT_STS_ACTIONS, STS, Actions
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.terminate.interceptor import Interceptor
from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.secret import Secret
from providers.base import CredentialRequest, MintedCredential

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


def real_keys(credential: MintedCredential) -> AwsKeys:
    """The STS keys the provider minted, read from the credentials file it wrote."""
    content = credential.files.get(CREDENTIALS)
    values: dict[str, str] = {}
    if isinstance(content, Secret):
        for line in content.reveal().splitlines():
            name, equals, value = line.partition(" = ")
            if equals:
                values[name.strip()] = value.strip()
    key_id, token = values.get("aws_access_key_id", ""), values.get("aws_session_token", "")
    if not key_id or values.get("aws_secret_access_key") != credential.secret.reveal() or not token:
        raise ProviderError("an AWS credential without the keys the proxy stands in for")
    return AwsKeys(key_id, credential.secret, Secret(token))


def hold_aws_in_proxy(
    request: CredentialRequest,
    credential: MintedCredential,
    target: ProxyTarget,
    interceptor: Interceptor,
    spool_dir: Path | None,
    actions: Mapping[str, frozenset[str]],
) -> MintedCredential:
    """``credential`` with placeholder keys in its files; the proxy re-signs for its hosts with the real ones, only
    the ``actions`` (by service) its provider lists."""
    try:
        allowed = Actions(sts=actions.get(STS, DEFAULT_STS_ACTIONS))
    except ValueError as error:
        raise ConfigError(f"providers.{request.provider}.proxy_sts_actions: {error}") from None
    real = real_keys(credential)
    placeholder = placeholder_keys(real)
    text = credential.files[CREDENTIALS]
    assert isinstance(text, Secret)
    swapped = text.reveal()
    assert real.session_token is not None and placeholder.session_token is not None
    for value, stand_in in (
        (real.session_token.reveal(), placeholder.session_token.reveal()),
        (real.secret_access_key.reveal(), placeholder.secret_access_key.reveal()),
        (real.access_key_id, placeholder.access_key_id),
    ):
        swapped = swapped.replace(value, stand_in)
    config = str(credential.files.get(CONFIG, "[default]\n"))
    if ENDPOINT_LINE.search(config):
        first = target.hosts[0]
        endpoint = f"https://{first.host}" + ("" if first.port == 443 else f":{first.port}")
        config = ENDPOINT_LINE.sub(f"endpoint_url = {endpoint}", config)
    config = config.rstrip("\n") + "\n" + "\n".join(CONFIG_LINES) + "\n"
    interceptor.add_injector(
        Resigner(
            request.name,
            frozenset((h.host, h.port) for h in target.hosts),
            placeholder,
            real,
            upstream_ca_file=target.upstream_ca_file,
            spool_dir=spool_dir,
            actions=allowed,
        )
    )
    files = {**credential.files, CREDENTIALS: Secret(swapped), CONFIG: config}
    return replace(credential, files=files)
