"""``inject: proxy`` at issue: the session files get a placeholder of the secret's shape, the proxy the secret.

The session's CA is made in memory for the proxy hosts of the session's
proxied credentials; its certificate (``ca.pem``) and a bundle of the
system CAs plus it (``ca-bundle.pem``) go into the session directory, and
the hints point every common client at the bundle (and each provider
type's own clients: ``Provider.ca_env``). The hint naming a provider's
address (``ProxyFacts.address_env``) becomes its first proxy host over https,
and what the provider type says to keep from its hosts (request headers
stripped, an answer key refused: Vault's response wrapping) guards them
(``answer_guard``, ``broker.egress.guards``).
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from broker.core.inputs.config import Config
from broker.core.inputs.manifest import Manifest
from broker.egress.ca import SessionCA, ca_bundle
from broker.egress.destinations import Destination
from broker.egress.inject import Injection, Interceptor, placeholder_for
from broker.vocab.errors import BadInput, ProviderError
from broker.vocab.files import read_bounded
from broker.vocab.secret import Secret
from providers.base import CredentialRequest, MintedCredential, ProxyFacts
from providers.registry import provider_classes

if TYPE_CHECKING:
    from broker.egress.guards import AnswerGuard

MAX_SYSTEM_BUNDLE = 4 * 1024 * 1024
CA_FILE, BUNDLE_FILE = "ca.pem", "ca-bundle.pem"
#: The variables common clients read for the CAs they trust (all set to the bundle: some replace the system
#: store); each provider type adds its own clients' (``ca_hint_names``).
CA_HINTS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS")


def answer_guard(facts: ProxyFacts) -> AnswerGuard | None:
    """What the proxy keeps from a provider's hosts beyond the swap, as its type declares it (None: nothing)."""
    if not facts.stripped_headers and facts.refused_answer_key is None:
        return None
    from broker.egress.guards import AnswerGuard  # h11 and asyncio: only for a session whose proxy runs here

    return AnswerGuard(
        facts.label,
        frozenset(header.encode() for header in facts.stripped_headers),
        facts.refused_answer_key,
        facts.refused_answer_name,
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
            frozenset(header.encode() for header in target.facts.token_headers),
            answer_guard(target.facts),
        )
    )
    env = dict(credential.env)
    address = target.facts.address_env
    if address is not None and address in env:
        first = target.hosts[0]
        env[address] = f"https://{first.host}" + ("" if first.port == 443 else f":{first.port}")
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


@functools.cache
def ca_hint_names() -> tuple[str, ...]:
    """``CA_HINTS``, then every provider type's ``ca_env`` (by type name)."""
    classes = sorted(provider_classes(), key=lambda cls: cls.type_name)
    return CA_HINTS + tuple(name for cls in classes for name in cls.ca_env)


def ca_hints(mount_path: PurePosixPath) -> dict[str, str]:
    return dict.fromkeys(ca_hint_names(), str(mount_path / BUNDLE_FILE))


def require_proxy(manifest: Manifest, interceptor: Interceptor | None) -> None:
    if manifest.proxied and interceptor is None:
        raise BadInput(
            f"credential {manifest.proxied[0]!r} has inject: proxy: only broker exec --network allowlist runs"
            " the proxy that puts it in"
        )
