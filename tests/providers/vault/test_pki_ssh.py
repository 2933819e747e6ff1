"""Vault ``kind: pki`` and ``kind: ssh`` against OpenBao's own engines.

PKI: the certificate verifies against the CA, carries exactly the asked
names, and after ``revoke`` its serial is in the CRL; a role that gives no
lease is refused and its certificate revoked at once. SSH: the broker makes
the key pair, ``ssh-keygen -L`` shows the asked principals and a validity no
longer than the session's; ``revoke`` reports ``valid-until-expiry``.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import ocsp
from cryptography.x509.oid import NameOID

from broker.cli.manual.env import hints
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.vault_engines import DYNAMIC_GRANTS, NO_KEY_ID_ROLE, Engines, lease_exists

pytestmark = pytest.mark.server

PKI_TASK = """
version: 1
task: fix-cert-1
ttl: 20m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - name: client-cert
    provider: vault
    kind: pki
    role: agent
    common_name: agent.ci.internal
    alt_names: [build.ci.internal]
    ttl: 15m
"""
SSH_TASK = """
version: 1
task: fix-ssh-1
ttl: 20m
sandbox: {uid: 1000, gid: 1000, mount_path: /run/secrets}
credentials:
  - name: build-host
    provider: vault
    kind: ssh
    role: agent
    principals: [git, build]
    ttl: 10m
"""


def issue(env: BrokerEnv, task: str) -> dict[str, Any]:
    result = env.run("issue", "--task", str(env.write_task(task)), "--json")
    assert result.code == 0, result.stderr
    document: dict[str, Any] = result.json()
    return document


def crl_serials(engines: Engines) -> set[int]:
    raw = engines.openbao.client().adapter.get("/v1/pki/crl")
    crl = x509.load_der_x509_crl(raw.content)
    return {entry.serial_number for entry in crl}


def ocsp_status(engines: Engines, certificate: x509.Certificate, ca: x509.Certificate) -> ocsp.OCSPCertStatus:
    """Ask OpenBao's OCSP responder (POST application/ocsp-request) and check the answer's signature by the CA."""
    request = ocsp.OCSPRequestBuilder().add_certificate(certificate, ca, hashes.SHA1()).build()  # noqa: S303 (OCSP's CertID)
    raw = engines.openbao.client().adapter.session.post(
        f"{engines.openbao.addr}/v1/pki/ocsp",
        data=request.public_bytes(serialization.Encoding.DER),
        headers={"Content-Type": "application/ocsp-request"},
        timeout=10,
    )
    assert raw.headers["Content-Type"] == "application/ocsp-response"
    response = ocsp.load_der_ocsp_response(raw.content)
    assert response.response_status == ocsp.OCSPResponseStatus.SUCCESSFUL
    assert response.serial_number == certificate.serial_number
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert response.signature_hash_algorithm is not None
    public.verify(response.signature, response.tbs_response_bytes, ec.ECDSA(response.signature_hash_algorithm))
    return response.certificate_status


def serial_number(text: str) -> int:
    return int(text.replace(":", ""), 16)


def test_the_certificate_verifies_against_the_ca_and_names_what_was_asked(
    dynamic_env: BrokerEnv, engines: Engines
) -> None:
    document = issue(dynamic_env, PKI_TASK)
    directory = Path(document["dir"]) / "client-cert"
    assert sorted(os.listdir(directory)) == ["ca.pem", "cert.pem", "key.pem"]
    assert stat.S_IMODE(os.lstat(directory / "key.pem").st_mode) == 0o400
    certificate = x509.load_pem_x509_certificate((directory / "cert.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    certificate.verify_directly_issued_by(ca)
    key = serialization.load_pem_private_key((directory / "key.pem").read_bytes(), password=None)
    assert key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "agent.ci.internal"
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(names.get_values_for_type(x509.DNSName)) == ["agent.ci.internal", "build.ci.internal"]
    lifetime = certificate.not_valid_after_utc - datetime.now(UTC)
    assert lifetime.total_seconds() <= 15 * 60
    reference = next(r for r in dynamic_env.log_records() if r["event"] == "credential.issued")["reference"]
    assert serial_number(reference["serial"]) == certificate.serial_number
    assert lease_exists(engines.openbao, reference["lease_id"])
    assert "BEGIN" not in str(reference)


def test_revoke_puts_the_serial_in_the_crl(dynamic_env: BrokerEnv, engines: Engines) -> None:
    document = issue(dynamic_env, PKI_TASK)
    directory = Path(document["dir"]) / "client-cert"
    certificate = x509.load_pem_x509_certificate((directory / "cert.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    assert certificate.serial_number not in crl_serials(engines)
    assert ocsp_status(engines, certificate, ca) == ocsp.OCSPCertStatus.GOOD
    result = dynamic_env.run("revoke", "--session", document["session"], "--json")
    assert result.code == 0, result.stderr
    assert result.json()["credentials"][0]["outcome"] == "revoked"
    assert certificate.serial_number in crl_serials(engines)
    assert ocsp_status(engines, certificate, ca) == ocsp.OCSPCertStatus.REVOKED


def test_the_certificate_hints_name_its_files_per_credential(dynamic_env: BrokerEnv) -> None:
    document = issue(dynamic_env, PKI_TASK)
    env = document["env"]
    assert env["BROKER_CLIENT_CERT_CERT"] == "/run/secrets/client-cert/cert.pem"
    assert env["BROKER_CLIENT_CERT_KEY"] == "/run/secrets/client-cert/key.pem"
    assert env["BROKER_CLIENT_CERT_CA"] == "/run/secrets/client-cert/ca.pem"
    # Never the names that replace every TLS client's trusted CAs, nor libpq's (not asked for a database).
    assert not {"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "PGSSLCERT", "PGSSLKEY"} & set(env)
    documented = {hint.name.replace("<NAME>", "CLIENT_CERT") for hint in hints()}
    assert set(env) <= documented  # docs/reference.md names every hint
    host = {
        name: Path(document["dir"]) / Path(env[name]).relative_to("/run/secrets") for name in env if "CLIENT" in name
    }
    assert host["BROKER_CLIENT_CERT_CERT"].read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert b"PRIVATE KEY" in host["BROKER_CLIENT_CERT_KEY"].read_bytes()
    x509.load_pem_x509_certificate(host["BROKER_CLIENT_CERT_CA"].read_bytes())


def test_a_certificate_without_a_lease_is_refused_and_revoked(dynamic_env: BrokerEnv, engines: Engines) -> None:
    dynamic_env.write_policy(
        """
        rules:
          - id: agents
            tasks: ["fix-*"]
            sandbox_uids: ["0-65534"]
            sandbox_gids: ["0-65534"]
            grants:
              - {provider: vault, pki_roles: ["agent*"], common_names: ["*.ci.internal"]}
        """
    )
    before = crl_serials(engines)
    result = dynamic_env.run(
        "issue", "--task", str(dynamic_env.write_task(PKI_TASK.replace("role: agent", "role: agent-no-lease")))
    )
    assert result.code == 4
    assert "without a lease or serial" in result.stderr
    [withheld] = [r for r in dynamic_env.log_records() if r["event"] == "credential.issued"]
    assert serial_number(withheld["reference"]["serial"]) in crl_serials(engines) - before
    assert dynamic_env.session_dirs() == []


def ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        pytest.skip("ssh-keygen (openssh-client) is not installed")
    return found


def test_the_ssh_certificate_names_the_principals_and_ends_with_the_session(dynamic_env: BrokerEnv) -> None:
    dynamic_env.write_policy(DYNAMIC_GRANTS.replace("max_ttl: 1h", "max_ttl: 5m"))  # the session: 5m, not 20m
    document = issue(dynamic_env, SSH_TASK)
    directory = Path(document["dir"]) / "build-host"
    assert sorted(os.listdir(directory)) == ["id_ed25519", "id_ed25519-cert.pub", "ssh_config"]
    assert stat.S_IMODE(os.lstat(directory / "id_ed25519").st_mode) == 0o400
    shown = subprocess.run(
        [ssh_keygen(), "-L", "-f", str(directory / "id_ed25519-cert.pub")], capture_output=True, text=True, check=True
    ).stdout
    principals = shown.split("Principals:")[1].split("Critical Options:")[0].split()
    assert sorted(principals) == ["build", "git"]
    assert f"broker-{document['session']}-build-host" in shown  # the key id names the session
    valid = re.search(r"Valid: from (\S+) to (\S+)", shown)
    assert valid is not None
    start, end = (datetime.fromisoformat(v).astimezone(UTC) for v in valid.groups())  # printed in local time
    session_end = datetime.fromisoformat(document["expires_at"].replace("Z", "+00:00"))
    assert end <= session_end  # asked 10m, the session lasts 5m: the session wins
    assert (end - start).total_seconds() <= 5 * 60 + 30  # Vault back-dates the start by 30 s
    key = serialization.load_ssh_private_key((directory / "id_ed25519").read_bytes(), password=None)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    certified = serialization.load_ssh_public_identity((directory / "id_ed25519-cert.pub").read_bytes())
    assert isinstance(certified, serialization.SSHCertificate)
    assert (
        certified.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        == public
    )
    config = (directory / "ssh_config").read_text()
    assert "CertificateFile /run/secrets/build-host/id_ed25519-cert.pub" in config
    assert "IdentityFile /run/secrets/build-host/id_ed25519" in config
    assert document["env"]["GIT_SSH_COMMAND"] == "ssh -F /run/secrets/build-host/ssh_config"


def test_revoke_reports_that_an_ssh_certificate_stays_valid_until_expiry(dynamic_env: BrokerEnv) -> None:
    document = issue(dynamic_env, SSH_TASK)
    result = dynamic_env.run("revoke", "--session", document["session"], "--json")
    assert result.code == 0, result.stderr
    assert result.json()["credentials"] == [
        {"name": "build-host", "provider": "vault", "outcome": "valid-until-expiry"}
    ]
    assert dynamic_env.session_dirs() == []


def test_an_ssh_role_without_allow_user_key_ids_fails_issue_with_what_to_set(
    dynamic_env: BrokerEnv, engines: Engines
) -> None:
    dynamic_env.write_policy(DYNAMIC_GRANTS.replace('ssh_roles: ["agent"]', 'ssh_roles: ["agent*"]'))
    task = dynamic_env.write_task(SSH_TASK.replace("role: agent", f"role: {NO_KEY_ID_ROLE}"))
    result = dynamic_env.run("issue", "--task", str(task), "--json")
    assert result.code == 4, result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert f"ssh role '{NO_KEY_ID_ROLE}' does not set allow_user_key_ids" in result.stderr
    assert f"set allow_user_key_ids=true on ssh/roles/{NO_KEY_ID_ROLE}" in result.stderr
    assert "key_id is not allowed" not in result.stderr  # Vault's own text is not what the operator reads
    assert dynamic_env.session_dirs() == []
    assert dynamic_env.run("status", "--json").json() == []
