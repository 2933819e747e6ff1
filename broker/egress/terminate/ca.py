"""The per-session CA the egress proxy terminates TLS with, for the hosts it terminates only.

Those are the hosts of ``inject: proxy`` credentials and the hosts the
session's ``operations`` limit. An EC P-256 key made in memory when the
session is issued and dropped with the proxy: it is never written to a file.
Its certificate is name-constrained to those hosts (a critical
``NameConstraints`` extension; an operations entry ``*.example.com`` is the
subtree ``example.com``), so even a sandbox that trusts it trusts it for those
hosts and nothing else; it lives no longer than the session. Leaf
certificates are made per host on first use (at most ``MAX_LEAVES`` kept).
``ssl`` loads a certificate chain only from a path, so the leaf key goes
through an anonymous memory file (``memfd``) that is closed at once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLOCK_SLACK = timedelta(minutes=5)
MAX_LEAVES = 256  # leaf contexts kept; a wildcard host could otherwise ask for one per name


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _subject(host: str) -> x509.Name:
    """The leaf's subject: the host name as its common name; none for an address (its subjectAltName names it).

    With a DNS name beside an address among the hosts, the CA has a DNS constraint, and both OpenSSL (for a common
    name that looks like a DNS name, as ``127.0.0.1`` does) and GnuTLS (for any common name of a certificate
    without a DNS subjectAltName) check the common name against it: an address's leaf with a common name fails.
    """
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])])
    return x509.Name([])


def _subtree(host: str) -> x509.GeneralName:
    if host.startswith("*."):
        return x509.DNSName(host[2:])  # the suffix and every name under it (the proxy asks only for those under)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return x509.DNSName(host)
    return x509.IPAddress(ipaddress.ip_network(f"{address}/{address.max_prefixlen}"))


class SessionCA:
    """A CA for ``hosts`` (names, ``*.`` + a suffix, or IP literals), valid until ``not_after``."""

    def __init__(self, hosts: Sequence[str], not_after: datetime, label: str = "broker session") -> None:
        if not hosts:
            raise ValueError("a session CA needs at least one host")
        self.hosts = tuple(sorted(set(hosts)))
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._not_before = datetime.now(UTC) - CLOCK_SLACK
        self._not_after = not_after
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{label} CA"[:64])])
        public = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.NameConstraints(permitted_subtrees=[_subtree(h) for h in self.hosts], excluded_subtrees=None),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self._contexts: dict[str, ssl.SSLContext] = {}

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def covers(self, host: str) -> bool:
        """Whether ``host`` (canonical) is one of ``hosts``, or a name under one of its ``*.`` suffixes."""
        return host in self.hosts or any(h.startswith("*.") and host.endswith(h[1:]) for h in self.hosts)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a leaf certificate for ``host`` (one the CA ``covers``)."""
        if not self.covers(host) or host.startswith("*."):
            raise ValueError("not a host of this session CA")
        context = self._contexts.pop(host, None)  # taken out and put back last: the oldest goes first
        if context is None:
            context = self._make_context(host)
            while len(self._contexts) >= MAX_LEAVES:
                self._contexts.pop(next(iter(self._contexts)))
        self._contexts[host] = context
        return context

    def _make_context(self, host: str) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        ca_public = self._key.public_key()
        leaf = (
            x509.CertificateBuilder()
            .subject_name(_subject(host))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([_general_name(host)]), critical=not _subject(host))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        chain = leaf.public_bytes(serialization.Encoding.PEM) + self.pem
        pkcs8 = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        with _memory_file(chain) as chain_path, _memory_file(pkcs8) as key_path:
            context.load_cert_chain(chain_path, key_path)
        return context


@contextlib.contextmanager
def _memory_file(data: bytes) -> Iterator[str]:
    """A path to ``data`` in anonymous memory (never on a file system), for the length of the block."""
    fd = os.memfd_create("broker-session-ca", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def ca_bundle(session_ca_pem: bytes, system_bundle: bytes) -> bytes:
    """The system CAs plus the session CA: what clients that replace (not extend) their trust store get."""
    return system_bundle.rstrip(b"\n") + b"\n" + session_ca_pem if system_bundle else session_ca_pem
