"""The identity figure: the broker as an issuer. A session token's cost, federation against a key, answers per second.

- **A session token** (goal: under 2 ms in the daemon with a file key): the
  ``identity`` provider's ``mint`` in a broker opened in this process as
  ``broker serve`` opens it (the key file read and cached, as in a daemon
  that has signed before), the file key (ES256) and OpenBao's transit engine
  (ecdsa-p256, the dev server on loopback) in alternating rounds. Beside it,
  a token of the broker's own with its ``identity.token`` record (the log's
  append and fsync), which a credential's token does not pay (its record is
  ``credential.issued``, part of any issue).
- **Web identity against an access key** (same provider work: GetRole and one
  assume, ``revoke = "expire"``): ``aws_sts`` ``mint`` with the broker's IAM
  key (``AssumeRole``) and with ``web_identity`` and a broker role
  (``AssumeRoleWithWebIdentity`` with a token signed per mint), against the
  moto that checks signatures, alternating. The web identity side includes
  what AWS does with the token (the stack's front: the JWKS fetched from the
  issuer on loopback, the signature checked), as it would at AWS.
- **JWKS and discovery answers per second**: ``broker.core.identity.wellknown``
  in process, and ``GET /.well-known/jwks.json`` / ``openid-configuration``
  on ``broker serve``'s socket, one keep-alive connection.

Run alone: ``python -m bench.serving.identity [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import ROOT, WORK, Report, Row, Settings, median, summary
from broker.core.broker import Broker
from broker.core.identity.wellknown import answer
from broker.core.inputs.config import load_config
from broker.vocab.errors import ManifestError
from broker.vocab.fields import Fields
from devstack.aws import REGION
from devstack.aws_iam import ROLE_ARN, start_iam_moto
from devstack.identity.aws_trust import BROKER_ROLE_ARN, WEB_ROLE_ARN
from devstack.net import free_port
from devstack.openbao import ROOT_TOKEN, start_openbao, stop_openbao, transit_key
from providers.base import Provider
from tests.fixtures.aws_sts import context
from tests.fixtures.brokerenv import BrokerEnv, make_env
from tests.fixtures.identity import IssuerServer


def _request(provider: Provider[Any], **body: Any) -> Any:
    fields = Fields({**body}, "credentials[0]", ManifestError)
    return provider.parse_request(fields, name="bench", provider=provider.name, ttl=None)


@contextlib.contextmanager
def _env(folder: Path, name: str, **identity: object) -> Iterator[BrokerEnv]:
    (folder / name).mkdir()
    env = make_env(folder / name)
    env.tables["identity"] = {"issuer": "https://broker.example.com", **identity}
    env.write_config()
    try:
        yield env
    finally:
        env.cleanup()


def session_tokens(report: Report, folder: Path, reps: int) -> None:
    bao = start_openbao()
    try:
        token_file = folder / "vault-token"
        token_file.write_text(ROOT_TOKEN)
        token_file.chmod(0o600)
        vault = {"type": "vault", "addr": bao.addr, "token_file": str(token_file)}
        with _env(folder, "file") as files, _env(folder, "transit", transit_key=transit_key(bao)) as transits:
            transits.add_provider("vault", vault)
            opened = {"file": files, "transit": transits}
            brokers = {side: Broker.open(load_config(env.config_path)) for side, env in opened.items()}
            try:
                samples, logged = _alternate(brokers, reps)
            finally:
                for broker in brokers.values():
                    broker.close()
    finally:
        stop_openbao(bao)
    file, transit = samples["file"], samples["transit"]
    value, p95 = median(file), sorted(file)[int(len(file) * 0.95) - 1]
    detail = f"p95 {p95:.3f} ms; a token with its identity.token record (log append + fsync): {median(logged):.2f} ms"
    name = "session token (identity mint), file key ES256, in the daemon's process"
    report.add(Row("identity", name, round(value, 3), "ms", "< 2 ms", value < 2, detail, summary(file)))
    name = "session token (identity mint), Vault transit ecdsa-p256 on loopback"
    detail = "one sign request to OpenBao per token; the key's versions read every 30 s"
    report.add(Row("identity", name, round(median(transit), 3), "ms", "", None, detail, summary(transit)))


def _alternate(brokers: dict[str, Broker], reps: int) -> tuple[dict[str, list[float]], list[float]]:
    """Each side's mint, alternating (the machine is shared); then the file issuer's logged tokens."""
    samples: dict[str, list[float]] = {side: [] for side in brokers}
    minting = replace(context(), ttl=900)
    mints = {}
    for side, broker in brokers.items():
        provider = broker.config.providers["identity"]
        request = _request(provider, audience="https://api.example.com")
        provider.mint(request, minting)  # the daemon has signed before: its key is read
        mints[side] = (provider, request)
    for _ in range(reps):
        for side, (provider, request) in mints.items():
            start = time.perf_counter()
            provider.mint(request, minting)
            samples[side].append((time.perf_counter() - start) * 1e3)
    issuer = brokers["file"].issuer
    assert issuer is not None
    logged = []
    for _ in range(max(5, reps // 10)):
        start = time.perf_counter()
        issuer.broker_token("vault", 300, purpose="bench")
        logged.append((time.perf_counter() - start) * 1e3)
    return samples, logged


def federation(report: Report, folder: Path, reps: int) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    moto = start_iam_moto(issuer=url, broker_subject=f"broker:{socket.gethostname()}")
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED")}
    os.environ.update(AWS_ACCESS_KEY_ID=moto.broker_key_id, AWS_SECRET_ACCESS_KEY=moto.broker_secret)
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    try:
        with _env(folder, "aws", issuer=url) as env:
            env.tables["identity"] = {"issuer": url}
            common = {"type": "aws_sts", "region": REGION, "endpoint_url": moto.url, "revoke": "expire"}
            env.add_provider("key", common)
            env.add_provider("web", {**common, "web_identity": True, "broker_role_arn": BROKER_ROLE_ARN})
            server = IssuerServer(url, port, env.config_path).start()
            broker = Broker.open(load_config(env.config_path))
            try:
                sides = {"key": ROLE_ARN, "web": WEB_ROLE_ARN}
                samples: dict[str, list[float]] = {"key": [], "web": []}
                minting = replace(context(), ttl=900)
                for side, role in sides.items():  # warm: connections, the broker role's keys
                    provider = broker.config.providers[side]
                    provider.mint(_request(provider, role_arn=role), minting)
                for _ in range(reps):
                    for side, role in sides.items():
                        provider = broker.config.providers[side]
                        request = _request(provider, role_arn=role)
                        start = time.perf_counter()
                        provider.mint(request, minting)
                        samples[side].append((time.perf_counter() - start) * 1e3)
            finally:
                broker.close()
                server.close()
    finally:
        moto.stop()
        for variable, before in saved.items():
            if before is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = before
    key, web = median(samples["key"]), median(samples["web"])
    name = "aws_sts mint via web identity (token + AssumeRoleWithWebIdentity)"
    detail = (
        f"via the access key (AssumeRole): {key:.2f} ms; both GetRole + one assume against moto; web identity"
        " includes the front's JWKS fetch and signature check, AWS's side"
    )
    data = {"web": summary(samples["web"]), "key": summary(samples["key"])}
    report.add(Row("identity", name, round(web, 2), "ms", "", None, detail, data))


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("broker")
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def answers(report: Report, folder: Path, count: int) -> None:
    with _env(folder, "serve") as env:
        sock = Path(tempfile.mkdtemp(dir="/tmp", prefix="bench-identity-")) / "broker.sock"
        env.tables["daemon"] = {"socket": str(sock)}
        env.write_config()
        broker = Broker.open(load_config(env.config_path))
        try:
            assert broker.issuer is not None
            issuer, providers, store = broker.issuer, broker.config.providers, broker.store
            for path in ("/.well-known/jwks.json", "/.well-known/openid-configuration"):
                answer(issuer, providers, store, path, broker.clock())
            local: dict[str, float] = {}
            for path in ("/.well-known/jwks.json", "/.well-known/openid-configuration"):
                start = time.perf_counter()
                for _ in range(count):
                    answer(issuer, providers, store, path, broker.clock())
                local[path] = count / (time.perf_counter() - start)
        finally:
            broker.close()
        daemon = subprocess.Popen(
            [sys.executable, "-m", "broker", "--config", str(env.config_path), "serve"], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            served: dict[str, float] = {}
            connection = _UnixConnection(str(sock))
            for path in ("/.well-known/jwks.json", "/.well-known/openid-configuration"):
                connection.request("GET", path)
                connection.getresponse().read()
                start = time.perf_counter()
                for _ in range(count):
                    connection.request("GET", path)
                    connection.getresponse().read()
                served[path] = count / (time.perf_counter() - start)
            connection.close()
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    for path in ("/.well-known/jwks.json", "/.well-known/openid-configuration"):
        name = f"{path.rsplit('/', 1)[-1]} answers per second, broker serve's socket (keep-alive)"
        detail = f"in process (wellknown.answer): {local[path]:,.0f}/s; one connection, one client thread"
        data = {"socket": served[path], "in_process": local[path]}
        report.add(Row("identity", name, round(served[path]), "/s", "", None, detail, data))


def figure_identity(settings: Settings, report: Report) -> None:
    measure(report, quick=settings.quick)


def measure(report: Report, *, quick: bool) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WORK, prefix="identity-") as folder:
        root = Path(folder)
        session_tokens(report, root, 51 if quick else 501)
        federation(report, root, 7 if quick else 31)
        answers(report, root, 500 if quick else 5000)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serving.identity", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    measure(Report(), quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
