"""The AWS side of the local stack: a moto server on loopback and the role the stack's task assumes.

moto emulates the STS and IAM APIs but enforces no IAM (no trust policies,
no session policies, no MaxSessionDuration, no 10,240 budget), so what runs
against it shows what the broker sends and stores, not what AWS would deny.
``start_moto`` runs the server in this process (tests may then read moto's
backends); ``python -m devstack.aws PORT`` runs it in a process of its own
until SIGTERM (the bench: moto's request handling stays off the driver's GIL),
with ``--presigned`` checking and serving presigned S3 URLs under IAM
authentication (``devstack.aws_presign``).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import urllib.request
from dataclasses import dataclass
from typing import Any

ACCOUNT = "123456789012"
REGION = "us-east-1"
ROLE_NAME = "agent-ci"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{ROLE_NAME}"
TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
            "Action": ["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"],
        }
    ],
}


@dataclass(frozen=True)
class MotoServer:
    url: str
    server: Any  # moto.server.ThreadedMotoServer

    def stop(self) -> None:
        self.server.stop()


def start_moto(port: int = 0) -> MotoServer:
    """A ThreadedMotoServer on 127.0.0.1 (a free port unless given), in this process."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    return MotoServer(f"http://{host}:{bound}", server)


def reset_moto(endpoint_url: str) -> None:
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def iam_client(endpoint_url: str, **identity: str) -> Any:
    import boto3

    return boto3.client("iam", region_name=REGION, endpoint_url=endpoint_url, **identity)


def create_role(endpoint_url: str, name: str = ROLE_NAME, **identity: str) -> dict[str, Any]:
    """A role trusting the account (MaxSessionDuration 3600), as the stack's task assumes it."""
    role: dict[str, Any] = iam_client(endpoint_url, **identity).create_role(
        RoleName=name,
        AssumeRolePolicyDocument=json.dumps(TRUST_POLICY),
        MaxSessionDuration=3600,
    )["Role"]
    return role


def start_moto_presigned(port: int) -> MotoServer:
    """``start_moto`` with presigned S3 URLs checked and served under IAM authentication (``devstack.aws_presign``)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    from devstack.aws_presign import PresignedAsHeaders

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = PresignedAsHeaders(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", port, app, True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return MotoServer(f"http://127.0.0.1:{server.server_address[1]}", _Served(server))


@dataclass(frozen=True)
class _Served:
    server: Any

    def stop(self) -> None:
        self.server.shutdown()


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or not argv[0].isdigit() or argv[1:] not in ([], ["--presigned"]):
        sys.stderr.write("usage: python -m devstack.aws PORT [--presigned]\n")
        return 2
    moto = start_moto_presigned(int(argv[0])) if argv[1:] else start_moto(int(argv[0]))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print("moto listening", flush=True)
    done.wait()
    moto.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
