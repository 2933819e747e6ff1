"""The operator's config file in the reference: the core's own tables (each provider type declares its own).

The config changes with the operator's settings, the task documents (``broker.cli.manual.documents``)
with what a task may ask; ``broker.cli.manual`` renders all three.
"""

from __future__ import annotations

from broker.egress.evidence.budget import MANUAL_INTRO, MANUAL_KEYS, SIZE
from broker.vocab.manual import Key, Section

DURATION = "duration"

ENGINE_KEYS = (
    Key(
        "runtime",
        "name or path",
        False,
        "The engine's --runtime for every run (runc on a host crun fails on).",
        "its own",
    ),
    Key(
        "ulimits",
        "list",
        False,
        "--ulimit NAME=SOFT[:HARD] for every run (nofile=4096:4096), where the engine's defaults exceed the host's"
        " hard limits.",
        "none",
    ),
    Key(
        "extra_args",
        "list",
        False,
        "More of the engine's run options, each --NAME=VALUE with NAME one of annotation, hostname, init-path, label,"
        " log-driver, log-opt, security-opt (a seccomp or apparmor profile, an SELinux type or level: never"
        " unconfined) or shm-size; nothing that adds a capability, a device, a mount, a network or another user.",
        "none",
    ),
)
ENGINE_NOTE = (
    "broker exec --sandbox podman|docker --image IMAGE runs the engine's CLI as root: the container as the manifest's"
    " sandbox user, --cap-drop=ALL, no-new-privileges, a read-only root, --pull=never, --init."
)

CORE_CONFIG = (
    Section(
        "Config: top level",
        "",
        (
            Key(
                "state_dir",
                "path",
                False,
                "Session store and issuance log (persistent, no secrets). A directory of its own: not a"
                " shared system directory (/, /run, /tmp, /var/run, /dev/shm, /var/tmp) or a home directory.",
                "/var/lib/broker",
            ),
            Key(
                "runtime_dir",
                "path",
                False,
                "Per-session tmpfs directories. A directory of its own, like state_dir: sweep removes the"
                " session directories it finds there and reports anything else as foreign.",
                "/run/broker",
            ),
            Key("policy_dir", "path", False, "Directory of *.yaml policy files.", "/etc/broker/policies"),
            Key(
                "audit_key",
                "path",
                False,
                "Ed25519 key that signs checkpoints; created 0400 on first use.",
                "/etc/broker/audit.key",
            ),
            Key(
                "fingerprint_key",
                "path",
                False,
                "HMAC key for fingerprints and audit lookup; created 0400 on first use.",
                "fingerprint.key beside audit_key",
            ),
            Key("default_ttl", DURATION, False, "Session lifetime when the manifest gives none.", "30m"),
            Key("max_ttl", DURATION, False, "Ceiling for every session and credential.", "12h"),
            Key(
                "mount_tmpfs",
                "auto | always | never",
                False,
                "auto: a tmpfs per session when the broker holds CAP_SYS_ADMIN (else runtime_dir must be tmpfs);"
                " never: runtime_dir itself must be tmpfs.",
                "auto",
            ),
            Key(
                "store",
                "postgresql://USER@HOST[:PORT]/DB",
                False,
                "Fleet mode: sessions, credential states, locks, AWS deny entries and the issuance log (one hash"
                " chain) in one PostgreSQL database shared by brokers on many hosts; no password in the URL.",
                "SQLite in state_dir",
            ),
            Key("store_passfile", "path", False, "The pgpass file (mode 0600) holding the store's password."),
            Key(
                "fleet_revoke_wait",
                "duration (0s: none)",
                False,
                "Fleet mode: how long a revoke of a session another host holds waits, while that host's daemon"
                " listens, for it to revoke what only it can (GitHub tokens, the tmpfs, a running exec); then pending.",
                "5s",
            ),
            Key(
                "host",
                "string",
                False,
                "This broker's name in the fleet; only it touches its sessions' directories.",
                "the hostname",
            ),
            Key("providers", "table", False, "One [providers.NAME] table per provider instance."),
            Key("audit", "table", False, "[audit]: the issuance log's witness, and its free room."),
            Key("daemon", "table", False, "[daemon]: broker serve, and the CLI as its thin client."),
            Key("egress", "table", False, "[egress]: the session proxy's upstream trust, and its evidence budget."),
            Key("telemetry", "table", False, "[telemetry]: traces to an OpenTelemetry collector."),
            Key("gateway", "table", False, "[gateway]: broker serve's one egress proxy for many sessions."),
            Key("sandbox", "table", False, "[sandbox.podman], [sandbox.docker]: what exec's container engine needs."),
            Key("identity", "table", False, "[identity]: the broker as an OpenID Connect issuer."),
        ),
        "Relative paths are relative to the config file. Durations: 90s, 15m, 1h or whole seconds.",
    ),
    Section(
        "Config: [audit]",
        "audit",
        (
            Key("witness", "s3://BUCKET/PREFIX", False, "Every checkpoint is also written there under Object Lock."),
            Key("witness_endpoint_url", "URL", False, "S3 endpoint (moto, MinIO, VPC endpoints)."),
            Key("witness_region", "string", False, "The bucket's region; the default chain otherwise."),
            Key("witness_profile", "string", False, "AWS profile that may write the bucket; default chain otherwise."),
            Key("witness_retention", "duration (d allowed)", False, "COMPLIANCE retention of each object.", "400d"),
            Key(
                "witness_interval",
                "duration (d allowed)",
                False,
                "0s: every checkpoint; else only the newest, at most once per interval.",
                "0s",
            ),
            Key(
                "min_free",
                SIZE,
                False,
                "No new issue (exit 2) while state_dir's file system has less free; 16 MiB (or min_free if smaller),"
                " state_dir/issuance.reserve, stay for revoke and sweep: a session's proxy answers 503 rather than"
                " take them. 0: not checked. Not in a fleet (the log is the database's).",
                "1GiB",
            ),
        ),
        "The bucket must have Object Lock enabled; the broker's identity needs s3:PutObject and"
        " s3:PutObjectRetention on PREFIX, auditors s3:ListBucketVersions.",
    ),
    Section(
        "Config: [egress]",
        "egress",
        (
            Key(
                "upstream_ca_file", "path", False, "CA bundle the proxy checks operations-only hosts against.", "system"
            ),
            Key(
                "secret_refresh",
                "duration",
                False,
                "How often a running session checks each kind: secret for a new KV version.",
                "60s",
            ),
            Key(
                "policy_refresh",
                "duration",
                False,
                "How often, at the latest, a running session reads the policy again and decides its manifest (a"
                " changed policy file is read at its next decision); a withdrawn grant stops its renewals, children"
                " and session allow.",
                "60s",
            ),
            Key("evidence_budget", "table", False, "Each session's egress.request records: see its table.", "below"),
        ),
        "A credential's own hosts keep their provider's upstream_ca_file.",
    ),
    Section(
        "Config: [egress] evidence_budget",
        "egress.evidence_budget",
        tuple(Key(*k) for k in MANUAL_KEYS),
        MANUAL_INTRO,
    ),
    Section(
        "Config: [daemon]",
        "daemon",
        (
            Key(
                "socket",
                "path",
                False,
                "Where broker serve listens; when set, issue, revoke, status, renew and policy check go through it"
                " (as with BROKER_SOCKET) and exit 7 when it cannot be reached.",
                "runtime_dir/broker.sock (for broker serve only)",
            ),
            Key("socket_group", "group name or number", False, "Group of the 0660 socket.", "the daemon's group"),
            Key("sweep_interval", DURATION, False, "How often the daemon sweeps.", "60s"),
            Key(
                "max_connections_per_uid",
                "integer 1-512",
                False,
                "Connections one peer uid may hold at once (an exec holds one while it runs); more are answered"
                " 503 and closed. Root and the daemon's own uid are always served; every other uid shares 512.",
                "32",
            ),
            Key(
                "metrics_listen",
                "ADDRESS:PORT",
                False,
                "Also serve GET /metrics (Prometheus) on this plain HTTP listener, e.g. 127.0.0.1:9464; anyone"
                " who reaches it may read them. On the socket, root and the daemon's uid may.",
                "none",
            ),
        ),
        "The daemon reads the provider credentials; its clients need only the socket"
        " (and this file, or BROKER_SOCKET).",
    ),
    Section(
        "Config: [gateway]",
        "gateway",
        (
            Key(
                "listen",
                "ADDRESS:PORT",
                True,
                "Where broker serve's gateway listens (an IP address, 0.0.0.0 or :: for all); sessions issued with"
                " broker issue --gateway reach their egress through it, each request naming its session by its"
                " proxy credential.",
            ),
            Key(
                "cert_file",
                "path",
                False,
                "The gateway's TLS certificate chain (PEM). Required, with key_file, on any address that is not"
                " loopback: broker serve refuses to start without it there.",
                "no TLS (loopback only)",
            ),
            Key("key_file", "path", False, "The key of cert_file (PEM; it may be cert_file itself)."),
            Key(
                "ca_file",
                "path",
                False,
                "The CA certificate clients need to trust cert_file (a private CA): added to every gateway session's"
                " ca-bundle.pem, which git (GIT_PROXY_SSL_CAINFO), curl (proxy/.curlrc), requests, pip and boto3"
                " are pointed at.",
                "none (a CA the sandboxes trust already)",
            ),
            Key(
                "advertise",
                "HOST:PORT",
                False,
                "The address sandboxes reach the gateway at, which each session's proxy_url names (a name the"
                " certificate covers, a load balancer's per-host name in a fleet).",
                "listen (required when listen is 0.0.0.0 or ::)",
            ),
            Key(
                "max_connections",
                "integer 1-65536",
                False,
                "Connections the gateway serves at once, every session's together; more are closed at once.",
                "4096",
            ),
        ),
        "A session's proxy credential is the file proxy/credential in its directory (0400); its proxy_url names the"
        " session (the user) and never the secret. The gateway holds its sessions until they are revoked or expire,"
        " and revokes them when broker serve stops. See docs/gateway.md.",
    ),
    Section(
        "Config: [identity]",
        "identity",
        (
            Key(
                "issuer",
                "URL",
                True,
                "The issuer (iss): https, plain http only for 127.0.0.0/8, ::1 or localhost; no user, query or"
                " fragment. Verifiers fetch ISSUER/.well-known/openid-configuration and the JWKS it names.",
            ),
            Key(
                "signing_key_file",
                "path",
                False,
                "The signing key and the retired public keys (JSON, 0600), created on first use.",
                "identity.key beside audit_key",
            ),
            Key("algorithm", "ES256 | RS256", False, "A new file key's algorithm.", "ES256"),
            Key(
                "transit_key",
                "string",
                False,
                "Sign with this Vault transit key instead (ecdsa-p256, or rsa-2048 and larger): it never leaves"
                " Vault; each version stays in the JWKS until its last token ends.",
            ),
            Key(
                "transit_vault",
                "string",
                False,
                "The vault instance whose transit engine holds it (one that does not log in with the issuer's own"
                " tokens).",
                "the one vault instance",
            ),
            Key("transit_mount", "string", False, "Mount path of that transit engine.", "transit"),
        ),
        "Alone it makes the broker an issuer, with a provider instance named identity (provider: identity);"
        " broker identity jwks, discovery, revoked and rotate-key, and broker serve's well-known routes, publish"
        " it. A token lives at most an hour and never past its session. See docs/identity.md.",
    ),
    Section(
        "Config: [telemetry]",
        "telemetry",
        (
            Key("otlp_endpoint", "URL", False, "OTLP/HTTP collector; no path: /v1/traces. See the note.", "no traces"),
            Key("service_name", "string", False, "The traces' service.name.", "broker"),
            Key("headers_file", "path", False, "Headers the collector needs (an API key): Name: value lines, 0600."),
            Key("ca_file", "path", False, "CA bundle to verify an https:// collector with.", "the system's"),
            Key("timeout", DURATION, False, "The most a command waits for its traces to leave (at most 10s).", "1s"),
        ),
        "otlp_endpoint is https://, or http:// to loopback only, with no user, password or query. Needs the extra"
        " broker[otel] (the OpenTelemetry SDK and its OTLP/HTTP exporter), imported only when otlp_endpoint is set."
        " Span attributes are ids (session, task, credential, provider, rule), never secrets.",
    ),
    Section(
        "Config: [sandbox]",
        "sandbox",
        (
            Key("podman", "table", False, "[sandbox.podman]: every rootful podman run of broker exec.", "none"),
            Key("docker", "table", False, "[sandbox.docker]: every rootful docker run of broker exec.", "none"),
        ),
    ),
    Section("Config: [sandbox.podman]", "sandbox.podman", ENGINE_KEYS, ENGINE_NOTE),
    Section("Config: [sandbox.docker]", "sandbox.docker", ENGINE_KEYS, ENGINE_NOTE),
)
