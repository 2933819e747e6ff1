"""The whole local stack started together: in this process (the demo) or each server in its own (the bench).

``Stack`` runs OpenBao, the moto server and the GitHub App emulator as child
processes, so none of them shares the driver's GIL, as real services would
not; ``in_process`` runs moto and the emulator in threads here, so the
caller can ask the emulator object whether a token is still live.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.aws import ROLE_NAME, create_role, iam_client, start_moto
from devstack.github import AppKeys, emulator_command, new_emulator, rsa_key_pair
from devstack.github_app import GitHubAppEmulator
from devstack.net import free_port, wait_http, wait_port
from devstack.openbao import OpenBao, start_openbao, stop_openbao

#: The repository root: child servers run from here, so ``python -m devstack...`` finds the package.
ROOT = Path(__file__).resolve().parents[1]


class Stack:
    """OpenBao dev server, moto server and the GitHub App emulator, each its own process."""

    def __init__(
        self, work: Path, roles: Sequence[str] = (ROLE_NAME,), identity: Mapping[str, str] | None = None
    ) -> None:
        self.work = work
        self.roles = tuple(roles)
        self.identity = dict(identity or {})
        self.bao: OpenBao | None = None
        self.children: list[subprocess.Popen[bytes]] = []
        self.aws_url = ""
        self.github_url = ""
        self.private_pem = b""
        self.role_ids: dict[str, str] = {}

    def start(self) -> None:
        self.bao = start_openbao()
        moto_port = free_port()
        self.children.append(
            subprocess.Popen(
                [sys.executable, "-m", "devstack.aws", str(moto_port)], stdout=subprocess.DEVNULL, cwd=ROOT
            )
        )
        self.aws_url = f"http://127.0.0.1:{moto_port}"
        wait_http(f"{self.aws_url}/moto-api/")
        keys = rsa_key_pair()
        self.private_pem = keys.private_pem
        public = self.work / "github-app.pub.pem"
        public.write_bytes(keys.public_pem)
        github_port = free_port()
        self.children.append(
            subprocess.Popen(emulator_command(public, github_port), stdout=subprocess.DEVNULL, cwd=ROOT)
        )
        self.github_url = f"http://127.0.0.1:{github_port}"
        wait_port(github_port)
        for name in self.roles:
            self.role_ids[name] = create_role(self.aws_url, name, **self.identity)["RoleId"]

    def iam(self) -> Any:
        return iam_client(self.aws_url, **self.identity)

    def pids(self) -> dict[str, int]:
        """The server processes by name (openbao, moto, github)."""
        pids = {"openbao": self.bao.process.pid if self.bao else 0}
        pids.update({name: child.pid for name, child in zip(("moto", "github"), self.children, strict=False)})
        return pids

    def stop(self) -> None:
        for child in self.children:
            child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        if self.bao is not None:
            stop_openbao(self.bao)


@dataclass(frozen=True)
class InProcess:
    bao: OpenBao
    aws_url: str
    github: GitHubAppEmulator
    keys: AppKeys


@contextlib.contextmanager
def in_process(identity: Mapping[str, str]) -> Iterator[InProcess]:
    """The stack with moto and the emulator in threads of this process; the role ``agent-ci`` exists."""
    bao = start_openbao()
    moto = start_moto()
    keys = rsa_key_pair()
    github = new_emulator(keys).start()
    try:
        create_role(moto.url, **identity)
        yield InProcess(bao, moto.url, github, keys)
    finally:
        github.stop()
        moto.stop()
        stop_openbao(bao)
