"""``inject: proxy`` at issue: the session files get a placeholder of the secret's shape, the proxy the secret.

The session's CA is made in memory for the proxy hosts of the session's
proxied credentials; its certificate (``ca.pem``) and a bundle of the
system CAs plus it (``ca-bundle.pem``) go into the session directory, and
the hints point every common client at the bundle. A Vault credential's
``VAULT_ADDR`` hint becomes its proxy host over https, and its proxy hosts are
marked as Vault's: the proxy strips response wrapping from requests to them
and refuses an answer holding a wrapping token (``broker.egress.guards``).
"""

from __future__ import annotations

import ssl
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath

from broker.core.config import Config
from broker.core.manifest import Manifest
from broker.egress.ca import SessionCA, ca_bundle
from broker.egress.destinations import Destination
from broker.egress.inject import Injection, placeholder_for
from broker.egress.terminate.plan import Interceptor
from broker.vocab.errors import BadInput, ProviderError
from broker.vocab.files import read_bounded
from broker.vocab.secret import Secret
from providers.base import CredentialRequest, MintedCredential

MAX_SYSTEM_BUNDLE = 4 * 1024 * 1024
CA_FILE, BUNDLE_FILE = "ca.pem", "ca-bundle.pem"
#: The variables clients read for the CAs they trust (all set to the bundle: some replace the system store).
CA_HINTS = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
    "AWS_CA_BUNDLE",
    "VAULT_CACERT",
)


def session_interceptor(config: Config, manifest: Manifest) -> Interceptor | None:
    """The interceptor of a manifest with proxied credentials (its CA lives no longer than the session may)."""
    if not manifest.proxied:
        return None
    hosts = sorted({h.host for r in manifest.credentials if r.name in manifest.proxied for h in _target(config, r)})
    ttl = min(manifest.ttl or config.default_ttl, config.max_ttl)
    return Interceptor(SessionCA(hosts, datetime.now(UTC) + timedelta(seconds=ttl), label=manifest.task))


def _target(config: Config, request: CredentialRequest) -> tuple[Destination, ...]:
    return config.proxy_targets[request.provider].hosts


def hold_in_proxy(
    config: Config, request: CredentialRequest, credential: MintedCredential, interceptor: Interceptor
) -> MintedCredential:
    """``credential`` with its files holding a placeholder; the interceptor gets the secret for its hosts."""
    target = config.proxy_targets[request.provider]
    placeholder = placeholder_for(credential.secret)
    files: dict[str, Secret | str] = {}
    for name, content in credential.files.items():
        if isinstance(content, Secret):
            if content != credential.secret:
                raise ProviderError(
                    f"credential {request.name!r}: a file holds another secret the proxy cannot stand in for"
                )
            content = placeholder
        files[name] = content
    interceptor.add(
        Injection(
            frozenset((h.host, h.port) for h in target.hosts),
            placeholder,
            credential.secret,
            target.upstream_ca_file,
            vault=config.providers[request.provider].type_name == "vault",  # its answers are checked for wrapping
            name=request.name,
        )
    )
    env = dict(credential.env)
    if "VAULT_ADDR" in env:
        first = target.hosts[0]
        env["VAULT_ADDR"] = f"https://{first.host}" + ("" if first.port == 443 else f":{first.port}")
    return replace(credential, files=files, env=env)


def ca_files(interceptor: Interceptor) -> dict[str, bytes]:
    """``ca.pem`` and ``ca-bundle.pem`` (the system CAs, when found, plus the session CA)."""
    system = b""
    cafile = ssl.get_default_verify_paths().cafile
    if cafile:
        try:
            system, _ = read_bounded(Path(cafile), MAX_SYSTEM_BUNDLE)
        except OSError:
            system = b""
    return {CA_FILE: interceptor.ca.pem, BUNDLE_FILE: ca_bundle(interceptor.ca.pem, system)}


def ca_hints(mount_path: PurePosixPath) -> dict[str, str]:
    return dict.fromkeys(CA_HINTS, str(mount_path / BUNDLE_FILE))


def require_proxy(manifest: Manifest, interceptor: Interceptor | None) -> None:
    if manifest.proxied and interceptor is None:
        raise BadInput(
            f"credential {manifest.proxied[0]!r} has inject: proxy: only broker exec --network allowlist runs"
            " the proxy that puts it in"
        )
