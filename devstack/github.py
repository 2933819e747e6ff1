"""The GitHub side of the local stack: the App's key pair and the emulator's one installation.

The installation is on organisation ``octo-org``, holding ``widgets``,
``docs-site`` and ``secret-infra`` with contents, pull_requests and issues
at write and metadata at read. ``start_emulator`` runs the emulator
(``devstack/github_app.py``) in a thread of this process;
``emulator_command`` runs the same one in a process of its own.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from devstack.github_app import GitHubAppEmulator

APP_ID = 424242
CLIENT_ID = "Iv23liBrokerTests01"
OWNER = "octo-org"
REPOSITORIES = ("widgets", "docs-site", "secret-infra")
PERMISSIONS = {"contents": "write", "pull_requests": "write", "metadata": "read", "issues": "write"}


@dataclass(frozen=True)
class AppKeys:
    private_pem: bytes
    public_pem: bytes


def rsa_key_pair(bits: int = 2048) -> AppKeys:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return AppKeys(private, public)


def write_key(path: Path, pem: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(pem)
    path.chmod(mode)
    return path


def new_emulator(keys: AppKeys, port: int = 0) -> GitHubAppEmulator:
    """The emulator with the stack's App and its one installation (not started)."""
    emulator = GitHubAppEmulator(app_id=APP_ID, public_key_pem=keys.public_pem, client_id=CLIENT_ID, port=port)
    emulator.add_installation(OWNER, REPOSITORIES, PERMISSIONS)
    return emulator


def emulator_command(public_key: Path, port: int) -> list[str]:
    """``python -m devstack.github_app`` with the same App and installation, for a process of its own."""
    permissions = ",".join(f"{name}={level}" for name, level in PERMISSIONS.items())
    installation = f"{OWNER}:{','.join(REPOSITORIES)}:{permissions}"
    return [
        sys.executable,
        "-m",
        "devstack.github_app",
        "--port",
        str(port),
        "--app-id",
        str(APP_ID),
        "--client-id",
        CLIENT_ID,
        "--public-key",
        str(public_key),
        "--installation",
        installation,
    ]
