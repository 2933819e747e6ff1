"""The config, manifest and policy reference: one table per section, rendered to docs/reference.md.

Every key a loader reads is listed here or in its provider type's own
declaration (``Provider.reference()``, in the provider's package), and nothing
else: a test loads documents through the real loaders, records the keys they
read, and compares them with these tables; another test regenerates
docs/reference.md and compares it with the committed file. So neither the
docs nor the tables can drift from the code. The session environment's hints
are in ``broker.cli.reference_env``.
"""

from __future__ import annotations

from typing import Any

from broker.cli.reference_env import render_hints
from broker.egress.operations.parsing import SECTIONS as OPERATIONS_SECTIONS
from broker.egress.terminate.budget import REFERENCE_INTRO, REFERENCE_KEYS, SIZE
from broker.vocab.reference import Key, Section
from providers.base import Provider
from providers.registry import provider_classes

DURATION = "duration"


def operations_sections(title: str, path: str) -> tuple[Section, ...]:
    """The ``operations`` tables (``broker.egress.operations.parsing.SECTIONS``) as read at ``path``."""
    return tuple(
        Section(f"{title}: {suffix}", path + below, tuple(Key(*key) for key in keys), intro)
        for suffix, below, keys, intro in OPERATIONS_SECTIONS
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
            Key("evidence_budget", "table", False, "Each session's egress.request records: see its table.", "below"),
        ),
        "A credential's own hosts keep their provider's upstream_ca_file.",
    ),
    Section(
        "Config: [egress] evidence_budget",
        "egress.evidence_budget",
        tuple(Key(*k) for k in REFERENCE_KEYS),
        REFERENCE_INTRO,
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
)

DESTINATION = "HOST:PORT, *.SUFFIX:PORT (two labels or more), IP:PORT or [IPv6]:PORT"

CORE_MANIFEST = (
    Section(
        "Manifest: top level",
        "",
        (
            Key("version", "1", True, "Manifest format version."),
            Key("task", "name", True, "[a-z0-9][a-z0-9._-]{0,62}; policies match it with globs."),
            Key("ttl", DURATION, False, "Session lifetime; capped by policy and config.", "default_ttl"),
            Key("sandbox", "table", False, "Who owns the files and where they are mounted."),
            Key("network", "table", False, "What the sandbox may reach (exec --network allowlist).", "none"),
            Key("operations", "table", False, "Narrows the rule's operations (the same shape).", "the rule's"),
            Key("credentials", "list", True, "1 to 64 credentials."),
        ),
        "Untrusted input: unknown keys, duplicate keys, YAML tags, anchors and aliases are refused (exit 2).",
    ),
    Section(
        "Manifest: sandbox",
        "sandbox",
        (
            Key("uid", "integer", False, "Owner of the files; uid 0 needs allow_root_sandbox.", "the caller"),
            Key("gid", "integer", False, "Group of the files.", "the caller"),
            Key("env", "table", False, "Extra non-secret variables for broker exec (secret-looking names refused)."),
            Key("mount_path", "path", False, "Where the launcher mounts the session directory.", "/run/secrets"),
        ),
    ),
    Section(
        "Manifest: network",
        "network",
        (Key("allow", "list", True, f"1 to 200 destinations, {DESTINATION}; a rule's network must cover each."),),
        "Anything else is refused (exit 2): upper case, a trailing dot, non-ASCII (use xn--), user info, paths.",
    ),
    Section(
        "Manifest: credentials[] (every provider)",
        "credentials[]",
        (
            Key("name", "name", True, "[a-z0-9][a-z0-9_-]{0,31}; also its sub-directory; unique."),
            Key("provider", "string", True, "A provider instance of the config."),
            Key("ttl", DURATION, False, "At most the session's ttl.", "the session's"),
        ),
    ),
)

CORE_POLICY = (
    Section(
        "Policy file: top level",
        "",
        (Key("rules", "list", True, "1 to 1000 rules; every *.yaml file in policy_dir is loaded."),),
    ),
    Section(
        "Policy file: rules[]",
        "rules[]",
        (
            Key("id", "string", True, "Unique across all policy files."),
            Key("description", "string", False, "What the rule is for."),
            Key("tasks", "list", True, "Globs on the task name (* stops at /)."),
            Key("requesters", "list", False, "User name globs or uid:N of the caller.", "anyone"),
            Key("max_ttl", DURATION, False, "Cap for sessions this rule allows."),
            Key("sandbox_uids", "list", False, 'Sandbox uids allowed: integers or "A-B" ranges.', "none"),
            Key("sandbox_gids", "list", False, 'Sandbox gids allowed: integers or "A-B" ranges.', "none"),
            Key("allow_root_sandbox", "boolean", False, "Allow a sandbox uid/gid of 0.", "false"),
            Key("network", "list", False, f"Destinations sessions may ask for: {DESTINATION}.", "none"),
            Key("operations", "table", False, "What sessions may do on their hosts (git, github_api, http)."),
            Key(
                "approval",
                "table",
                False,
                "A person approves each session first: nothing is minted until then (see rules[].approval).",
                "none",
            ),
            Key(
                "delegate",
                "boolean",
                False,
                "broker exec sessions get broker.sock, where their sandbox may ask for child sessions covered by"
                " theirs (exit 3 naming the key that widens).",
                "false",
            ),
            Key("delegate_depth", "integer", False, "Levels of children (1 to 8): 1 = children cannot delegate.", "1"),
            Key("grants", "list", True, "What the rule allows, per provider instance."),
        ),
        "Deny by default: every credential must be covered by a grant of a rule matching task and requester.",
    ),
    Section(
        "Policy file: rules[].approval",
        "rules[].approval",
        (
            Key(
                "approvers",
                "list",
                True,
                'uids (or "uid:N") and "group:NAME" (the caller\'s gid or supplementary groups, as the kernel'
                " has them); never the requester itself. A session drawing on several such rules needs an"
                " approver named by each.",
            ),
            Key("timeout", DURATION, False, "To decide, and then to collect the approved session (at most 7d).", "15m"),
        ),
    ),
    Section(
        "Policy file: rules[].grants[]",
        "rules[].grants[]",
        (
            Key("provider", "string", True, "A provider instance of the config."),
            Key("max_ttl", DURATION, False, "Cap for credentials of this grant."),
        ),
    ),
)


#: What the core reads of a ``[providers.NAME]`` table whose type has proxy facts (``Provider.proxy``).
PROXY_KEYS = (
    Key("proxy_hosts", "list", False, "HOST:PORT where inject: proxy puts this provider's secret in."),
    Key("upstream_ca_file", "path", False, "CA bundle the proxy checks those hosts against.", "the system's"),
)


def _provider_config(cls: type[Provider[Any]]) -> Section:
    type_row = Key("type", f'"{cls.type_name}"', True, cls.reference().summary)
    proxy = PROXY_KEYS if cls.proxy is not None else ()
    return Section(
        f'Config: [providers.NAME] type = "{cls.type_name}"',
        f"providers.{cls.type_name}",
        (type_row, *cls.reference().config, *proxy),
    )


def _with_provider_keys(section: Section, keys: tuple[Key, ...]) -> Section:
    return Section(section.title, section.path, section.keys + keys, section.intro)


def _inject_key() -> Key:
    proxied = ", ".join(sorted(cls.proxy.reference for cls in provider_classes() if cls.proxy is not None))
    return Key(
        "inject",
        "file | proxy",
        False,
        f"{proxied}: proxy = the files hold a placeholder, exec's proxy the secret.",
        "file",
    )


def _sections() -> tuple[tuple[Section, ...], tuple[Section, ...], tuple[Section, ...]]:
    """The config, manifest and policy sections: the core's, with each registered provider type's keys."""
    classes = provider_classes()
    manifest_keys = (_inject_key(), *(key for cls in classes for key in cls.reference().manifest))
    grant_keys = tuple(key for cls in classes for key in cls.reference().grant)
    config = (*CORE_CONFIG, *(_provider_config(cls) for cls in classes))
    manifest = (
        *CORE_MANIFEST[:-1],
        _with_provider_keys(CORE_MANIFEST[-1], manifest_keys),
        *(section for cls in classes for section in cls.reference().sections),
        *operations_sections("Manifest", "operations"),
    )
    policy = (
        *CORE_POLICY[:-1],
        _with_provider_keys(CORE_POLICY[-1], grant_keys),
        *operations_sections("Policy file", "rules[].operations"),
    )
    return config, manifest, policy


CONFIG, MANIFEST, POLICY = _sections()


def render() -> str:
    lines = [
        "# Reference",
        "",
        "Generated from `broker/cli/reference.py` and each provider type's `reference.py` by",
        "`scripts/gen-reference`; a test keeps it equal to the keys the loaders really read. Do not edit by hand.",
    ]
    config, manifest, policy = _sections()  # the provider types registered now
    for part, sections in (("Operator config (TOML)", config), ("Task manifest", manifest), ("Policy files", policy)):
        lines += ["", f"## {part}"]
        for section in sections:
            lines += ["", f"### {section.title}", ""]
            if section.intro:
                lines += [section.intro, ""]
            lines += ["| key | type | required | default | meaning |", "|---|---|---|---|---|"]
            for key in section.keys:
                required = "yes" if key.required else "no"
                kind = key.kind.replace("|", "\\|")
                text = key.description.replace("|", "\\|")
                lines.append(f"| `{key.name}` | {kind} | {required} | {key.default} | {text} |")
    return "\n".join(lines + render_hints()) + "\n"
