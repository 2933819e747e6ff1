"""Daemons of two hosts on one PostgreSQL store: a session belongs to a uid on the host that issued it.

The same peer uid (a uid with no account, so the requester is ``uid:N`` on
both hosts, as ``alice`` would be) asks host B's daemon for a session, then
host A's daemon to show, renew or revoke it. Before the fix host A decided
ownership by the requester's name and let it; now a peer owns only its own
uid's sessions issued by the daemon's own host, and root on a host may still
act on every session of the fleet.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import SOCKET_GID, Daemon
from tests.fixtures.fleet import FleetDb, create_fleet_db, new_host
from tests.fixtures.openbao import OpenBao
from tests.fixtures.postgres import Postgres

pytestmark = pytest.mark.server

PEER_UID = 59123  # no account on either "host"


@pytest.fixture
def two_daemons(tmp_path: Path, openbao: OpenBao, postgres: Postgres) -> Iterator[tuple[Daemon, Daemon]]:
    db: FleetDb = create_fleet_db(postgres, tmp_path)
    daemons = []
    for name in ("host-a", "host-b"):
        env = new_host(tmp_path, openbao, db, name)
        shared = Path(tempfile.mkdtemp(prefix=f"broker-{name}-", dir="/tmp"))
        shared.chmod(0o755)
        env.tables["daemon"] = {"socket": str(shared / "broker.sock"), "socket_group": str(SOCKET_GID)}
        env.write_config()
        daemons.append(Daemon(env, shared))
    try:
        yield daemons[0], daemons[1]
    finally:
        for daemon in daemons:
            if daemon.process is not None:
                daemon.stop(signal.SIGKILL)
            daemon.env.cleanup()
            shutil.rmtree(daemon.shared, ignore_errors=True)


def _states(daemon: Daemon) -> dict[str, str]:
    listed = daemon.client("status", "--all", "--json")
    assert listed.code == 0, listed.stderr
    return {item["session"]: item["state"] for item in listed.json()}


def test_the_same_uid_on_another_host_cannot_see_renew_or_revoke_a_session(
    two_daemons: tuple[Daemon, Daemon], openbao: OpenBao
) -> None:
    a, b = (daemon.start() for daemon in two_daemons)
    issued = b.client("issue", "--task", str(b.task()), "--json", uid=PEER_UID)
    assert issued.code == 0, issued.stderr
    session = issued.json()["session"]
    here = a.client("issue", "--task", str(a.task()), "--json", uid=PEER_UID)
    assert here.code == 0, here.stderr

    seen = a.client("status", "--all", "--json", uid=PEER_UID)
    assert (seen.code, [item["session"] for item in seen.json()]) == (0, [here.json()["session"]])
    for verb in ("revoke", "renew"):
        refused = a.client(verb, "--session", session, uid=PEER_UID)
        assert (refused.code, refused.stdout) == (3, ""), refused.stderr
        assert session in refused.stderr and refused.stderr.count("\n") == 1
    by_task = a.client("revoke", "--task", "fix-build-7", "--json", uid=PEER_UID)
    assert by_task.code == 0, by_task.stderr
    assert [report["session"] for report in by_task.json()] == [here.json()["session"]]  # its own, on this host
    assert _states(a)[session] == "active"
    denied = [r for r in a.env.log_records() if r["event"] == "session.denied"]
    assert [(r["session"], r["action"], r["requester"]) for r in denied] == [
        (session, "revoke", f"uid:{PEER_UID}"),
        (session, "renew", f"uid:{PEER_UID}"),
    ]

    mine = b.client("status", "--json", uid=PEER_UID)  # on its own host the peer still has it
    assert [item["session"] for item in mine.json()] == [session]
    assert a.client("revoke", "--session", session).code == 0  # root on any host acts on every session
    assert _states(b)[session] == "revoked"
