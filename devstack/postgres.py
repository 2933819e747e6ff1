"""A real PostgreSQL server on a free loopback port, with password authentication (scram-sha-256, never trust).

The machine's server binaries (``initdb``, ``pg_ctl``, ``postgres``) start a
throw-away cluster in a temporary folder; as root they run as ``nobody``
(``initdb`` refuses root). Where the binaries are missing, the ones bundled in
the ``pgserver`` wheel are used if it is installed; otherwise ``start_postgres``
raises ``StackUnavailable``. The superuser ``postgres`` has a random password:
Vault's database engine logs in with it, and every other login needs its own
password too. ``stop_server``/``start_server`` take the same cluster down and
up again (a database restart, as the fleet tests and the bench need).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.net import free_port
from devstack.openbao import StackUnavailable

SUPERUSER = "postgres"


def server_bin_dir() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``: PATH, Debian's layout, then ``pgserver``."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    try:
        import pgserver  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    bundled = Path(pgserver.__file__).parent / "pginstall" / "bin"
    return bundled if (bundled / "initdb").exists() else None


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    password: str
    data_dir: Path
    run_as: tuple[int, int] | None
    options: str  # the server options ``pg_ctl start`` passes, again on each restart

    def dsn(self, user: str = SUPERUSER, password: str | None = None, dbname: str = "postgres") -> str:
        secret = self.password if password is None else password
        return f"host={self.host} port={self.port} dbname={dbname} user={user} password={secret} sslmode=disable"

    def vault_connection_url(self) -> str:
        """The templated URL Vault's postgresql-database-plugin logs in with."""
        return f"postgresql://{{{{username}}}}:{{{{password}}}}@{self.host}:{self.port}/postgres?sslmode=disable"

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run ``sql`` as the superuser (password login) and return its rows."""
        import psycopg

        with psycopg.connect(self.dsn(), connect_timeout=10) as connection, connection.cursor() as cursor:
            cursor.execute(sql.encode(), params or None)
            return list(cursor.fetchall()) if cursor.description else []

    def role_exists(self, name: str) -> bool:
        return bool(self.query("SELECT 1 FROM pg_roles WHERE rolname = %s", name))


def _owner() -> tuple[int, int] | None:
    """Who runs the server: ``nobody`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def _run(command: list[str], run_as: tuple[int, int] | None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    if run_as is not None:
        kwargs.update(user=run_as[0], group=run_as[1], extra_groups=[])
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120, **kwargs)


def start_postgres(max_connections: int = 50) -> Postgres:
    bin_dir = server_bin_dir()
    if bin_dir is None:
        raise StackUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) and no pgserver wheel")
    run_as = _owner()
    root = Path(tempfile.mkdtemp(prefix="broker-pg-"))
    data, sockets, pwfile = root / "data", root / "sock", root / "pwfile"
    sockets.mkdir()
    password = secrets.token_urlsafe(24)
    pwfile.write_text(password + "\n")
    if run_as is not None:
        for path in (root, sockets, pwfile):
            os.chown(path, *run_as)
    os.chmod(pwfile, 0o400)
    port = free_port()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C", "HOME": str(root)}
    _run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--no-sync",
        ],
        run_as,
        env=env,
        cwd=root,
    )
    pwfile.unlink()
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections={max_connections}"
    server = Postgres(host="127.0.0.1", port=port, password=password, data_dir=data, run_as=run_as, options=options)
    start_server(server)
    return server


def _pg_ctl(server: Postgres, *arguments: str) -> None:
    bin_dir = server_bin_dir()
    assert bin_dir is not None
    root = server.data_dir.parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C", "HOME": str(root)}
    _run([str(bin_dir / "pg_ctl"), "-D", str(server.data_dir), *arguments], server.run_as, env=env, cwd=root)


def start_server(server: Postgres) -> None:
    """Start the cluster (again): same port, same options; returns once it accepts connections."""
    _pg_ctl(server, "-l", str(server.data_dir.parent / "server.log"), "-o", server.options, "-w", "start")


def stop_server(server: Postgres, mode: str = "fast") -> None:
    """Stop the cluster, keeping its data: ``fast`` ends every connection, ``immediate`` is a crash."""
    _pg_ctl(server, "-m", mode, "-w", "stop")


def stop_postgres(server: Postgres) -> None:
    """Stop the cluster and remove it."""
    try:
        with contextlib.suppress(subprocess.CalledProcessError):  # already down
            stop_server(server, "immediate")
    finally:
        shutil.rmtree(server.data_dir.parent, ignore_errors=True)


@dataclass(frozen=True)
class FleetDb:
    """A database for a fleet's store: its URL (no password) and the pgpass file that holds the password."""

    url: str
    passfile: Path
    name: str


def create_fleet_db(server: Postgres, folder: Path) -> FleetDb:
    """A fresh database on ``server``; its password goes to ``folder/pgpass`` (mode 0600), never into the URL."""
    import psycopg

    name = "fleet_" + secrets.token_hex(6)
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as connection:
        connection.execute(f"CREATE DATABASE {name}".encode())  # hex digits: nothing to quote
    passfile = folder / "pgpass"
    passfile.write_text(f"{server.host}:{server.port}:{name}:{SUPERUSER}:{server.password}\n")
    passfile.chmod(0o600)
    return FleetDb(f"postgresql://{SUPERUSER}@{server.host}:{server.port}/{name}", passfile, name)
