"""The session environment's hints in docs/reference.md: the ``env`` names a session document may carry.

Beside the key tables of ``broker.cli.reference`` (what the loaders read),
this is what the broker writes: a test issues Vault dynamic secrets and
checks that every name they set is in this table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hint:
    name: str
    kind: str  # which credentials set it
    description: str


#: The ``env`` of session.json a Vault dynamic-secret credential adds (paths inside the sandbox, never a secret).
#: ``<NAME>`` is the credential's name upper-cased with '-' as '_'. ``sandbox.env`` may set none of them.
HINTS = (
    Hint("BROKER_SESSION", "every session", "The session id."),
    Hint("PGPASSFILE", "vault database", "The one-line pgpass file; never PGPASSWORD."),
    Hint("PGUSER", "vault database", "The minted user name."),
    Hint("PGHOST", "vault database", "From database_hint_host, when set."),
    Hint("PGPORT", "vault database", "From database_hint_port, when set."),
    Hint("PGDATABASE", "vault database", "From database_hint_database, when set."),
    Hint("BROKER_<NAME>_CERT", "vault pki", "The certificate, <name>/cert.pem."),
    Hint("BROKER_<NAME>_KEY", "vault pki", "Its private key, <name>/key.pem (0400)."),
    Hint(
        "BROKER_<NAME>_CA",
        "vault pki",
        "The issuing CA chain, <name>/ca.pem. Never SSL_CERT_FILE: it would replace the system CAs of every TLS"
        " client in the sandbox; point a client at it yourself (e.g. PGSSLCERT, PGSSLKEY, PGSSLROOTCERT).",
    ),
    Hint("GIT_SSH_COMMAND", "vault ssh", "ssh -F <name>/ssh_config (IdentityFile and CertificateFile)."),
)


def render_hints() -> list[str]:
    lines = ["", "## Session environment", "", "Hints the session document's `env` carries for Vault dynamic"]
    lines += ["secrets (`<NAME>`: the credential's name upper-cased, `-` as `_`; the first credential wins a"]
    lines += ["name). `sandbox.env` may set none of them, nor any other `BROKER_*` name.", ""]
    lines += ["| variable | set by | meaning |", "|---|---|---|"]
    lines += [f"| `{h.name}` | {h.kind} | {h.description} |" for h in HINTS]
    return lines
