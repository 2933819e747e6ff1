"""The PostgreSQL store's schema, as numbered migrations applied once each, in order.

Brokers on many hosts open the same database, possibly at different
versions during a rollout: migrations run in one transaction under an
advisory lock (two brokers starting together never both apply one), each
version is recorded in ``schema_version``, and a broker refuses a database
that a newer broker has already moved past what it knows.
"""

from __future__ import annotations

from typing import Any

from broker.vocab.errors import StoreError

#: Any 64-bit number no other lock uses: held (per transaction) while migrating.
MIGRATION_LOCK = 0x62726F6B65720001

MIGRATIONS: tuple[str, ...] = (
    # 1: sessions with their owning host, credentials, the log heads and witness state per host,
    #    and the deny records providers compute their deny documents from.
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        task TEXT NOT NULL,
        requester TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        dir TEXT NOT NULL,
        mount_path TEXT NOT NULL,
        uid INTEGER NOT NULL,
        gid INTEGER NOT NULL,
        mounted BOOLEAN NOT NULL,
        document TEXT,
        exec_bound BOOLEAN NOT NULL DEFAULT FALSE,
        manifest TEXT
    );
    CREATE INDEX sessions_state ON sessions(state);
    CREATE INDEX sessions_task ON sessions(task);
    CREATE TABLE credentials (
        ord BIGSERIAL,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        name TEXT NOT NULL,
        provider TEXT NOT NULL,
        type TEXT NOT NULL,
        state TEXT NOT NULL,
        reference TEXT NOT NULL DEFAULT '{}',
        scope TEXT NOT NULL DEFAULT '{}',
        expires_at TIMESTAMPTZ,
        fingerprint TEXT,
        PRIMARY KEY (session_id, name)
    );
    CREATE INDEX credentials_state ON credentials(state);
    CREATE INDEX credentials_expiry ON credentials(provider, expires_at);
    CREATE TABLE log_head (host TEXT PRIMARY KEY, seq BIGINT NOT NULL, hash TEXT NOT NULL);
    CREATE TABLE witness_pending (
        host TEXT NOT NULL,
        seq BIGINT NOT NULL,
        hash TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (host, seq)
    );
    CREATE TABLE witness_status (host TEXT PRIMARY KEY, last_success_at TEXT, last_error TEXT);
    CREATE TABLE checked_prefix (
        host TEXT NOT NULL, log TEXT NOT NULL, document TEXT NOT NULL, PRIMARY KEY (host, log)
    );
    CREATE TABLE deny_records (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        until TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (scope, key, value)
    );
    """,
    # 2: the fleet's issuance log, one hash chain in one seq order (each record its exact canonical JSON text,
    #    so hashes re-verify byte for byte), and the public keys hosts sign its checkpoints with.
    """
    CREATE TABLE issuance_log (
        seq BIGINT PRIMARY KEY CHECK (seq > 0),
        hash TEXT NOT NULL,
        host TEXT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE TABLE audit_keys (
        key_id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        public_key TEXT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    """,
    # 3: the malformed rows already recorded in the issuance log (by the SHA-256 of their key), so each is
    #    recorded once for the fleet however many hosts sweep past it.
    """
    CREATE TABLE malformed_reported (
        digest TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        reported_at TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    """,
    # 4: the requester's uid on the session's host: through a daemon a peer owns (host, uid), never a user name
    #    (which another host may give to someone else). Rows that named a uid keep it; a name stays NULL: root's.
    """
    ALTER TABLE sessions ADD COLUMN requester_uid BIGINT;
    UPDATE sessions SET requester_uid = CAST(substr(requester, 5) AS BIGINT) WHERE requester ~ '^uid:[0-9]{1,10}$';
    """,
    # 5: approval requests (each with its awaiting-approval session, durable across restarts and hosts), and
    #    the session a delegated one came from, with the levels of children a session may still ask for.
    """
    ALTER TABLE sessions ADD COLUMN parent TEXT;
    ALTER TABLE sessions ADD COLUMN delegate_depth INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX sessions_parent ON sessions(parent);
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY REFERENCES sessions(id),
        task TEXT NOT NULL,
        requester TEXT NOT NULL,
        requester_uid BIGINT,
        state TEXT NOT NULL,
        digest TEXT NOT NULL,
        summary TEXT NOT NULL,
        approvers TEXT NOT NULL,
        timeout INTEGER NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        host TEXT NOT NULL,
        decided_at TIMESTAMPTZ,
        decided_by TEXT,
        decided_by_uid BIGINT,
        reason TEXT
    );
    CREATE INDEX approvals_state ON approvals(state);
    """,
    # 6: a revoke on one host of a session another host holds asks that host (LISTEN/NOTIFY wakes its daemon) to
    #    finish what only it can; the ask stays here until that host has (its next start or sweep, if it was down).
    """
    CREATE TABLE revoke_requests (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id),
        host TEXT NOT NULL,
        asked_by TEXT NOT NULL,
        asked_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        done_at TIMESTAMPTZ,
        dir_removed BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX revoke_requests_waiting ON revoke_requests(host) WHERE done_at IS NULL;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(connection: Any, where: str) -> int:
    """Apply the migrations ``connection``'s database lacks; the version it is at after."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        connection.execute(
            "CREATE TABLE IF NOT EXISTS schema_version"
            " (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        current = current_version(connection)
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"session store {where} has schema version {current}, newer than this broker's {SCHEMA_VERSION};"
                " upgrade the broker"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            connection.execute(MIGRATIONS[version - 1].encode())
            connection.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    return SCHEMA_VERSION


def current_version(connection: Any) -> int:
    row = connection.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    return int(row[0])
